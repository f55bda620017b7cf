"""The relay job's Flink shell."""
