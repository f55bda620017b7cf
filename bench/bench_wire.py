"""Avro bodies of the records every page crosses: compiled (udfs/wire/avrocodec.py) against
fastavro's schemaless writer and reader, side by side in one run.

    python bench/bench_wire.py

Per page the fetcher reads a lease and writes a completion and the page's links
records (one per target host); the frontier reads the completion twice (host owner
and audit) and the links records, and writes the next lease and the index event.
The per-page figure adds those up for a page with 60 links to 3 hosts.
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

import fastavro

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench._results import record, timed  # noqa: E402
from udfs.wire.avro import HEADER_LEN, load_examples, registry  # noqa: E402
from udfs.wire.records import page_links  # noqa: E402

REG = registry()


def per_call_us(fn) -> float:
    calls, seconds = timed(fn, min_seconds=0.5)
    return seconds / calls * 1e6


def main() -> None:
    links = page_links("https://a.example/", 1,
                       [f"https://{'abc'[i % 3]}.example/section/{i}/page-{i * 7}.html"
                        for i in range(60)], 1764480000000)
    samples = {
        "lease": load_examples(REG.latest("lease"))[0],
        "completion": {**load_examples(REG.latest("completion"))[0], "body": None},
        "discovered": links[0],  # 20 links
        "index_event": load_examples(REG.latest("index_event"))[0],
    }
    times: dict[str, dict[str, float]] = {}
    rows = []
    for name, rec in samples.items():
        sv = REG.latest(name)
        data = REG.encode(name, rec, check=False)
        body = data[HEADER_LEN:]

        def fa_write(sv=sv, rec=rec) -> None:
            fastavro.schemaless_writer(io.BytesIO(), sv.parsed, rec)

        def fa_read(sv=sv, body=body) -> None:
            fastavro.schemaless_reader(io.BytesIO(body), sv.parsed, sv.parsed)

        write = REG._writer(sv)
        read = REG._reader(sv)
        assert write is not None and read is not None
        t = {"fastavro write": per_call_us(fa_write),
             "compiled write": per_call_us(lambda write=write, rec=rec: write(bytearray(), rec)),
             "fastavro read": per_call_us(fa_read),
             "compiled read": per_call_us(lambda read=read, data=data: read(data, HEADER_LEN))}
        times[name] = t
        label = f"{name} ({len(body)} bytes)"
        rows.append((f"{label}: write, fastavro / compiled",
                     f"{t['fastavro write']:.1f} / {t['compiled write']:.1f} us "
                     f"({t['fastavro write'] / t['compiled write']:.1f}x)"))
        rows.append((f"{label}: read, fastavro / compiled",
                     f"{t['fastavro read']:.1f} / {t['compiled read']:.1f} us "
                     f"({t['fastavro read'] / t['compiled read']:.1f}x)"))
    # One page: what each job writes and reads (3 links records of 20 links).
    page = {"fetcher": [("lease", "read", 1), ("completion", "write", 1),
                        ("discovered", "write", 3)],
            "frontier": [("completion", "read", 2), ("discovered", "read", 3),
                         ("lease", "write", 1), ("index_event", "write", 1)]}
    for job, steps in page.items():
        before = sum(times[n][f"fastavro {op}"] * k for n, op, k in steps)
        after = sum(times[n][f"compiled {op}"] * k for n, op, k in steps)
        rows.append((f"one page, the {job} job's Avro bodies (fastavro / compiled)",
                     f"{before:.0f} / {after:.0f} us (saves {before - after:.0f} us)"))
    record("wire", "Avro bodies per record: compiled against fastavro", rows,
           "Single core; bodies only (the 10-byte header is the same either way). "
           "A page's links: 60 links to 3 hosts, so 3 records of 20.")


if __name__ == "__main__":
    main()
