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
