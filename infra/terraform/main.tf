locals {
  # The image's layout (infra/image/Dockerfile): the project in /opt/crawler, its
  # Python 3.11 environment in /opt/venv, Flink 2.2.1 in /opt/flink.
  flink_python_jar = "local:///opt/flink/opt/flink-python-2.2.1.jar"

  kafka_bootstrap_servers = var.kafka_mode == "strimzi" ? "${var.kafka_cluster_name}-kafka-bootstrap.${var.namespace}.svc:9092" : var.kafka_bootstrap_servers

  settings = merge(var.crawl_settings, {
    "robots.user_agent"          = var.user_agent
    "politeness.max_in_flight"   = var.politeness.max_in_flight
    "politeness.min_gap_s"       = var.politeness.min_gap_s
    "politeness.duration_factor" = var.politeness.duration_factor
    "politeness.daily_budget"    = var.politeness.daily_budget
  })

  service_account = "crawl-flink"
}

module "manifests" {
  source = "./modules/manifests"

  namespace         = var.namespace
  image             = var.image
  image_pull_policy = var.image_pull_policy
  flink_python_jar  = local.flink_python_jar
  service_account   = local.service_account
  jobs = {
    frontier = merge(var.resources["frontier"], { parallelism = var.frontier_parallelism, task_slots = var.task_slots })
    fetcher  = merge(var.resources["fetcher"], { parallelism = var.fetcher_parallelism, task_slots = var.task_slots })
  }
  checkpoint_interval_ms  = var.checkpoint_interval_ms
  max_parallelism         = var.max_parallelism
  state_backend           = var.state_backend
  bucket                  = var.bucket
  s3_endpoint_url         = var.s3_endpoint_url
  s3_region               = var.aws_region
  s3_credentials_secret   = var.s3_credentials_secret
  kafka_bootstrap_servers = local.kafka_bootstrap_servers
  topic_prefix            = var.topic_prefix
  topics                  = var.topics
  kafka_cluster_name      = var.kafka_cluster_name
  kafka_replicas          = var.kafka_replicas
  kafka_storage_size      = var.kafka_storage_size
  kafka_version           = var.kafka_version
  settings                = local.settings
  prometheus_port         = var.prometheus_port

  # Generated and tested in infra/monitoring (see its README).
  grafana_dashboard_json      = file("${path.module}/../monitoring/crawler-dashboard.json")
  alert_rules_yaml            = file("${path.module}/../monitoring/alerts.yml")
  grafana_dashboard_namespace = var.grafana_dashboard_namespace
  prometheus_rule_labels      = var.prometheus_rule_labels
}

resource "kubernetes_namespace_v1" "crawler" {
  metadata {
    name   = var.namespace
    labels = { "app.kubernetes.io/part-of" = "crawler" }
  }
}

# -- Flink Kubernetes Operator -------------------------------------------------

resource "helm_release" "flink_operator" {
  count            = var.install_flink_operator ? 1 : 0
  name             = "flink-kubernetes-operator"
  repository       = "https://downloads.apache.org/flink/flink-kubernetes-operator-${var.flink_operator_chart_version}/"
  chart            = "flink-kubernetes-operator"
  version          = var.flink_operator_chart_version
  namespace        = var.flink_operator_namespace
  create_namespace = true
  wait             = true

  values = [yamlencode({
    watchNamespaces = [var.namespace]
    # The admission webhook needs cert-manager; the operator validates specs itself too.
    webhook = { create = false }
    # The jobs' service account and its Role are ours (below), not the chart's.
    jobServiceAccount = { create = false }
    metrics           = { port = var.prometheus_port }
  })]
}

# -- the jobs' identity -------------------------------------------------------

resource "kubernetes_service_account_v1" "flink" {
  metadata {
    name        = local.service_account
    namespace   = kubernetes_namespace_v1.crawler.metadata[0].name
    annotations = var.service_account_annotations
  }
  automount_service_account_token = true # the JobManager manages its TaskManager pods
}

# What a native-Kubernetes JobManager needs: its TaskManager pods, its services,
# and the config maps of Kubernetes HA (leader election, checkpoint pointers).
resource "kubernetes_role_v1" "flink" {
  metadata {
    name      = "crawl-flink"
    namespace = kubernetes_namespace_v1.crawler.metadata[0].name
  }
  rule {
    api_groups = [""]
    resources  = ["pods", "services", "configmaps"]
    verbs      = ["get", "list", "watch", "create", "update", "patch", "delete"]
  }
  rule {
    api_groups = ["apps"]
    resources  = ["deployments", "deployments/finalizers"]
    verbs      = ["get", "list", "watch", "create", "update", "patch", "delete"]
  }
}

resource "kubernetes_role_binding_v1" "flink" {
  metadata {
    name      = "crawl-flink"
    namespace = kubernetes_namespace_v1.crawler.metadata[0].name
  }
  role_ref {
    api_group = "rbac.authorization.k8s.io"
    kind      = "Role"
    name      = kubernetes_role_v1.flink.metadata[0].name
  }
  subject {
    kind      = "ServiceAccount"
    name      = kubernetes_service_account_v1.flink.metadata[0].name
    namespace = kubernetes_namespace_v1.crawler.metadata[0].name
  }
}

# -- Kafka (Strimzi) ----------------------------------------------------------

resource "helm_release" "strimzi" {
  count      = var.kafka_mode == "strimzi" ? 1 : 0
  name       = "strimzi-kafka-operator"
  repository = "oci://quay.io/strimzi-helm"
  chart      = "strimzi-kafka-operator"
  version    = var.strimzi_chart_version
  namespace  = kubernetes_namespace_v1.crawler.metadata[0].name
  wait       = true
}

resource "kubernetes_manifest" "kafka_node_pool" {
  count      = var.kafka_mode == "strimzi" ? 1 : 0
  manifest   = module.manifests.kafka_node_pool
  depends_on = [helm_release.strimzi]
}

resource "kubernetes_manifest" "kafka" {
  count    = var.kafka_mode == "strimzi" ? 1 : 0
  manifest = module.manifests.kafka_cluster
  wait {
    condition {
      type   = "Ready"
      status = "True"
    }
  }
  timeouts {
    create = "20m"
  }
  depends_on = [kubernetes_manifest.kafka_node_pool]
}

resource "kubernetes_manifest" "topic" {
  for_each   = var.kafka_mode == "strimzi" ? module.manifests.kafka_topics : {}
  manifest   = each.value
  depends_on = [kubernetes_manifest.kafka]
}

# -- object storage -----------------------------------------------------------

resource "aws_s3_bucket" "crawl" {
  #checkov:skip=CKV_AWS_144:Cross-region replication of raw bodies and checkpoints is an operator's choice (cost); versioning guards against overwrites.
  #checkov:skip=CKV_AWS_18:Access logging needs a separate log bucket the operator owns; enable it there.
  #checkov:skip=CKV2_AWS_62:No consumer of bucket event notifications; the index topic announces new objects.
  count         = var.create_bucket ? 1 : 0
  bucket        = var.bucket
  force_destroy = false # checkpoints and savepoints must survive a destroy by mistake
}

resource "aws_s3_bucket_versioning" "crawl" {
  count  = var.create_bucket ? 1 : 0
  bucket = aws_s3_bucket.crawl[0].id
  versioning_configuration {
    status = "Enabled"
  }
}

data "aws_caller_identity" "current" {
  count = var.create_bucket ? 1 : 0
}

resource "aws_kms_key" "crawl" {
  count                   = var.create_bucket ? 1 : 0
  description             = "Encrypts the crawler's bucket (${var.bucket})"
  enable_key_rotation     = true
  deletion_window_in_days = 30
  # The account administers and uses the key through IAM (the key's default policy,
  # written out); job pods reach it through their IAM role or access key.
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Sid       = "AccountAdministersThroughIAM"
      Effect    = "Allow"
      Principal = { AWS = "arn:aws:iam::${data.aws_caller_identity.current[0].account_id}:root" }
      Action    = "kms:*"
      Resource  = "*"
    }]
  })
}

resource "aws_s3_bucket_server_side_encryption_configuration" "crawl" {
  count  = var.create_bucket ? 1 : 0
  bucket = aws_s3_bucket.crawl[0].id
  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm     = "aws:kms"
      kms_master_key_id = aws_kms_key.crawl[0].arn
    }
    bucket_key_enabled = true
  }
}

resource "aws_s3_bucket_public_access_block" "crawl" {
  count                   = var.create_bucket ? 1 : 0
  bucket                  = aws_s3_bucket.crawl[0].id
  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

resource "aws_s3_bucket_lifecycle_configuration" "crawl" {
  count  = var.create_bucket ? 1 : 0
  bucket = aws_s3_bucket.crawl[0].id
  # Old versions of overwritten objects and abandoned multipart uploads (checkpoint
  # files are written once; the operator prunes old savepoints itself).
  rule {
    id     = "expire-noncurrent"
    status = "Enabled"
    filter {}
    noncurrent_version_expiration {
      noncurrent_days = 30
    }
    abort_incomplete_multipart_upload {
      days_after_initiation = 7
    }
  }
}

# -- the two jobs -------------------------------------------------------------

resource "kubernetes_manifest" "job" {
  for_each = module.manifests.deployments
  manifest = each.value

  field_manager {
    force_conflicts = true # the operator writes status; spec is ours
  }

  depends_on = [
    helm_release.flink_operator,
    kubernetes_role_binding_v1.flink,
    kubernetes_manifest.topic,
    aws_s3_bucket_versioning.crawl,
  ]
}

resource "kubernetes_manifest" "pod_monitor" {
  count = var.create_pod_monitor ? 1 : 0
  manifest = {
    apiVersion = "monitoring.coreos.com/v1"
    kind       = "PodMonitor"
    metadata   = { name = "crawl-flink", namespace = var.namespace }
    spec = {
      selector = { matchLabels = { type = "flink-native-kubernetes" } }
      # Flink rewrites a bucket's le="+Inf" as "_Inf" and "0.25" as "0_25": put them
      # back (infra/monitoring/relabel.yml) so that histogram_quantile reads them.
      podMetricsEndpoints = [{
        port     = "metrics"
        interval = "30s"
        metricRelabelings = [for r in yamldecode(file("${path.module}/../monitoring/relabel.yml")) : {
          sourceLabels = r.source_labels
          regex        = r.regex
          targetLabel  = r.target_label
          replacement  = r.replacement
        }]
      }]
    }
  }
}

# -- dashboard and alerts (infra/monitoring) ----------------------------------

resource "kubernetes_manifest" "grafana_dashboard" {
  count      = var.grafana_dashboard ? 1 : 0
  manifest   = module.manifests.grafana_dashboard
  depends_on = [kubernetes_namespace_v1.crawler]
}

resource "kubernetes_manifest" "prometheus_rule" {
  count      = var.prometheus_rules ? 1 : 0
  manifest   = module.manifests.prometheus_rule
  depends_on = [kubernetes_namespace_v1.crawler]
}
