"""Flink adapters shared by the jobs: environment, Kafka sources and sinks, checkpoint settings."""

from pathlib import Path

# A local job's Flink working files (its JVM's java.io.tmpdir: the MiniCluster's folder,
# RocksDB's instances, the RPC system's and the Table planner's unpacked jars, the Python
# workers' folders; 60-150 MB a job) go in a folder of the job's own, named by the PID of
# its Python process, and are removed when the job has ended (udfs.flink.runtime
# local_tmp_dir, crawler.run JobProcess). In /tmp, Flink's own default, and short: RocksDB
# names each instance's LOG file after the instance's whole path (some 220 characters
# below this folder), and a name past 255 bytes fails the job.
TMP_BASE = Path("/tmp")
TMP_PREFIX = "crawl-flink-"


def job_tmp_dir(pid: int, base: Path | None = None) -> Path:
    """The folder of the local job whose Python process is `pid`."""
    return (TMP_BASE if base is None else base) / f"{TMP_PREFIX}{pid}"
