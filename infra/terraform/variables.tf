# -- cluster ------------------------------------------------------------------

variable "kubeconfig_path" {
  description = "Path of the kubeconfig used by the kubernetes and helm providers."
  type        = string
  default     = "~/.kube/config"
}

variable "kube_context" {
  description = "kubeconfig context to deploy into; null uses the current context."
  type        = string
  default     = null
}

variable "namespace" {
  description = "Namespace of the crawler (FlinkDeployments, Kafka, service account, secrets)."
  type        = string
  default     = "crawler"

  validation {
    condition     = can(regex("^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$", var.namespace))
    error_message = "namespace must be a DNS-1123 label (lower-case letters, digits, '-')."
  }
}

# -- Flink Kubernetes Operator -------------------------------------------------

variable "install_flink_operator" {
  description = "Install the Flink Kubernetes Operator with Helm; false when the cluster already runs one that watches var.namespace."
  type        = bool
  default     = true
}

variable "flink_operator_namespace" {
  description = "Namespace of the Flink Kubernetes Operator."
  type        = string
  default     = "flink-operator"
}

variable "flink_operator_chart_version" {
  description = "Helm chart version of the Flink Kubernetes Operator (1.13 or newer supports Flink 2.2)."
  type        = string
  default     = "1.15.0"

  validation {
    condition     = can(regex("^1\\.(1[3-9]|[2-9][0-9])\\.[0-9]+$", var.flink_operator_chart_version))
    error_message = "flink_operator_chart_version must be 1.13.0 or newer: older operators do not know Flink 2.2."
  }
}

# -- the jobs -----------------------------------------------------------------

variable "image" {
  description = "Image of both jobs, built from infra/image/Dockerfile and pushed to a registry the cluster can pull from; a fixed tag or a digest, never :latest."
  type        = string

  validation {
    condition     = can(regex("(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}|@sha256:[a-f0-9]{64})$", var.image)) && !endswith(var.image, ":latest")
    error_message = "image must carry a fixed tag or a digest (not :latest), so that changing it is an upgrade the operator can see."
  }
}

variable "image_pull_policy" {
  description = "Pull policy of the jobs' image."
  type        = string
  default     = "IfNotPresent"

  validation {
    condition     = contains(["Always", "IfNotPresent", "Never"], var.image_pull_policy)
    error_message = "image_pull_policy must be Always, IfNotPresent or Never."
  }
}

variable "frontier_parallelism" {
  description = "Parallelism of the frontier job (thread mode); hosts are spread over its subtasks by host_key."
  type        = number
  default     = 2

  validation {
    condition     = var.frontier_parallelism >= 1 && var.frontier_parallelism <= 1024 && floor(var.frontier_parallelism) == var.frontier_parallelism
    error_message = "frontier_parallelism must be a whole number from 1 to 1024."
  }
}

variable "fetcher_parallelism" {
  description = "Parallelism of the fetcher job (process mode); adds fetch capacity across hosts, never per host."
  type        = number
  default     = 4

  validation {
    condition     = var.fetcher_parallelism >= 1 && var.fetcher_parallelism <= 4096 && floor(var.fetcher_parallelism) == var.fetcher_parallelism
    error_message = "fetcher_parallelism must be a whole number from 1 to 4096."
  }
}

variable "task_slots" {
  description = "Task slots per TaskManager pod, both jobs; TaskManagers = ceil(parallelism / task_slots)."
  type        = number
  default     = 2

  validation {
    condition     = var.task_slots >= 1 && var.task_slots <= 32 && floor(var.task_slots) == var.task_slots
    error_message = "task_slots must be a whole number from 1 to 32."
  }
}

variable "resources" {
  description = "Per job (frontier, fetcher): CPU (cores) and memory (e.g. 4096m, 8g) of its JobManager and TaskManager pods. The frontier's TaskManager also holds one host cache per slot in Python memory (2.7 GiB when full at the default frontier.cache_urls), reserved as task off-heap memory."
  type = map(object({
    jobmanager_cpu     = number
    jobmanager_memory  = string
    taskmanager_cpu    = number
    taskmanager_memory = string
  }))
  default = {
    frontier = { jobmanager_cpu = 1, jobmanager_memory = "2048m", taskmanager_cpu = 2, taskmanager_memory = "16384m" }
    fetcher  = { jobmanager_cpu = 1, jobmanager_memory = "2048m", taskmanager_cpu = 2, taskmanager_memory = "4096m" }
  }

  validation {
    condition     = toset(keys(var.resources)) == toset(["frontier", "fetcher"])
    error_message = "resources must have exactly the jobs frontier and fetcher."
  }
  validation {
    condition = alltrue([
      for r in values(var.resources) :
      can(regex("^[0-9]+[mg]$", r.jobmanager_memory)) && can(regex("^[0-9]+[mg]$", r.taskmanager_memory)) &&
      r.jobmanager_cpu > 0 && r.taskmanager_cpu > 0
    ])
    error_message = "resources: memory like 2048m or 8g, CPU above 0."
  }
}

variable "max_parallelism" {
  description = "Maximum parallelism (key groups) of both jobs: the most subtasks a job can be rescaled to. Fixed by a job's first checkpoint; a savepoint restores only into the same value."
  type        = number
  default     = 4096

  validation {
    condition     = var.max_parallelism >= 1 && var.max_parallelism <= 32768 && floor(var.max_parallelism) == var.max_parallelism && var.max_parallelism >= var.frontier_parallelism && var.max_parallelism >= var.fetcher_parallelism
    error_message = "max_parallelism must be a whole number from 1 to 32768, at least each job's parallelism."
  }
}

variable "checkpoint_interval_ms" {
  description = "Checkpoint interval of both jobs in ms. A discovered URL is durable, and a Kafka transaction committed, once a checkpoint completes."
  type        = number
  default     = 10000

  validation {
    condition     = var.checkpoint_interval_ms >= 1000 && var.checkpoint_interval_ms <= 60000
    error_message = "checkpoint_interval_ms must be from 1000 to 60000 (the Kafka transactions stay open that long)."
  }
}

variable "state_backend" {
  description = "Flink state backend: rocksdb (state on local disk, incremental checkpoints; for billions of URLs) or hashmap (on the heap)."
  type        = string
  default     = "rocksdb"

  validation {
    condition     = contains(["rocksdb", "hashmap"], var.state_backend)
    error_message = "state_backend must be rocksdb or hashmap."
  }
}

# -- crawl policy -------------------------------------------------------------

variable "user_agent" {
  description = "Product token of the crawler (robots.txt group and User-Agent)."
  type        = string
  default     = "FlinkCrawler"

  validation {
    condition     = can(regex("^[A-Za-z_-]+$", var.user_agent))
    error_message = "user_agent must be a product token: letters, '_' and '-' only (RFC 9309)."
  }
}

variable "politeness" {
  description = "Default per-host politeness: requests in flight, minimum gap in seconds, the fetch-duration factor and the daily page budget."
  type = object({
    max_in_flight   = number
    min_gap_s       = number
    duration_factor = number
    daily_budget    = number
  })
  default = {
    max_in_flight   = 1
    min_gap_s       = 1.0
    duration_factor = 10.0
    daily_budget    = 100000
  }

  validation {
    condition = (var.politeness.max_in_flight >= 1 && var.politeness.max_in_flight <= 16 &&
      var.politeness.min_gap_s >= 0.1 && var.politeness.duration_factor >= 0 &&
    var.politeness.daily_budget >= 1)
    error_message = "politeness: max_in_flight 1-16, min_gap_s at least 0.1, duration_factor at least 0, daily_budget at least 1."
  }
}

variable "crawl_settings" {
  description = "More crawl configuration, dotted keys of udfs/config/crawler-default.yaml to values (e.g. \"fetch.total_timeout_s\" = 60); each job checks them at start and fails naming an unknown key."
  # `any`, not map(any): a map would turn mixed values into strings, and the jobs
  # refuse "60" where they expect a number.
  type    = any
  default = {}

  validation {
    condition     = can(keys(var.crawl_settings)) && alltrue([for k in keys(var.crawl_settings) : can(regex("^[a-z_]+(\\.[a-z_0-9]+)+$", k))])
    error_message = "crawl_settings must map dotted keys (section.key) to values."
  }
}

# -- Kafka --------------------------------------------------------------------

variable "kafka_mode" {
  description = "strimzi: install the Strimzi operator and a KRaft Kafka cluster in var.namespace; external: use var.kafka_bootstrap_servers."
  type        = string
  default     = "strimzi"

  validation {
    condition     = contains(["strimzi", "external"], var.kafka_mode)
    error_message = "kafka_mode must be strimzi or external."
  }
}

variable "kafka_bootstrap_servers" {
  description = "Bootstrap servers of an existing Kafka cluster (kafka_mode = external), host:port[,host:port]."
  type        = string
  default     = ""

  validation {
    condition     = var.kafka_bootstrap_servers == "" || can(regex("^[^,:\\s]+:[0-9]+(,[^,:\\s]+:[0-9]+)*$", var.kafka_bootstrap_servers))
    error_message = "kafka_bootstrap_servers must look like host:port[,host:port]."
  }
  validation {
    condition     = var.kafka_mode == "strimzi" || var.kafka_bootstrap_servers != ""
    error_message = "kafka_bootstrap_servers is required when kafka_mode is external."
  }
}

variable "strimzi_chart_version" {
  description = "Helm chart version of the Strimzi operator (1.0 or newer: the kafka.strimzi.io/v1 API)."
  type        = string
  default     = "1.2.0"
}

variable "kafka_version" {
  description = "Apache Kafka version the Strimzi cluster runs (one the Strimzi release supports)."
  type        = string
  default     = "4.3.1"
}

variable "kafka_cluster_name" {
  description = "Name of the Strimzi Kafka cluster."
  type        = string
  default     = "crawl"
}

variable "kafka_replicas" {
  description = "KRaft nodes of the Strimzi cluster (each controller and broker) and the topics' replication factor."
  type        = number
  default     = 3

  validation {
    condition     = var.kafka_replicas >= 1 && floor(var.kafka_replicas) == var.kafka_replicas
    error_message = "kafka_replicas must be a whole number, at least 1."
  }
}

variable "kafka_storage_size" {
  description = "Persistent volume per Kafka node."
  type        = string
  default     = "500Gi"
}

variable "topic_prefix" {
  description = "Topic names are <topic_prefix>.<stream>; streams: discovered, leases, completions, index, deadletter, control, replies, shards."
  type        = string
  default     = "crawl"

  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9.-]*$", var.topic_prefix))
    error_message = "topic_prefix: lower-case letters, digits, '.' and '-'."
  }
}

variable "topics" {
  description = "Per stream: partitions and retention in ms (-1 keeps records forever). Partitions bound each job's useful parallelism."
  type = map(object({
    partitions   = number
    retention_ms = number
  }))
  default = {
    discovered  = { partitions = 64, retention_ms = 604800000 }
    leases      = { partitions = 64, retention_ms = 86400000 }
    completions = { partitions = 64, retention_ms = 604800000 }
    index       = { partitions = 32, retention_ms = 2592000000 }
    deadletter  = { partitions = 4, retention_ms = -1 }
    control     = { partitions = 4, retention_ms = 604800000 }
    replies     = { partitions = 1, retention_ms = 86400000 }
    shards      = { partitions = 16, retention_ms = 604800000 }
  }

  validation {
    condition     = toset(keys(var.topics)) == toset(["discovered", "leases", "completions", "index", "deadletter", "control", "replies", "shards"])
    error_message = "topics must have exactly the streams discovered, leases, completions, index, deadletter, control, replies and shards."
  }
  validation {
    condition     = alltrue([for t in values(var.topics) : t.partitions >= 1 && (t.retention_ms == -1 || t.retention_ms >= 3600000)])
    error_message = "topics: partitions at least 1; retention_ms -1 or at least one hour."
  }
}

# -- object storage -----------------------------------------------------------

variable "create_bucket" {
  description = "Create the S3 bucket with the AWS provider; false uses an existing bucket named var.bucket."
  type        = bool
  default     = false

  validation {
    condition     = !(var.create_bucket && var.s3_endpoint_url != "")
    error_message = "create_bucket makes an AWS bucket; with s3_endpoint_url (an S3-compatible store) create the bucket there and leave create_bucket false."
  }
}

variable "bucket" {
  description = "S3 bucket for raw bodies, checkpoints, savepoints and HA metadata."
  type        = string

  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", var.bucket))
    error_message = "bucket must be a valid S3 bucket name."
  }
}

variable "aws_region" {
  description = "AWS region of the bucket."
  type        = string
  default     = "us-east-1"
}

variable "s3_endpoint_url" {
  description = "Endpoint of an S3-compatible store (MinIO, SeaweedFS, Ceph); empty for AWS S3."
  type        = string
  default     = ""

  validation {
    condition     = var.s3_endpoint_url == "" || can(regex("^https?://", var.s3_endpoint_url))
    error_message = "s3_endpoint_url must be empty or an http(s) URL."
  }
}

variable "s3_credentials_secret" {
  description = "Name of an existing Kubernetes secret in var.namespace with AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY for the job pods; null when the service account carries an IAM role (IRSA, Pod Identity). Credentials never go in variables."
  type        = string
  default     = null
}

variable "service_account_annotations" {
  description = "Annotations of the jobs' service account, e.g. eks.amazonaws.com/role-arn for IRSA."
  type        = map(string)
  default     = {}
}

# -- metrics ------------------------------------------------------------------

variable "prometheus_port" {
  description = "Port of Flink's Prometheus reporter on every JobManager and TaskManager pod."
  type        = number
  default     = 9249

  validation {
    condition     = var.prometheus_port >= 1024 && var.prometheus_port <= 65535
    error_message = "prometheus_port must be from 1024 to 65535."
  }
}

variable "create_pod_monitor" {
  description = "Create a PodMonitor (Prometheus Operator CRD) that scrapes both jobs."
  type        = bool
  default     = false
}

variable "grafana_dashboard" {
  description = "Create a ConfigMap with the crawl's Grafana dashboard (infra/monitoring/crawler-dashboard.json), labelled grafana_dashboard = \"1\" for Grafana's dashboard sidecar."
  type        = bool
  default     = true
}

variable "grafana_dashboard_namespace" {
  description = "Namespace of the dashboard's ConfigMap: the one Grafana's sidecar watches (its own, unless searchNamespace says otherwise). Empty: the crawler's namespace."
  type        = string
  default     = ""
}

variable "prometheus_rules" {
  description = "Create a PrometheusRule (Prometheus Operator CRD) with the crawl's alert rules (infra/monitoring/alerts.yml). Needs the CRD, like create_pod_monitor."
  type        = bool
  default     = false
}

variable "prometheus_rule_labels" {
  description = "Extra labels of the PrometheusRule, to match the Prometheus's ruleSelector (kube-prometheus-stack: release = <its release name>)."
  type        = map(string)
  default     = {}
}
