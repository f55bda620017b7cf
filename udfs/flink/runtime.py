"""Flink shell: the execution environment and Kafka connectors built from the configuration.

Only adapters live here; rules live in `udfs/core`. Records cross into Python
as raw bytes and are decoded with `udfs.wire.avro`, so a record that cannot be read
becomes a dead letter instead of failing the job.

`KafkaIO` uses the Table API's Kafka connector with the raw format for key and
value: it is the way PyFlink reads a record's key, partition and offset and
writes a record key (host_key for keyed topics), which the DataStream
KafkaSource/KafkaSink wrappers cannot do from Python.
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pyflink.common import Configuration, Types, WatermarkStrategy
from pyflink.common.serialization import ByteArraySchema
from pyflink.datastream import DataStream, KeyedStream, OutputTag, StreamExecutionEnvironment
from pyflink.datastream.connectors.base import DeliveryGuarantee
from pyflink.datastream.connectors.kafka import (
    KafkaOffsetResetStrategy,
    KafkaOffsetsInitializer,
    KafkaRecordSerializationSchema,
    KafkaSink,
    KafkaSource,
)

from udfs.config import Config
from udfs.flink import TMP_BASE, TMP_PREFIX, job_tmp_dir

ROW_KEY_VALUE = Types.ROW_NAMED(["key", "value"], [Types.PRIMITIVE_ARRAY(Types.BYTE()),
                                                 Types.PRIMITIVE_ARRAY(Types.BYTE())])

log = logging.getLogger(__name__)

BYTES = Types.PRIMITIVE_ARRAY(Types.BYTE())


def keyed_by_first(ds: DataStream) -> KeyedStream:
    """`ds`, rows of (key string, value), keyed by their first field in the JVM.

    PyFlink's key_by puts a Python operator before every keyed exchange, which builds
    Row(key, row) for each record: a call into Python for nothing when the row already
    has its key in front (a separate task, even, behind a union or a side output). The
    key here is what that operator gives (Row(key): PyFlink's own selector on the
    first field), so state and key groups are the same. The keyed function gets the
    value alone (the row's second field); its key is ctx.get_current_key()."""
    from pyflink.java_gateway import get_gateway

    j_keyed = ds._j_data_stream.keyBy(get_gateway().jvm.KeyByKeySelector(),
                                      Types.ROW([Types.STRING()]).get_java_type_info())
    return KeyedStream(j_keyed, ds.get_type(), ds)


def side_output(ds: DataStream, tag: OutputTag) -> DataStream:
    """The rows `ds` emits to `tag`, read in the JVM. PyFlink's get_side_output puts a
    Python identity map behind each side output: a call into Python a record."""
    return DataStream(ds._j_data_stream.getSideOutput(tag.get_java_output_tag()))


# A Kafka sink's two operators by the name KafkaIO gives its table ("sink<n>_<topic>"):
# "sink<n>: Writer" or "sink<n>: Committer", whatever the topic is called.
_SINK_OPERATOR = re.compile(r"^(sink\d+)_.*: (Writer|Committer)$")


def pinned_name(operator_name: str) -> str | None:
    """The name a pinned operator id goes by: a Kafka sink's writer or committer."""
    m = _SINK_OPERATOR.match(operator_name)
    return f"{m[1]}: {m[2]}" if m else None


def pin_operator_ids(graph: Any, pinned_ids: Mapping[str, str]) -> None:
    """Give the operators of `graph` (a Java StreamGraph) named in `pinned_ids` (by
    pinned_name) those ids (Flink's setUidHash), which their state is restored under.

    The Table API's Kafka sinks have no uid: Flink derives their ids from where they
    stand in the graph, so a change anywhere before them (an operator fewer) moves
    them, and the state of an earlier build's savepoint (open transactions, what is
    left to commit) would no longer find its operator. Raises if a pin names no
    operator or two: the graph is not the one the pins were taken from."""
    found: dict[str, int] = {}
    for node in graph.getStreamNodes().toArray():
        name = pinned_name(node.getOperatorName())
        if name is not None and name in pinned_ids and node.getTransformationUID() is None:
            node.setUserHash(pinned_ids[name])
            found[name] = found.get(name, 0) + 1
    wrong = sorted(n for n in pinned_ids if found.get(n) != 1)
    if wrong:
        raise RuntimeError(f"pinned operator ids that match no single operator: {wrong}")


def execute(env: StreamExecutionEnvironment, job_name: str,
            pinned_ids: Mapping[str, str] | None = None) -> None:
    """env.execute(job_name), with the operator ids in `pinned_ids` (pin_operator_ids)."""
    graph = env._generate_stream_graph(clear_transformations=True, job_name=job_name)
    pin_operator_ids(graph, pinned_ids or {})
    run_graph(env, graph)


def run_graph(env: StreamExecutionEnvironment, graph: Any) -> None:
    """Run a Java StreamGraph of `env` (PyFlink's env.execute, after its graph is made)."""
    env._j_stream_execution_environment.execute(graph)


def job_jars(cfg: Config) -> list[str]:
    """file:// URLs of the jars a job needs: flink.jars, else the cached Kafka connector.

    On a cluster the connector is usually in Flink's lib/ (or passed with
    `flink run -j`); then flink.jars stays empty and no cached jar exists.
    """
    jars = cfg["flink.jars"]
    if not jars:
        try:
            from crawler.stack.deps import connector_jar_path
        except ImportError:  # a job shipped without the tooling package
            return []
        cached = connector_jar_path(cfg["flink.kafka_connector_version"])
        if cached.exists():
            jars = [str(cached)]
        else:
            log.warning("no flink.jars and no cached Kafka connector at %s; "
                        "assuming the cluster provides it (run `crawl deps` for local runs)",
                        cached)
    return [j if "://" in j else Path(j).resolve().as_uri() for j in jars]


def checkpoint_uri(cfg: Config) -> str:
    """flink.checkpoint_dir as a URI (default: <local.state_dir>/checkpoints)."""
    where = cfg["flink.checkpoint_dir"] or str(Path(cfg["local.state_dir"]) / "checkpoints")
    return where if "://" in where else Path(where).resolve().as_uri()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def sweep_tmp_dirs(base: Path | None = None, alive=_pid_alive) -> list[Path]:
    """Remove the local jobs' folders (udfs.flink.job_tmp_dir) under `base` whose process
    no longer runs: a job killed before it could remove its own, and whose launcher did
    not either; the ones removed."""
    gone = []
    for child in sorted((TMP_BASE if base is None else base).glob(TMP_PREFIX + "*")):
        pid = child.name[len(TMP_PREFIX):]
        if child.is_dir() and pid.isdigit() and not alive(int(pid)):
            shutil.rmtree(child, ignore_errors=True)
            gone.append(child)
    return gone


def local_tmp_dir(base: Path | None = None) -> Path | None:
    """Give this process's local Flink JVM a folder of its own as java.io.tmpdir (and so
    Flink's io.tmp.dirs): udfs.flink.job_tmp_dir of this process, removed when it exits
    normally, and by its launcher (JobProcess) however it ends. By default every job's
    working files went to /tmp itself, where a JVM stopped by a signal (how a run, a
    bench or a test ends its jobs) left them: 60-150 MB each time. The folders of jobs no
    longer running are removed first. None, and nothing is set, if this process's JVM is
    not its own to start (a `flink run` client's, or one started already) or JVM_ARGS
    names a java.io.tmpdir already."""
    import pyflink.java_gateway as gateway

    if gateway._gateway is not None or "PYFLINK_GATEWAY_PORT" in os.environ:
        return None
    jvm_args = os.environ.get("JVM_ARGS", "")
    if "-Djava.io.tmpdir=" in jvm_args:
        return None
    sweep_tmp_dirs(base)
    where = job_tmp_dir(os.getpid(), base)
    where.mkdir(parents=True, exist_ok=True)
    # PyFlink's launcher puts JVM_ARGS on the command line of the local JVM it starts.
    os.environ["JVM_ARGS"] = f"{jvm_args} -Djava.io.tmpdir={where}".strip()
    atexit.register(shutil.rmtree, where, ignore_errors=True)
    return where


ROCKSDB_LEVELS = 7  # RocksDB's default num_levels, which Flink keeps


def rocksdb_compression(uncompressed_levels: int) -> str:
    """Flink's state.backend.rocksdb.compression.per.level: the top levels plain, the
    rest Snappy (Flink's default for every level)."""
    n = max(0, min(uncompressed_levels, ROCKSDB_LEVELS))
    return ";".join(["NO_COMPRESSION"] * n + ["SNAPPY_COMPRESSION"] * (ROCKSDB_LEVELS - n))


def make_env(cfg: Config, *, thread_mode: bool = False, bundle_size: int | None = None,
             bundle_time_ms: int | None = None, restore_from: str | None = None,
             metrics_port: int = 0, skip_unclaimed_state: bool = False
             ) -> StreamExecutionEnvironment:
    """A StreamExecutionEnvironment with checkpointing, restarts and jars from `cfg`.

    `bundle_size`: records handed to a process-mode Python worker at a time. A
    checkpoint waits until the worker has finished its bundle, so a slow record
    delays checkpoints by up to a bundle's worth of them. `restore_from`: a savepoint or
    retained checkpoint to start from (a local MiniCluster; `flink run -s` on a cluster).
    `skip_unclaimed_state`: a restore skips the state of operators this graph no longer
    has (Flink's allowNonRestoredState), for a job whose state is all disposable.
    `metrics_port`: Flink's Prometheus reporter serves the job's metrics there (a local
    MiniCluster; a cluster's reporters come from its own configuration); 0: none."""
    # Logs go to FLINK_LOG_DIR (the job's own folder when JobProcess started it, else
    # under the state folder), never into the installed pyflink package (its log/
    # folder is the default): the local gateway's Flink log (read when PyFlink starts
    # its JVM, so only if none runs yet; a `flink run` client keeps its own)...
    state_dir = Path(cfg["local.state_dir"]).resolve()
    os.environ.setdefault("FLINK_LOG_DIR", str(state_dir / "flink-logs"))
    local_tmp_dir()  # ... and its working files in a folder of its own
    if metrics_port:
        # A local MiniCluster looks for reporters on the JVM's classpath only, not among
        # PyFlink's plugins; PyFlink's launcher puts HADOOP_CLASSPATH on the classpath of
        # the JVM it starts (so only if none runs yet in this process).
        import pyflink

        jar = next((Path(pyflink.__file__).resolve().parent / "plugins" /
                    "metrics-prometheus").glob("flink-metrics-prometheus-*.jar"), None)
        extra = os.environ.get("HADOOP_CLASSPATH", "")
        if jar is not None and str(jar) not in extra:
            os.environ["HADOOP_CLASSPATH"] = os.pathsep.join(p for p in (extra, str(jar)) if p)
    conf = Configuration()
    # ... and RocksDB's LOG files (below it), unless the Flink configuration of this JVM's
    # FLINK_CONF_DIR says where they go (a cluster's config.yaml under `flink run`;
    # the pyflink package's, which does not, for local runs).
    from pyflink.java_gateway import get_gateway

    try:
        cluster_sets = get_gateway().jvm.org.apache.flink.configuration.GlobalConfiguration \
            .loadConfiguration().containsKey("state.backend.rocksdb.log.dir")
    except Exception:  # no readable FLINK_CONF_DIR: nothing sets it
        cluster_sets = False
    if cfg["flink.state_backend"] == "rocksdb" and not cluster_sets:
        # With Flink's own log of this job: a folder per job when JobProcess started it
        # (`crawl run`, benches, tests), which goes with that job's other logs. RocksDB
        # writes a LOG per instance, named by its path: a folder every job shared
        # gained 6-7 files per job start, never removed (690 files, 220 MB here).
        rocksdb_logs = Path(os.environ["FLINK_LOG_DIR"]) / "rocksdb"
        rocksdb_logs.mkdir(parents=True, exist_ok=True)
        conf.set_string("state.backend.rocksdb.log.dir", str(rocksdb_logs))
    if bundle_size is not None:
        conf.set_string("python.fn-execution.bundle.size", str(bundle_size))
    if bundle_time_ms is not None:
        conf.set_string("python.fn-execution.bundle.time", str(bundle_time_ms))
    jars = job_jars(cfg)
    if jars:
        conf.set_string("pipeline.jars", ";".join(jars))
    python = cfg["flink.python_executable"] or sys.executable
    conf.set_string("python.executable", python)
    conf.set_string("python.client.executable", python)
    conf.set_string("python.execution-mode", "thread" if thread_mode else "process")
    if thread_mode:
        # The embedded interpreter (pemja) sees only this path: the environment's
        # site-packages (pemja itself lives there) and this project's packages.
        import site

        project = str(Path(__file__).resolve().parents[2])
        conf.set_string("python.pythonpath", os.pathsep.join([*site.getsitepackages(),
                                                               project]))
    conf.set_string("execution.checkpointing.interval", f"{cfg['flink.checkpoint_interval_ms']}ms")
    conf.set_string("execution.checkpointing.mode", "EXACTLY_ONCE")
    conf.set_string("execution.checkpointing.dir", checkpoint_uri(cfg))
    # The newest N completed checkpoints are kept, and kept when the job is cancelled:
    # a restore can go back to an older one.
    conf.set_string("execution.checkpointing.num-retained",
                    str(cfg["flink.checkpoints_retained"]))
    conf.set_string("execution.checkpointing.externalized-checkpoint-retention",
                    "RETAIN_ON_CANCELLATION")
    if restore_from:
        conf.set_string("execution.state-recovery.path", restore_from)
    if skip_unclaimed_state:
        conf.set_string("execution.state-recovery.ignore-unclaimed-state", "true")
    conf.set_string("state.backend.type", cfg["flink.state_backend"])
    if cfg["flink.state_backend"] == "rocksdb":
        conf.set_string("execution.checkpointing.incremental", "true")
        conf.set_string("state.backend.rocksdb.compression.per.level",
                        rocksdb_compression(cfg["flink.rocksdb_uncompressed_levels"]))
        # A Bloom filter per SST file: a lookup of a URL the state does not hold (a
        # new URL of a big host) skips the files that cannot have it.
        bits = cfg["flink.rocksdb_bloom_bits_per_key"]
        conf.set_string("state.backend.rocksdb.use-bloom-filter", "true" if bits else "false")
        if bits:
            conf.set_string("state.backend.rocksdb.bloom-filter.bits-per-key", str(float(bits)))
    if cfg["flink.restart_strategy"] == "none":
        conf.set_string("restart-strategy.type", "none")
    else:
        conf.set_string("restart-strategy.type", "fixed-delay")
        conf.set_string("restart-strategy.fixed-delay.attempts", str(cfg["flink.restart_attempts"]))
        conf.set_string("restart-strategy.fixed-delay.delay", f"{cfg['flink.restart_delay_ms']}ms")
    # The key groups are fixed by the first checkpoint; set, not left to Flink's
    # default (128 for a job first run at parallelism 85 or less), so a crawl can
    # later grow past 128 subtasks.
    conf.set_string("pipeline.max-parallelism", str(cfg["flink.max_parallelism"]))
    if metrics_port:
        # The reporter ships with PyFlink (pyflink/plugins/metrics-prometheus).
        conf.set_string("metrics.reporter.prom.factory.class",
                        "org.apache.flink.metrics.prometheus.PrometheusReporterFactory")
        conf.set_string("metrics.reporter.prom.port", str(metrics_port))
    if cfg["flink.local_rest_port"]:
        # A local MiniCluster serves Flink's REST API (/jobs/overview, checkpoints) on
        # this port, on loopback only: `crawl status` reads a `crawl run`'s jobs there.
        conf.set_string("rest.port", str(cfg["flink.local_rest_port"]))
        conf.set_string("rest.address", "127.0.0.1")
        conf.set_string("rest.bind-address", "127.0.0.1")
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(cfg["flink.parallelism"])
    return env


def restoring(env: StreamExecutionEnvironment) -> bool:
    """Whether the job starts from a savepoint or checkpoint (`flink run -s`, the Kubernetes
    operator's upgrades, `execution.state-recovery.path`) rather than afresh."""
    conf = env._j_stream_execution_environment.getConfiguration().toMap()
    return bool(conf.get("execution.state-recovery.path") or
                conf.get("execution.savepoint.path"))


def kafka_source_stream(env: StreamExecutionEnvironment, cfg: Config, topic: str, group: str,
                        *, bounded: bool = False, name: str | None = None) -> DataStream:
    """Raw record values of `topic` as bytes, read from the committed offsets (else earliest).

    `bounded` stops at the offsets that are latest when the job starts (tests, backfills).
    """
    builder = (KafkaSource.builder()
               .set_bootstrap_servers(cfg["kafka.bootstrap_servers"])
               .set_topics(topic)
               .set_group_id(f"{cfg['kafka.group_id_prefix']}.{group}")
               .set_starting_offsets(KafkaOffsetsInitializer.committed_offsets(
                   KafkaOffsetResetStrategy.EARLIEST))
               .set_value_only_deserializer(ByteArraySchema())
               # Read only committed transactions of exactly-once producers.
               .set_property("isolation.level", "read_committed"))
    if bounded:
        builder = builder.set_bounded(KafkaOffsetsInitializer.latest())
    return env.from_source(builder.build(), WatermarkStrategy.no_watermarks(),
                           name or f"kafka:{topic}")


def kafka_sink(cfg: Config, topic: str, *, exactly_once: bool, transactional_id_prefix: str = ""
               ) -> KafkaSink:
    """A sink of byte values into `topic`; exactly-once sinks commit with each checkpoint."""
    serializer = (KafkaRecordSerializationSchema.builder()
                  .set_topic(topic)
                  .set_value_serialization_schema(ByteArraySchema())
                  .build())
    builder = (KafkaSink.builder()
               .set_bootstrap_servers(cfg["kafka.bootstrap_servers"])
               .set_record_serializer(serializer))
    if exactly_once:
        if not transactional_id_prefix:
            raise ValueError("an exactly-once Kafka sink needs a transactional_id_prefix")
        builder = (builder.set_delivery_guarantee(DeliveryGuarantee.EXACTLY_ONCE)
                   .set_transactional_id_prefix(transactional_id_prefix)
                   # Must exceed the longest checkpoint; the broker caps it.
                   .set_property("transaction.timeout.ms", "900000"))
    else:
        builder = builder.set_delivery_guarantee(DeliveryGuarantee.AT_LEAST_ONCE)
    return builder.build()


def _table_name(prefix: str, topic: str) -> str:
    return prefix + "_" + "".join(c if c.isalnum() else "_" for c in topic)


class KafkaIO:
    """Keyed Kafka sources and sinks of one job (Table API connector, raw key and value).

    Sources give Row(key, value, topic, partition, offset); sinks take Row(key, value),
    or Row(dest, key, value) and a `dest` to keep. Call `attach()` once after the last
    sink, before `env.execute()`.
    """

    def __init__(self, env: StreamExecutionEnvironment, cfg: Config) -> None:
        from pyflink.table import StreamTableEnvironment

        self.env = env
        self.cfg = cfg
        self.t_env = StreamTableEnvironment.create(env)
        self._statements = self.t_env.create_statement_set()
        self._sinks = 0
        self._views = 0
        self._tables: dict[int, tuple[DataStream, Any]] = {}  # each stream as a table, once

    def _common(self, topic: str) -> str:
        return (f"'connector' = 'kafka', 'topic' = '{topic}', "
                f"'properties.bootstrap.servers' = '{self.cfg['kafka.bootstrap_servers']}', "
                "'key.format' = 'raw', 'key.fields' = 'key', "
                "'value.format' = 'raw', 'value.fields-include' = 'EXCEPT_KEY'")

    def source(self, topic: str, group: str, *, bounded: bool = False,
               ingestion_time: bool = False) -> DataStream:
        """Records of `topic` from the group's committed offsets (else the earliest).

        `ingestion_time`: each record is stamped with the wall clock as it is read and
        the source emits watermarks from it (idle partitions are marked idle), so that
        event time downstream follows the crawl clock (see `clock`)."""
        name = _table_name("src", topic)
        bounded_opt = ", 'scan.bounded.mode' = 'latest-offset'" if bounded else ""
        fetch_wait = self.cfg["kafka.fetch_max_wait_ms"]
        if ingestion_time:  # a quiet partition must not hold event time back for long
            self.t_env.get_config().set("table.exec.source.idle-timeout",
                                        f"{self.cfg['frontier.clock_idle_ms']} ms")
        rowtime = (",\n              `ts` AS CAST(CURRENT_TIMESTAMP AS TIMESTAMP_LTZ(3)),"
                   "\n              WATERMARK FOR `ts` AS `ts`") if ingestion_time else ""
        self.t_env.execute_sql(f"""
            CREATE TABLE {name} (
              `key` BYTES, `value` BYTES,
              `topic` STRING METADATA VIRTUAL,
              `partition` INT METADATA VIRTUAL,
              `offset` BIGINT METADATA VIRTUAL{rowtime}
            ) WITH ({self._common(topic)},
              'properties.group.id' = '{self.cfg['kafka.group_id_prefix']}.{group}',
              'properties.isolation.level' = 'read_committed',
              'scan.startup.mode' = 'group-offsets',
              'properties.auto.offset.reset' = 'earliest',
              'properties.fetch.min.bytes' = '{self.cfg['kafka.fetch_min_bytes']}',
              'properties.fetch.max.wait.ms' = '{fetch_wait}'{bounded_opt})""")
        return self.t_env.to_data_stream(self.t_env.from_path(name))

    def clock(self, topic: str = "") -> DataStream:
        """The crawl clock: a stream of ticks whose timestamps drive the watermark.

        By default the wall clock (the datagen connector, which emits its rows once a
        second: event time moves in one-second steps); with `topic`, the timestamps
        of that topic's records instead, so that a test can drive a virtual clock
        through the same path. Quiet Kafka inputs are marked idle after
        frontier.clock_idle_ms, so the clock alone moves event time when nothing
        arrives.
        """
        self.t_env.get_config().set("table.exec.source.idle-timeout",
                                    f"{self.cfg['frontier.clock_idle_ms']} ms")
        if topic:
            self.t_env.execute_sql(f"""
                CREATE TABLE crawl_clock (
                  `value` BYTES,
                  `ts` TIMESTAMP_LTZ(3) METADATA FROM 'timestamp' VIRTUAL,
                  WATERMARK FOR `ts` AS `ts`
                ) WITH ('connector' = 'kafka', 'topic' = '{topic}',
                  'properties.bootstrap.servers' = '{self.cfg['kafka.bootstrap_servers']}',
                  'scan.startup.mode' = 'latest-offset', 'value.format' = 'raw')""")
        else:
            self.t_env.execute_sql("""
                CREATE TABLE crawl_clock (
                  `tick` INT,
                  `ts` AS CAST(CURRENT_TIMESTAMP AS TIMESTAMP_LTZ(3)),
                  WATERMARK FOR `ts` AS `ts`
                ) WITH ('connector' = 'datagen', 'rows-per-second' = '1')""")
        return self.t_env.to_data_stream(self.t_env.from_path("crawl_clock"))

    def without_schema(self, ds: DataStream, schema: str) -> DataStream:
        """`ds`, Kafka rows as a source gives them, without the records written with any
        version of `schema`: their values begin with its single-object header (marker
        and fingerprint), tested in the JVM as a range of byte strings, so a record
        dropped here never reaches Python."""
        from udfs.wire.avro import MAGIC, registry

        ranges = []
        for version in registry().versions(schema):
            head = MAGIC + version.fingerprint
            # The values that begin with `head`: from head to its successor.
            end = (int.from_bytes(head, "big") + 1).to_bytes(len(head), "big") \
                if head.strip(b"\xff") else None
            ranges.append(f"(`value` >= X'{head.hex()}'" +
                          (f" AND `value` < X'{end.hex()}')" if end else ")"))
        self._views += 1
        view = f"without_{schema}_{self._views}"
        self.t_env.create_temporary_view(view, ds)
        return self.t_env.to_data_stream(self.t_env.sql_query(
            f"SELECT * FROM {view} WHERE `value` IS NULL OR NOT ({' OR '.join(ranges)})"))

    def ticks(self, rows_per_second: int = 1) -> DataStream:
        """Empty records with the columns of a source table: unioned with the source,
        they call the operator downstream when no record arrives (the fetch function
        returns the results its engine finished meanwhile). The datagen connector emits
        its rows once a second."""
        self.t_env.execute_sql(f"""
            CREATE TABLE crawl_ticks (`tick` INT)
            WITH ('connector' = 'datagen', 'rows-per-second' = '{rows_per_second}')""")
        table = self.t_env.sql_query("""
            SELECT CAST(NULL AS BYTES) AS `key`, NULLIF(CAST(X'' AS BYTES), X'00') AS `value`,
                   NULLIF(CAST('' AS STRING), 'x') AS `topic`,
                   NULLIF(CAST(0 AS INT), 1) AS `partition`,
                   NULLIF(CAST(0 AS BIGINT), 1) AS `offset`
            FROM crawl_ticks""")  # NULLIF: nullable, as the source's columns are
        return self.t_env.to_data_stream(table)

    def sink(self, ds: DataStream, topic: str, *, exactly_once: bool,
             transactional_id_prefix: str = "", dest: str | None = None) -> None:
        """Write Row(key, value) records to `topic`; exactly-once commits with checkpoints.
        With `dest`, `ds` holds Row(dest, key, value) and only the rows of that dest are
        written: the choice is made in the JVM (a SQL filter), so a stream split over
        several topics is not sent through a Python function per topic."""
        self._sinks += 1
        name = _table_name(f"sink{self._sinks}", topic)
        # At-least-once: the producer is idempotent (said here, not left to the client's
        # defaults), so a partition keeps the order records were sent in through a
        # crash: no record is written when one sent before it to its partition was lost.
        guarantee = ("'sink.delivery-guarantee' = 'at-least-once', "
                     "'properties.enable.idempotence' = 'true', 'properties.acks' = 'all', "
                     f"'properties.linger.ms' = '{self.cfg['kafka.linger_ms']}'")
        if exactly_once:
            if not transactional_id_prefix:
                raise ValueError("an exactly-once Kafka sink needs a transactional_id_prefix")
            guarantee = ("'sink.delivery-guarantee' = 'exactly-once', "
                         f"'sink.transactional-id-prefix' = '{transactional_id_prefix}', "
                         "'properties.transaction.timeout.ms' = '900000'")
        self.t_env.execute_sql(f"""
            CREATE TABLE {name} (`key` BYTES, `value` BYTES)
            WITH ({self._common(topic)}, {guarantee})""")
        table = self._table(ds)
        if dest is not None:
            from pyflink.table.expressions import col, lit

            table = table.where(col("dest") == lit(dest)).select(col("key"), col("value"))
        self._statements.add_insert(name, table)

    def _table(self, ds: DataStream):
        """`ds` as a table, made once however many sinks read it."""
        made = self._tables.get(id(ds))
        if made is None:
            made = self._tables[id(ds)] = (ds, self.t_env.from_data_stream(ds))
        return made[1]

    def attach(self) -> None:
        self._statements.attach_as_datastream()
