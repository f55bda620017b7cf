"""`crawl host ...` and `crawl url show`: commands to one host's owner in the frontier job.

A command goes to the control topic keyed by host_key; the frontier applies it in the
host's keyed state (udfs/core/control.py) and answers on the replies topic, which this
side reads from its end (positions taken before the command is sent, so the answer
cannot be missed).
"""

from __future__ import annotations

import itertools
import json
import os
import time
from typing import Any

from udfs.config import Config
from udfs.core.control import span
from udfs.core.urls import normalize_url, split_host_key
from udfs.wire.avro import registry
from udfs.wire.records import CONTROL, REPLIES, HostCommandRecord

_seq = itertools.count(1)
DUP_NAMES = {0: "no", 1: "near (SimHash)", 2: "exact"}  # recrawl.Dup


class NoReply(TimeoutError):
    pass


def host_key_of(text: str) -> str | None:
    """The host_key of a URL or host key given on the command line (scheme required:
    http and https are different hosts), or None if it is not an http(s) URL."""
    url = normalize_url(text if text.count("/") > 2 else text.rstrip("/") + "/")
    return None if url is None else split_host_key(url)[0]


def send_command(cfg: Config, host_key: str, command: str, *, settings: dict[str, str]
                 | None = None, url: str | None = None, timeout_s: float = 30.0,
                 durable: bool = False) -> dict[str, Any]:
    """Send one HostCommand and wait for its HostReply; the reply as a dict with its
    detail decoded. NoReply if none comes within `timeout_s`.

    `durable`: also wait (within the same time) until the frontier has committed a
    checkpoint taken after the command — its Kafka source commits the control topic's
    offset past it then — and say in reply["durable"] whether it did. Before that, a
    restore replays the command from the topic, but the host may act for a moment on
    its older state first; after it, never."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    reg = registry()
    now_ms = int(time.time() * 1000)
    command_id = f"c-{now_ms}-{os.getpid()}-{next(_seq)}"
    replies = cfg.topic("replies")
    consumer = KafkaConsumer(bootstrap_servers=cfg["kafka.bootstrap_servers"],
                             enable_auto_commit=False, consumer_timeout_ms=200,
                             request_timeout_ms=cfg["kafka.request_timeout_ms"])
    producer = KafkaProducer(bootstrap_servers=cfg["kafka.bootstrap_servers"],
                             request_timeout_ms=cfg["kafka.request_timeout_ms"])
    try:
        parts = consumer.partitions_for_topic(replies) or set()
        if not parts:
            raise NoReply(f"topic {replies} does not exist: is this crawl's frontier running?")
        tps = [TopicPartition(replies, p) for p in sorted(parts)]
        consumer.assign(tps)
        consumer.seek_to_end(*tps)
        for tp in tps:  # resolve the end now: a reply after this point is ours to read
            consumer.position(tp)
        record: HostCommandRecord = {
            "command_id": command_id, "host_key": host_key, "command": command,
            "version": now_ms, "settings": dict(settings or {}), "url": url,
            "issued_at_ms": now_ms}
        sent = producer.send(cfg.topic("control"), CONTROL.encode(reg, record, check=True),
                             key=host_key.encode()).get(timeout_s)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for m in consumer:
                reply = REPLIES.decode(reg, m.value)
                if reply["command_id"] == command_id:
                    # What the CLI prints: the reply with its detail as an object.
                    rec: dict[str, Any] = dict(reply)
                    rec["detail"] = json.loads(rec.pop("detail_json") or "{}")
                    if durable:
                        rec["durable"] = _wait_committed(
                            cfg, TopicPartition(sent.topic, sent.partition), sent.offset,
                            deadline)
                    return rec
        raise NoReply(f"no reply from the frontier in {timeout_s:.0f} s (command sent to "
                      f"{cfg.topic('control')}): is the frontier job running?")
    finally:
        producer.close()
        consumer.close()


def _wait_committed(cfg: Config, tp, offset: int, deadline: float) -> bool:
    """Has the frontier's consumer group committed past `offset` of `tp` (Flink commits
    a source's offsets when a checkpoint completes) before `deadline`?"""
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=cfg["kafka.bootstrap_servers"],
                             request_timeout_ms=cfg["kafka.request_timeout_ms"])
    group = f"{cfg['kafka.group_id_prefix']}.frontier"  # udfs/flink/runtime.py KafkaIO.source
    try:
        while True:
            committed = admin.list_group_offsets({group: [tp]}).get(group, {}).get(tp)
            if committed is not None and committed.offset > offset:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.5)
    finally:
        admin.close()


def _age(seconds: float | None) -> str:
    return "-" if seconds is None else span(seconds)


def render_host(d: dict[str, Any]) -> str:
    """`crawl host show` as text."""
    p, pace, r, u = d["policy"], d["pace"], d["robots"], d["urls"]
    lines = [
        f"host {d['host_key']}: {'PAUSED' if d['paused'] else 'active'}"
        f" ({d['control_version']} operator commands applied)"
        + ("" if d.get("known", True) else "; not known to this crawl yet"),
        f"  policy v{p['policy_version']}: min_gap_s {p['min_gap_s']}, max_in_flight "
        f"{p['max_in_flight']}, duration_factor {p['duration_factor']}, max_gap_s "
        f"{p['max_gap_s']}, daily_budget {p['daily_budget']}",
        f"  pace now: gap {pace['gap_s']:.2f} s, {pace['max_in_flight']} in flight, allowance "
        f"{pace['allowance']:.2f}, Crawl-delay {pace['crawl_delay_s']:.1f} s",
        f"  next request allowed in {_age(max(0.0, d['next_allowed_in_s']))}; backoff "
        + ("none" if d["backoff_in_s"] is None else f"{_age(d['backoff_in_s'])} left")
        + f" (exponent {d['backoff_exponent']})",
        f"  robots.txt: {r['status']}, age {_age(r['age_s'])}, expires in "
        f"{_age(r['expires_in_s'])}, failures {r['failures']}",
        f"  in flight: {len(d['in_flight'])} lease(s)"
        + "".join(f"\n    {x['kind']} {x['url']} (may start in "
                  f"{_age(max(0.0, x['not_before_in_s']))})" for x in d["in_flight"]),
        f"  URLs: {u['resident']} in memory ("
        + ", ".join(f"{k.lower()} {v}" for k, v in u["by_status"].items())
        + f"), {u['due']} due now, {u['cold']} in the cold queue"
        + (f", {u['sharded']} in {u['shards']} shard(s)" if u.get("sharded") else ""),
        f"  budget left today: {d['budget_left_today']}; duplicate share {d['dup_share']}",
        "  last outcomes: " + (", ".join(
            f"{x['outcome']}{'' if x['http_status'] is None else ' ' + str(x['http_status'])}"
            f" ({x['kind'].lower()}, {_age(-x['at_in_s'])} ago)" for x in d["recent"][::-1])
            or "none"),
    ]
    if d.get("note"):
        lines.append(f"  note: {d['note']}")
    return "\n".join(lines)


def render_url(d: dict[str, Any]) -> str:
    """`crawl url show` as text."""
    if not d["known"]:
        return f"{d['url']} ({d['host_key']}): {d['why']}"
    return "\n".join([
        f"{d['url']}: {d['status']}" + (" (cold queue)" if d["cold"] else ""),
        f"  why: {d['why']}",
        f"  version {d['version']} (accepted {d['accepted_version']}), attempt {d['attempt']}"
        f", failures {d['failure_count']}" + (f", parked: {d['park_reason']}"
                                              if d["park_reason"] else ""),
        ("  next fetch in " if d["next_fetch_in_s"] >= 0 else "  next fetch due for ")
        + _age(d["next_fetch_in_s"]) + "; "
        + ("never fetched" if d["last_fetch_age_s"] is None else
           f"last fetch {_age(d['last_fetch_age_s'])} ago")
        + f"; interval {_age(d['interval_s'])}",
        f"  priority {d['priority']}, queue score {d['score']:.3f}, depth {d['depth']}, "
        f"duplicate: {DUP_NAMES.get(d['duplicate'], d['duplicate'])}",
    ])
