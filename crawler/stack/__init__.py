"""The local stack: Kafka and S3 on loopback, a Flink session cluster, dependency downloads."""
