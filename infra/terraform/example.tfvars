# terraform apply -var-file=example.tfvars  (see README.md in this folder)
namespace = "crawler"
image     = "registry.example.com/crawler/jobs:0.1.0"
bucket    = "example-crawler-data"

create_bucket = true
aws_region    = "eu-west-1"
# Job pods read AWS credentials from this secret (create it first, see README);
# leave null when the service account has an IAM role.
s3_credentials_secret = "crawl-s3-credentials"

kafka_mode     = "strimzi"
kafka_replicas = 3

frontier_parallelism   = 4
fetcher_parallelism    = 16
task_slots             = 2
checkpoint_interval_ms = 10000
state_backend          = "rocksdb"

user_agent = "ExampleBot"
politeness = {
  max_in_flight   = 1
  min_gap_s       = 2.0
  duration_factor = 10.0
  daily_budget    = 50000
}

topics = {
  discovered  = { partitions = 64, retention_ms = 604800000 }
  leases      = { partitions = 64, retention_ms = 86400000 }
  completions = { partitions = 64, retention_ms = 604800000 }
  index       = { partitions = 32, retention_ms = 2592000000 }
  deadletter  = { partitions = 4, retention_ms = -1 }
  control     = { partitions = 4, retention_ms = 604800000 }
  replies     = { partitions = 1, retention_ms = 86400000 }
  shards      = { partitions = 16, retention_ms = 604800000 }
}

crawl_settings = {
  "fetch.total_timeout_s" = 60
}
