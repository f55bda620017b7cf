variable "namespace" {
  description = "Kubernetes namespace of the crawler's FlinkDeployments and Kafka resources."
  type        = string
}

variable "image" {
  description = "Container image of both jobs (built from infra/image/Dockerfile)."
  type        = string
}

variable "image_pull_policy" {
  description = "Pull policy of the jobs' image."
  type        = string
  default     = "IfNotPresent"
}

variable "flink_version" {
  description = "spec.flinkVersion of the FlinkDeployments; must match the Flink inside the image."
  type        = string
  default     = "v2_2"
}

variable "flink_python_jar" {
  description = "local:// URI of the flink-python jar inside the image (the PythonDriver's jar)."
  type        = string
}

variable "app_dir" {
  description = "Folder inside the image holding the project (jobs/, udfs/, schemas/)."
  type        = string
  default     = "/opt/crawler"
}

variable "python" {
  description = "Python interpreter inside the image (a 3.11 virtual environment with the project installed)."
  type        = string
  default     = "/opt/venv/bin/python"
}

variable "service_account" {
  description = "Service account of the JobManager and TaskManager pods."
  type        = string
}

variable "jobs" {
  description = "Per job: parallelism, task slots per TaskManager and pod resources."
  type = map(object({
    parallelism        = number
    task_slots         = number
    jobmanager_cpu     = number
    jobmanager_memory  = string
    taskmanager_cpu    = number
    taskmanager_memory = string
  }))
}

variable "max_parallelism" {
  description = "Maximum parallelism (key groups) of both jobs."
  type        = number
}

variable "checkpoint_interval_ms" {
  description = "Checkpoint interval of both jobs, in milliseconds."
  type        = number
}

variable "state_backend" {
  description = "Flink state backend of both jobs: hashmap or rocksdb."
  type        = string
}

variable "bucket" {
  description = "S3 bucket for raw bodies, checkpoints, savepoints and HA metadata."
  type        = string
}

variable "s3_endpoint_url" {
  description = "S3 endpoint for an S3-compatible store; empty means AWS S3."
  type        = string
  default     = ""
}

variable "s3_region" {
  description = "Region of the bucket."
  type        = string
}

variable "s3_credentials_secret" {
  description = "Name of a Kubernetes secret with AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY; null when the pods get credentials from their service account (IRSA, workload identity)."
  type        = string
  default     = null
}

variable "kafka_bootstrap_servers" {
  description = "Kafka bootstrap servers the jobs connect to."
  type        = string
}

variable "topic_prefix" {
  description = "Topic names are <topic_prefix>.<stream>."
  type        = string
}

variable "topics" {
  description = "Per stream: partitions and retention in milliseconds (-1 keeps records forever)."
  type = map(object({
    partitions   = number
    retention_ms = number
  }))
}

variable "kafka_cluster_name" {
  description = "Name of the Strimzi Kafka cluster the KafkaTopic resources belong to."
  type        = string
  default     = "crawl"
}

variable "kafka_replicas" {
  description = "Brokers (and replication factor of the topics) of the Strimzi cluster."
  type        = number
  default     = 3
}

variable "kafka_version" {
  description = "Apache Kafka version of the Strimzi cluster."
  type        = string
  default     = "4.3.1"
}

variable "kafka_storage_size" {
  description = "Persistent volume size per Strimzi broker."
  type        = string
  default     = "100Gi"
}

variable "settings" {
  description = "Crawl configuration keys (dotted, as in udfs/config/crawler-default.yaml) to values; validated by the jobs at start."
  type        = any # keeps each value's type (a map would make them all strings)
  default     = {}
}

variable "prometheus_port" {
  description = "Port of Flink's Prometheus metrics reporter on every pod."
  type        = number
  default     = 9249
}

variable "grafana_dashboard_json" {
  description = "The Grafana dashboard's JSON (infra/monitoring/crawler-dashboard.json)."
  type        = string
}

variable "alert_rules_yaml" {
  description = "The Prometheus rule file of the crawl's alerts (infra/monitoring/alerts.yml)."
  type        = string
}

variable "grafana_dashboard_namespace" {
  description = "Namespace of the dashboard's ConfigMap (Grafana's sidecar watches its own namespace unless told otherwise); empty: the crawler's namespace."
  type        = string
  default     = ""
}

variable "prometheus_rule_labels" {
  description = "Extra labels of the PrometheusRule, for the Prometheus's ruleSelector (kube-prometheus-stack selects release = <its release name>)."
  type        = map(string)
  default     = {}
}
