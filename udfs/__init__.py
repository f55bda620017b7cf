"""Flink adapters and shared plumbing of the crawler; the rules themselves live in udfs.core."""
