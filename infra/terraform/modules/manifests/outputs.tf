output "deployments" {
  description = "FlinkDeployment manifests by job name (frontier, fetcher)."
  value       = local.deployments
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
