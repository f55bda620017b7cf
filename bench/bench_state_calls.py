"""What one keyed-state call, and one keyed hop, cost thread-mode Python operators
(the frontier job's).

    python bench/bench_state_calls.py                  # ~11 min, no services
    python bench/bench_state_calls.py --rounds 5 --hop-records 200000

In thread mode every state call of a Python function (ValueState.value, .update,
MapState.put, .is_empty, ...) is a call into the JVM: the key and value converted
(a PICKLED_BYTE_ARRAY value pickled), then Flink's RocksDB state with its serializers.
The frontier makes some twenty a page (README, "Measured here"), so the cost of one is
what a call fewer saves. This runs one job on a local MiniCluster as the frontier's is
configured (thread mode, RocksDB, `udfs.flink.runtime.make_env`): a bounded source of
records keyed over 1,000 keys, and a keyed function that, for each record, times with
its thread's CPU clock a run of `--calls` calls of each kind and the same run of no
calls (the clock's own cost, subtracted). The thread's CPU clock counts what the call
does on the task thread (Python, the JNI crossing, RocksDB's memtable); RocksDB's
background flushes and compactions, on other threads, are not in it.

Beside it, what one keyed hop between two such operators costs the whole process (as
the frontier's index events take five, one per stage, and each record of it passes
several): jobs of 1 and 5 keyed Python operators that pass each record on unchanged
(`--hop-records` records, a 600-byte pickled payload, 1,000 keys), each in a fresh
process, CPU of the process tree (every thread: the task threads, the network stack,
the JIT, GC) after each job, alternating, `--rounds` times; the least of each job's
runs, 5 hops less 1, over the 4 hops and the records is one hop's cost, start-up and
source taken off. Four variants: the payload typed
PICKLED_BYTE_ARRAY (PyFlink pickles the pickle again) or as a byte array, in thread
mode; a byte array keyed in the JVM (as the frontier keys its streams, without
PyFlink's Python key map); and a byte array in process mode (Beam's harness, as the
fetcher runs).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

# The kinds timed, in order: (name, what it stands for in the frontier).
KINDS = (
    ("ValueState.value, a small value", "e.g. a band's bucket size, read on a miss"),
    ("ValueState.update, a small value", "e.g. a band's bucket size, written per page"),
    ("ValueState.update, 4 KB pickled", "e.g. a host's value, every call of a host"),
    ("MapState.put, small", "e.g. a fingerprint kept by a band"),
    ("MapState.is_empty", "e.g. a band's bucket first met"),
    ("MapState.put_all of 8 small entries, per entry", "e.g. a host's URLs saved at once"),
)


def _function(calls: int, out: str):
    """The keyed function (its class made here: pyflink's classes only when run)."""
    from pyflink.common import Types
    from pyflink.datastream import KeyedProcessFunction
    from pyflink.datastream.state import MapStateDescriptor, ValueStateDescriptor

    class Work(KeyedProcessFunction):
        def __init__(self, calls: int, out: str) -> None:
            self.calls, self.out = calls, out

        def open(self, ctx) -> None:
            self.small = ctx.get_state(ValueStateDescriptor("small", Types.INT()))
            self.big = ctx.get_state(ValueStateDescriptor("big", Types.PICKLED_BYTE_ARRAY()))
            self.map = ctx.get_map_state(MapStateDescriptor("map", Types.STRING(),
                                                            Types.LONG()))
            self.host_value = {f"field_{i}": (i, float(i), f"v{i}" * 8) for i in range(90)}
            self.spent = [0.0] * (len(KINDS) + 1)
            self.records = 0

        def process_element(self, value, ctx):
            clock, n, spent = time.thread_time, self.calls, self.spent
            small, big, map_, host = self.small, self.big, self.map, self.host_value
            small.update(1)  # each key's value exists before the first timed read
            t0 = clock()
            for _ in range(n):
                pass
            t1 = clock()
            for _ in range(n):
                small.value()
            t2 = clock()
            for i in range(n):
                small.update(i)
            t3 = clock()
            for _ in range(n):
                big.update(host)
            t4 = clock()
            for i in range(n):
                map_.put(f"{value}:{i}", i)
            t5 = clock()
            for _ in range(n):
                map_.is_empty()
            t6 = clock()
            for i in range(n):
                map_.put_all({f"{value}:{i}:{j}": j for j in range(8)})
            t7 = clock()
            for k, (a, b) in enumerate(((t0, t1), (t1, t2), (t2, t3), (t3, t4), (t4, t5),
                                        (t5, t6), (t6, t7))):
                spent[k] += b - a
            self.records += 1
            return iter(())

        def close(self) -> None:
            Path(self.out).write_text(json.dumps({"spent": self.spent,
                                                  "records": self.records}))

    return Work(calls, out)


def _env(tmp: str, thread_mode: bool = True):
    """A local environment as the frontier's (thread mode, RocksDB; or process mode, as
    the fetcher's), its files in `tmp`; one slot, no checkpoint within a run, no restart."""
    from udfs.config import load_config
    from udfs.flink.runtime import make_env

    cfg = load_config(env={}, overrides=[
        f"flink.checkpoint_dir={tmp}/checkpoints", f"local.state_dir={tmp}/state",
        "flink.checkpoint_interval_ms=60000", "flink.parallelism=1",
        "flink.restart_strategy=none"])
    return make_env(cfg, thread_mode=thread_mode)


def run(records: int, calls: int) -> dict[str, float]:
    """One job: microseconds per call of each kind (the clock's own cost taken off)."""
    from pyflink.common import Types

    with tempfile.TemporaryDirectory() as tmp:
        env = _env(tmp)
        out = Path(tmp) / "spent.json"
        env.from_collection(list(range(records)), type_info=Types.LONG()) \
            .key_by(lambda x: str(x % 1000), key_type=Types.STRING()) \
            .process(_function(calls, str(out)))
        env.execute("bench state calls")
        got = json.loads(out.read_text())
    spent, n = got["spent"], got["records"] * calls
    if got["records"] != records:
        raise RuntimeError(f"the job saw {got['records']} of {records} records")
    # put_all's run makes 8 entries a call, and builds their dict besides (counted in).
    per = {name: (spent[k + 1] - spent[0]) / n * 1e6 for k, (name, _) in enumerate(KINDS)}
    per[KINDS[-1][0]] /= 8
    return per


def _hops_job(hops: int, records: int, variant: str) -> None:
    """(Child process) one job of `hops` keyed pass-through operators, the payload typed
    PICKLED_BYTE_ARRAY ("pickled") or a byte array ("bytes"), in thread mode or (a
    "-process" variant) in process mode; prints the CPU seconds of this process tree once
    it has ended."""
    import os
    import pickle

    from _results import cpu_seconds, tree_pids
    from pyflink.common import Row, Types, WatermarkStrategy
    from pyflink.datastream import KeyedProcessFunction
    from pyflink.datastream.connectors.number_seq import NumberSequenceSource

    from udfs.flink.runtime import keyed_by_first

    row_type = Types.ROW([Types.STRING(), Types.PICKLED_BYTE_ARRAY()
                          if variant == "pickled" else Types.PRIMITIVE_ARRAY(Types.BYTE())])

    jvm_keys = variant == "bytes-jvm-key"

    class Pass(KeyedProcessFunction):
        def __init__(self, last: bool) -> None:
            self.last = last

        def process_element(self, row, ctx):
            if not self.last:
                if jvm_keys:  # the value alone comes in; its key from the context
                    yield Row(ctx.get_current_key(), row)
                else:
                    yield Row(row[0], row[1])

    payload = pickle.dumps({"url": "http://site.example/p/1" + "x" * 500, "n": 1})
    with tempfile.TemporaryDirectory() as tmp:
        env = _env(tmp, thread_mode=not variant.endswith("-process"))
        ds = env.from_source(NumberSequenceSource(1, records),
                             WatermarkStrategy.no_watermarks(), "sequence").map(
            lambda n: Row(str(n % 1000), payload), output_type=row_type)
        for hop in range(hops):
            keyed = keyed_by_first(ds) if jvm_keys else \
                ds.key_by(lambda r: r[0], key_type=Types.STRING())
            ds = keyed.process(Pass(hop == hops - 1), output_type=row_type)
        env.execute(f"bench {hops} hops")
    print(json.dumps({"cpu_s": cpu_seconds(tree_pids([os.getpid()]))}), flush=True)


VARIANTS = ("pickled", "bytes", "bytes-jvm-key", "bytes-process")


def hop_cost(records: int, rounds: int) -> tuple[dict[str, float],
                                                list[tuple[str, int, float]]]:
    """Microseconds of machine CPU per record per keyed hop for each payload type, and
    each job's CPU seconds (payload, hops, seconds) in the order run."""
    import subprocess

    runs: list[tuple[str, int, float]] = []
    for _ in range(rounds):
        for payload in VARIANTS:
            for hops in (1, 5):
                done = subprocess.run([sys.executable, __file__, "--hops-child", str(hops),
                                       "--payload", payload, "--records", str(records)],
                                      capture_output=True, text=True, timeout=900)
                line = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
                if done.returncode != 0 or not line:
                    raise RuntimeError(f"the {hops}-hop job failed: {done.stderr[-2000:]}")
                runs.append((payload, hops, json.loads(line[-1])["cpu_s"]))
    per = {}
    for payload in VARIANTS:
        one = min(c for p, h, c in runs if p == payload and h == 1)
        five = min(c for p, h, c in runs if p == payload and h == 5)
        per[payload] = (five - one) / (4 * records) * 1e6
    return per, runs


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=50_000)
    ap.add_argument("--calls", type=int, default=4, help="calls of each kind per record")
    ap.add_argument("--hop-records", type=int, default=100_000,
                    help="records through the 1- and 5-hop jobs")
    ap.add_argument("--rounds", type=int, default=3,
                    help="runs of each hop job (the least CPU of them counts)")
    ap.add_argument("--hops-child", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--payload", choices=VARIANTS, default="pickled", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.records < 1000 or args.calls < 1 or args.hop_records < 1000 or args.rounds < 1:
        ap.error("--records and --hop-records must be at least 1000, --calls and --rounds "
                 "at least 1")
    if args.hops_child:
        _hops_job(args.hops_child, args.records, args.payload)
        return
    started = time.monotonic()
    us = run(args.records, args.calls)
    hop_us, runs = hop_cost(args.hop_records, args.rounds)
    rows = [(f"{name}: us per call", f"{us[name]:.1f} ({why})") for name, why in KINDS]
    rows.append(("records x calls of each kind", f"{args.records:,} x {args.calls}"))
    rows.append(("one keyed hop between thread-mode Python operators, a 600-byte payload "
                 "typed PICKLED_BYTE_ARRAY: machine CPU us per record",
                 f"{hop_us['pickled']:.1f}"))
    rows.append(("the same hop, the payload typed as a byte array (no pickling by PyFlink)",
                 f"{hop_us['bytes']:.1f} ({hop_us['pickled'] / hop_us['bytes']:.2f}x)"))
    rows.append(("the same hop (the payload a byte array) keyed in the JVM by the row's "
                 "first field, as the frontier's (udfs.flink.runtime.keyed_by_first: no "
                 "PyFlink key map; the function reads its key from the context)",
                 f"{hop_us['bytes-jvm-key']:.1f} "
                 f"(PyFlink's key_by {hop_us['bytes'] / hop_us['bytes-jvm-key']:.2f}x that)"))
    rows.append(("the same hop (the payload a byte array) in process mode, as the fetcher "
                 "runs (Beam's harness, records in bundles)",
                 f"{hop_us['bytes-process']:.1f} "
                 f"({hop_us['bytes'] / hop_us['bytes-process']:.2f}x thread mode's)"))
    rows.append(("the hop jobs' CPU seconds (payload hops: seconds), in the order run",
                 ", ".join(f"{p} {h}: {c:.1f}" for p, h, c in runs) +
                 f" ({args.hop_records:,} records each)"))
    from _results import record

    record("state_calls", "One keyed-state call, and one keyed hop, of thread-mode Python "
           "operators", rows,
           "A local MiniCluster as the frontier's (thread mode, RocksDB with its Bloom "
           "filters, incremental checkpoints, none taken in the run), 1,000 keys. State "
           "calls: one job, each call timed on the task thread's CPU clock, less the same "
           "loop making no call. Hops: the whole process tree's CPU, 5 hops less 1, the "
           f"least of {args.rounds} runs each. {time.monotonic() - started:.0f} s.")


if __name__ == "__main__":
    main()
