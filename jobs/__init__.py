"""Flink job topologies. Each module is submitted on its own: `flink run -py jobs/<name>.py`."""
