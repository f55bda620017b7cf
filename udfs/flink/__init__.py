"""Flink adapters shared by the jobs: environment, Kafka sources and sinks, checkpoint settings."""
