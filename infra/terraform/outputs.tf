output "namespace" {
  description = "Namespace of the crawler."
  value       = var.namespace
}

output "flink_deployments" {
  description = "Names of the FlinkDeployment resources by job."
  value       = { for job, d in module.manifests.deployments : job => d.metadata.name }
}

output "kafka_bootstrap_servers" {
  description = "Bootstrap servers the jobs use."
  value       = local.kafka_bootstrap_servers
}

output "topics" {
  description = "Kafka topic names by stream."
  value       = { for s, t in var.topics : s => "${var.topic_prefix}.${s}" }
}

output "bucket" {
  description = "Bucket of raw bodies, checkpoints (s3://<bucket>/checkpoints/<job>) and savepoints (s3://<bucket>/savepoints/<job>)."
  value       = var.bucket
}

output "crawl_settings" {
  description = "The crawl configuration each job starts with (dotted keys)."
  value       = module.manifests.settings
}
