output "deployments" {
  description = "FlinkDeployment manifests by job name (frontier, fetcher)."
  value       = local.deployments

  precondition {
    condition     = local.task_heap_mb["frontier"] >= 1024
    error_message = "resources: the frontier's TaskManager memory leaves its JVM heap ${local.task_heap_mb["frontier"]} MB (under 1024) beside its host caches, task_slots x ${local.frontier_cache_mb} MB (frontier.cache_urls, frontier.cache_hosts): give it more memory or lower frontier.cache_urls."
  }
}

output "settings" {
  description = "Crawl configuration each job starts with (dotted keys), as passed by --set."
  value       = local.settings
}

output "kafka_topics" {
  description = "Strimzi KafkaTopic manifests by stream."
  value       = local.kafka_topics
}

output "kafka_node_pool" {
  description = "Strimzi KafkaNodePool manifest (dual-role KRaft nodes)."
  value       = local.kafka_node_pool
}

output "kafka_cluster" {
  description = "Strimzi Kafka manifest."
  value       = local.kafka_cluster
}

output "grafana_dashboard" {
  description = "ConfigMap manifest of the crawl's Grafana dashboard (label grafana_dashboard = \"1\" for Grafana's sidecar)."
  value       = local.grafana_dashboard
}

output "prometheus_rule" {
  description = "PrometheusRule manifest of the crawl's alert rules (infra/monitoring/alerts.yml)."
  value       = local.prometheus_rule
}
