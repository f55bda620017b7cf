"""The frontier job's Flink shell: intake, the keyed host function, metrics, index stages, audit."""
