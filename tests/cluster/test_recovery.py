"""Recovery on a real Flink session cluster (crawl cluster), mid-crawl of the synthetic
web, in one crawl: kill -9 of the TaskManager running the frontier, then of the one
running the fetcher; a savepoint upgrade of the frontier to another build whose host
state has added fields; a rescale of the frontier from 1 to 2 — the procedures
`crawl upgrade --build` / `crawl rescale` run — while the fetcher crashes after the
response for some URLs (before their completion is written) and loses the completion
of others (udfs/fetcher/faults.py).

Afterwards: every reachable allowed page indexed; no (url_id, url_version) indexed
twice; 0 politeness violations across the disruptions; each host's lease numbers
strictly increasing within each frontier incarnation (between two restores of the
frontier that its JobManager logs: its lease counter lives in its state, so a doubled
owner would issue a number twice; leases travel at once, so a restore from a checkpoint
may repeat the numbers the lost incarnation had issued, with new ids, and Flink may
restore more than once after one kill) and, after the rescale, both frontier subtasks
lease (the owner of each host that leased, by Flink's key-group arithmetic over the
job's configured maximum parallelism, which the REST API reports): two hosts, one per
subtask of the rescaled job, held paused from before their seeds until just after the
rescale, get no request before and both lease after it; every host with
pages not yet leased at the savepoint (so a timer pending: with look-ahead, a host may
have leased all it knows before) leased again after the restore; the upgraded build
restored the old state with its added fields defaulted (a log line naming the first
host of each set of added fields, per subtask, from the new build's own file — which
needs the upgrade to restart the TaskManagers that ran the old build: thread mode
imports Python once per JVM — and a metric where the REST API reports it; after the
rescale it counts only hosts the v2 job never wrote back, idle ones); each crash
re-fetched only after its lease expired (a restarted fetcher does not replay leases it
may have sent), each lost completion re-leased and fetched again. Host controls through
all of it: a host paused before the frontier's kill -9 gets no request until it is
resumed after the savepoint upgrade, and a host set to min_gap_s=3 then keeps every
later gap at 3 s or more, through the kill, the upgrade and the rescale — judged from
the web server's request log."""

from __future__ import annotations

import shutil
import time
import warnings
from collections import defaultdict
from datetime import datetime
from pathlib import Path

import pytest

from crawler.control import send_command
from crawler.run import Watcher, publish_seeds, synthetic_overrides
from crawler.stack.cluster import Cluster
from crawler.stack.local import LocalStack
from crawler.testkit.synthetic_web import SyntheticWeb, build_sites
from crawler.warc_tool import verify
from udfs.config import TOPIC_KEYS, load_config
from udfs.core.partitioning import host_subtask
from udfs.fetcher.faults import injected
from udfs.storage.bodies import open_store
from udfs.storage.warc import read_record, sha256_b32
from udfs.storage.warc_writer import recovering_writer

MIN_GAP_S = 0.2
LEASE_TIMEOUT_S = 20
ROOT = Path(__file__).resolve().parent.parent.parent
ADDED_FIELDS_METRIC = "hosts_restored_with_added_fields"
MAX_PARALLELISM = load_config(env={})["flink.max_parallelism"]
# Site 6 has Crawl-delay 1.5 s: a replayed request would break it.
CRASH_AT = r"site6.test:[0-9]+/p/9$|site10.test:[0-9]+/p/4$"
DROP_AT = r"site4.test:[0-9]+/p/7$|site8.test:[0-9]+/p/11$"
# Host controls: one host paused, one slowed (plain sites: no calendar trap, no faults).
PAUSED_SITE, SLOWED_SITE, SLOW_GAP_S = "site1.test", "site11.test", 3.0
# Leases already out when a command lands: in flight + look-ahead (up to 2.5 s of a
# 0.2 s-gap host's turns), stretched by the fetches' own pace on a slow machine.
SETTLE_S = 8.0
# Hosts without faults or controls; two of them, one per subtask of the rescaled
# frontier, are held paused from before the seeds until after the rescale, so that both
# subtasks have a host to lease then (a fast crawl finishes the others before it).
HELD_CANDIDATES = {f"site{i}.test" for i in (0, 2, 3, 5, 7, 9)}


def build_with_added_fields(dest: Path) -> Path:
    """This code with two fields added to the host state (one in its policy record,
    one at its top level): what a later release that extends HostState looks like."""
    for pkg in ("jobs", "udfs", "schemas"):
        shutil.copytree(ROOT / pkg, dest / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    for rel, old, new in [
        ("udfs/core/politeness.py", "    max_in_flight: int = 1\n    min_gap_s: float = 1.0\n",
         "    max_in_flight: int = 1\n    min_gap_s: float = 1.0\n"
         "    upgrade_note: str = 'added in v2'\n"),
        ("udfs/core/frontier/state.py", '"host_key": h.host_key, "policy"',
         '"host_key": h.host_key, "build": "v2", "policy"'),
    ]:
        text = (dest / rel).read_text()
        assert text.count(old) == 1, f"the v2 patch no longer applies to {rel}"
        (dest / rel).write_text(text.replace(old, new))
    return dest


def kill_taskmanager(cluster: Cluster, job: str) -> int:
    """kill -9 of the TaskManager that runs `job` (parallelism 1: all its tasks in one),
    with its Python workers (its process group), as when its container dies; its PID."""
    [tm] = cluster.job_taskmanagers(job)
    pid = tm.kill()
    assert pid is not None, f"the TaskManager running {job} is not running"
    return pid


def frontier_restores(cluster: Cluster, jids: set[str]) -> list[int]:
    """When the JobManager restored one of the frontier jobs `jids` from a checkpoint or
    a savepoint (epoch ms, from its log: Flink prints local time, as does this host)."""
    times = []
    for log in cluster.root.glob("jobmanager/*.log"):
        for line in log.read_text(errors="replace").splitlines():
            words = line.split()
            if "Restoring job" in line and words[words.index("job") + 1] in jids:
                stamp = datetime.strptime(" ".join(words[:2]), "%Y-%m-%d %H:%M:%S,%f")
                times.append(int(stamp.timestamp() * 1000))
    return sorted(set(times))


def start_web(log_path: Path, tries: int = 10) -> tuple[SyntheticWeb, list[str]]:
    """The test's synthetic web, on a port where two HELD_CANDIDATES fall to different
    subtasks at parallelism 2 (the port is part of each host key, so it decides which
    subtask owns a host), and those two host keys, subtask 0's first."""
    for _ in range(tries):
        web = SyntheticWeb(build_sites(12, seed=5, pages=(15, 20)), log_path=str(log_path))
        web.start()
        by_owner: dict[int, str] = {}
        for site in web.site_list:
            if site.name in HELD_CANDIDATES:
                hk = web.host_key(site)
                by_owner.setdefault(host_subtask(hk, MAX_PARALLELISM, 2), hk)
        if len(by_owner) == 2:
            return web, [by_owner[0], by_owner[1]]
        web.stop()
    raise AssertionError(f"no port in {tries} put {sorted(HELD_CANDIDATES)} on both subtasks")


def wait_running(cluster: Cluster, job: str, timeout_s: float = 180) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        jid = cluster.running_job(job)
        detail = cluster.job_detail(jid) if jid else None
        if detail and detail["state"] == "RUNNING" and \
                all(v["status"] == "RUNNING" for v in detail["vertices"]):
            return jid
        time.sleep(1)
    raise AssertionError(f"{job} not running again within {timeout_s} s")


def added_fields_metric(cluster: Cluster, jid: str, at_least: float = 0,
                        timeout_s: float = 90) -> float | None:
    """Sum of hosts_restored_with_added_fields over the frontier job's subtasks, from the
    REST API, once it reaches `at_least` (the JobManager fetches metrics every 10 s; a
    host is restored when its first timer or record arrives) or at the timeout. None if
    the REST API never listed the metric (it has happened on a loaded machine; the log
    lines are the primary evidence)."""
    deadline = time.monotonic() + timeout_s
    total: float | None = None
    while True:
        for v in cluster.job_detail(jid)["vertices"]:
            base = f"/jobs/{jid}/vertices/{v['id']}"
            names = [m["id"] for m in cluster.get_json(f"{base}/subtasks/metrics") or []
                     if m["id"].endswith(ADDED_FIELDS_METRIC)]
            if names:
                added = cluster.get_json(f"{base}/subtasks/metrics?get={names[0]}&agg=sum")
                total = float(added[0]["sum"])
        if (total is not None and total >= at_least) or time.monotonic() > deadline:
            return total
        time.sleep(2)


@pytest.mark.timeout(1500)
def test_crawl_survives_kill_9_upgrade_rescale_and_fetcher_faults(cfg, fresh_topics,
                                                                   tmp_path):
    web, held = start_web(tmp_path / "web.jsonl")
    names = fresh_topics(*TOPIC_KEYS, partitions=2)
    markers = tmp_path / "faults"
    overrides = [f"topics.{k}.name={n}" for k, n in zip(TOPIC_KEYS, names, strict=True)]
    overrides += synthetic_overrides(web, tmp_path, MIN_GAP_S) + [
        "traps.template_budget=120", "traps.template_sample_every=1000",
        "frontier.retry_base_s=5", f"frontier.lease_timeout_s={LEASE_TIMEOUT_S}",
        "fetch.total_timeout_s=15", f"faults.crash_after_response={CRASH_AT}",
        # The fetcher restarts up to six times here (two crashes, two kills, and the
        # TaskManager restarts of the upgrade and the rescale when it shares one with
        # the frontier); each lets the leases it held expire. Three expiries park a
        # URL (a fetcher-crashing URL must not crash it forever), which would leave an
        # innocent URL unindexed for a week: allow more in this test.
        "frontier.max_lease_attempts=8",
        f"faults.drop_completion={DROP_AT}", f"faults.marker_dir={markers}"]
    run_cfg = load_config(env={}, overrides=overrides)
    job_args = [a for o in overrides for a in ("--set", o)]
    cluster = Cluster(cfg, LocalStack(cfg, state_dir=tmp_path / "state"))
    v2 = build_with_added_fields(tmp_path / "build-v2")
    sites = {web.host_key(s): s for s in web.site_list}
    expected = {hk + p for hk, s in sites.items()
                for p in ["/", *(f"/p/{i}" for i in range(s.pages))]}
    watcher = None
    paused = next(hk for hk, s in sites.items() if s.name == PAUSED_SITE)
    slowed = next(hk for hk, s in sites.items() if s.name == SLOWED_SITE)
    controls: dict[str, float] = {}  # when each command was sent (monotonic)

    def command(host_key: str, action: str, **kw) -> dict:
        reply = send_command(run_cfg, host_key, action, timeout_s=120,
                             durable=action != "SHOW", **kw)
        assert reply["ok"] and reply.get("durable", True), reply
        return reply["detail"]

    disruptions: list[str] = []
    frontier_jids: set[str] = set()

    def said(line: str) -> None:
        """What an upgrade says; a resubmission tried again is shown as a warning in the
        run's summary (the test goes on: upgrade tries once more when the client alone
        failed, as in CI once, whose cause is worth reading)."""
        print(line)
        if "failed (attempt" in line:
            warnings.warn(f"the frontier's resubmission was tried again: {line}", stacklevel=2)
    try:
        cluster.up(2)
        cluster.submit("frontier", job_args)
        cluster.submit("fetcher", job_args)
        frontier_jids.add(wait_running(cluster, "frontier"))
        # Before their seeds: not even their robots.txt is fetched until resumed. The
        # slowed host too, so that all its pages are fetched after its command (a fast
        # crawl fetched them all before it).
        for hk in [*held, slowed]:
            assert command(hk, "PAUSE")["paused"]
        sent, bad = publish_seeds(run_cfg, [hk + "/" for hk in sites])
        assert sent == len(sites) and bad == []
        watcher = Watcher(run_cfg, keep_records=True)

        def indexed() -> set[str]:
            return expected & watcher.poll().urls

        def wait_for(fraction: float, timeout_s: float = 400) -> None:
            deadline = time.monotonic() + timeout_s
            while len(indexed()) < fraction * len(expected):
                assert time.monotonic() < deadline, \
                    f"stuck at {len(indexed())} of {len(expected)}"
                time.sleep(1)

        # a. kill -9 of the frontier's TaskManager, then of the fetcher's; just before
        # the first, one host is paused and another slowed, then resumed (all in a
        # checkpoint).
        for fraction, job in ((0.2, "frontier"), (0.3, "fetcher")):
            wait_for(fraction)
            if job == "frontier":
                controls["paused"] = time.monotonic()
                assert command(paused, "PAUSE")["paused"]
                controls["slowed"] = time.monotonic()
                slow = command(slowed, "SET", settings={"min_gap_s": str(SLOW_GAP_S)})
                assert slow["policy"]["min_gap_s"] == SLOW_GAP_S
                assert not command(slowed, "RESUME")["paused"]
            pid = kill_taskmanager(cluster, job)
            disruptions.append(f"kill -9 of the {job}'s taskmanager (pid {pid}) "
                               f"at {len(indexed())} pages")
            replacement = [tm for tm in cluster.taskmanagers() if tm.pid() is None][0]
            replacement.start(120)  # capacity back, as an operator would
            wait_running(cluster, "frontier")
            wait_running(cluster, "fetcher")
            if job == "frontier":  # the restored owners still know
                assert command(paused, "SHOW")["paused"]
                shown = command(slowed, "SHOW")
                assert shown["policy"]["min_gap_s"] == SLOW_GAP_S and not shown["paused"]

        # b + d. Savepoint upgrade to the build with added fields; the hosts with pages
        # not leased yet (each has a timer pending) must all lease again after it.
        wait_for(0.45)
        done = indexed()
        savepoint, jid = cluster.upgrade("frontier", job_args, build=v2, log=said)
        frontier_jids.add(jid)
        restored_ms = int(time.time() * 1000)
        disruptions.append(f"savepoint upgrade to build v2 at {len(done)} pages")
        wait_running(cluster, "frontier")
        # The upgraded build restored the controls too; the paused host may go on.
        assert command(paused, "SHOW")["paused"]
        controls["resumed"] = time.monotonic()  # sent: it applies before its checkpoint
        assert not command(paused, "RESUME")["paused"]

        # c. Rescale 1 -> 2 (still build v2).
        wait_for(0.6)
        # Read late: a new job's metrics reach the REST API after tens of seconds.
        added_v2 = added_fields_metric(cluster, jid, at_least=1, timeout_s=40)
        _, jid = cluster.upgrade("frontier", job_args, parallelism=2, build=v2, log=said)
        frontier_jids.add(jid)
        rescaled_ms = int(time.time() * 1000)  # the old job is stopped by now
        disruptions.append(f"rescale 1 -> 2 at {len(indexed())} pages")
        wait_running(cluster, "frontier")
        vertices = cluster.job_detail(jid)["vertices"]
        assert {v["parallelism"] for v in vertices} == {2}
        # The key groups the jobs were configured with (not Flink's default of 128).
        assert {v.get("maxParallelism") for v in vertices} == {MAX_PARALLELISM}, vertices
        # The held hosts' new owners restored their pause; each lets its host go on.
        controls["released"] = time.monotonic()
        for hk in held:
            assert command(hk, "SHOW")["paused"]
            assert not command(hk, "RESUME")["paused"]

        wait_for(1.0, timeout_s=600)
        added_after_rescale = added_fields_metric(cluster, jid)
    finally:
        if watcher:
            watcher.poll()
            watcher.close()
        cluster.down(log=lambda line: None)
        web.stop()
    # Nothing of the cluster outlives `down`: not even the Python workers of the
    # TaskManagers killed above.
    assert cluster.processes() == [], f"left running after down: {cluster.processes()}"
    # Every index event names its WARC record, across the kill -9s and the upgrade: a
    # killed fetcher's open file was published by the next fetcher task on this machine,
    # cut after its last whole record (the files open at `down`, by the recovery here, as
    # `crawl run` does when it stops); one ranged read of it is the page's record.
    store = open_store(run_cfg)
    recovering_writer(run_cfg, store).recover()
    warc_bad = []
    for e in watcher.events:
        try:
            member = store.get_range(e["warc_filename"], e["warc_offset"], e["warc_length"])
            h = read_record(member)[0].rec_headers
            ok = h.get_header("WARC-Target-URI") == e["url"] and h.get_header(
                "WARC-Payload-Digest") == sha256_b32(hex_digest=e["body_sha256"])
        except Exception as exc:  # a missing file or a cut record: reported below
            ok = f"{type(exc).__name__}: {exc}"
        if ok is not True:
            warc_bad.append((e["url"], e["warc_filename"], ok))
    # No truncated published file, no record published twice (warcio's check of every
    # file, each CDXJ against its file, record ids unique across files).
    warc_verdict = verify(store, run_cfg["warc.prefix"])

    # Which subtask owns each host that leased after the rescale, by Flink's key-group
    # arithmetic (udfs/core/partitioning.py, checked against Flink's own classes).
    owners = {host_subtask(lz["host_key"], MAX_PARALLELISM, 2) for lz in watcher.leases
              if lz["issued_at_ms"] >= rescaled_ms}
    held_leased = {lz["host_key"] for lz in watcher.leases
                   if lz["host_key"] in held and lz["issued_at_ms"] >= rescaled_ms}
    events = watcher.events
    ids = [e["event_id"] for e in events]
    duplicates = len(ids) - len(set(ids))
    violations = web.violations(run_cfg["robots.user_agent"], MIN_GAP_S)
    leases_by_host: dict[str, list[dict]] = defaultdict(list)
    for lease in {lz["lease_id"]: lz for lz in watcher.leases}.values():  # once each
        leases_by_host[lease["host_key"]].append(lease)

    epochs = frontier_restores(cluster, frontier_jids)
    assert len(epochs) >= 3, f"the frontier's restores are not in the JobManager log: {epochs}"

    def epoch(lease: dict) -> int:
        return sum(lease["issued_at_ms"] >= t for t in epochs)

    seqs = {(hk, e): [int(lz["lease_id"].rsplit("#", 1)[1].split("@")[0]) for lz in
                      sorted(ls, key=lambda lz: lz["issued_at_ms"]) if epoch(lz) == e]
            for hk, ls in leases_by_host.items() for e in range(len(epochs) + 1)}
    out_of_order = {key: s for key, s in seqs.items()
                    if any(a >= b for a, b in zip(s, s[1:], strict=False))}
    # Every lease of the old build was issued before its savepoint, so before restored_ms.
    leased_before = {lz["url"] for lz in watcher.leases if lz["issued_at_ms"] < restored_ms}
    pending = {hk for hk in sites if any(u.startswith(hk + "/") and u not in leased_before
                                         for u in expected)}
    stuck = {hk for hk in pending
             if not any(lz["issued_at_ms"] >= restored_ms for lz in leases_by_host[hk])}
    requests: dict[str, list[float]] = defaultdict(list)
    for r in web.log:
        requests[r.host + r.path].append(r.start)
    while_paused = [r.path for r in web.log if r.host == paused and
                    controls["paused"] + SETTLE_S <= r.start < controls["resumed"]]
    while_held = [r.host + r.path for r in web.log
                  if r.host in held and r.start < controls["released"]]
    slowed_starts = sorted(r.start for r in web.log if r.host == slowed and
                           r.start >= controls["slowed"] + SETTLE_S)
    slowed_gaps = [b - a for a, b in zip(slowed_starts, slowed_starts[1:], strict=False)]
    # The frontier logs what it defaulted, from the v2 build's own files.
    logged = [line for log in cluster.root.glob("taskmanager-*/taskmanager-*.log")
              for line in log.read_text(errors="replace").splitlines()
              if "took their defaults" in line and "build-v2" in line]
    # The hosts named by those lines: one per set of added fields and subtask (the metric
    # counts every host).
    restored_hosts = {line.split("host state of ", 1)[1].split()[0] for line in logged
                      if "host state of " in line}
    crashes, drops = injected(markers, "crash"), injected(markers, "drop")
    refetch_gaps = [sorted(requests[url])[1] - sorted(requests[url])[0]
                    if len(requests[url]) > 1 else None for url, _ in crashes]
    releases = {url: sorted({lz["attempt"] for lz in watcher.leases if lz["url"] == url})
                for url, _ in drops}
    print(f"cluster recovery: {len(expected)} pages, {len(events)} index events, "
          f"{duplicates} duplicates, violations {violations}; "
          f"{len(watcher.leases)} leases, {len(out_of_order)} hosts with a lease id "
          f"reissued or out of order within one of {len(epochs) + 1} incarnations; "
          f"{len(pending) - len(stuck)} of {len(pending)} hosts "
          f"pending at the savepoint leased after the restore; hosts restored with added "
          f"fields: {len(restored_hosts)} by the log, {added_v2} by the metric (after the "
          f"rescale, hosts v2 never wrote back: {added_after_rescale}); "
          f"subtasks that leased after the rescale {sorted(owners)}, requests to the "
          f"held hosts before their resume {len(while_held)}; crashes {len(crashes)} "
          f"(re-fetched after {refetch_gaps} s), lost completions {len(drops)} "
          f"(lease attempts {releases}); requests to the paused host while paused "
          f"{len(while_paused)} (resumed after {controls['resumed'] - controls['paused']:.0f}"
          f" s); the slowed host's smallest gap after its command "
          f"{min(slowed_gaps, default=None)} s over {len(slowed_gaps)} gaps; "
          f"WARC records read back {len(watcher.events) - len(warc_bad)} of "
          f"{len(watcher.events)}, {warc_verdict.files} files / {warc_verdict.records} "
          f"records verified; " + "; ".join(disruptions))
    assert expected <= watcher.progress.urls
    assert while_paused == [], f"the paused host was fetched: {while_paused}"
    assert while_held == [], f"a held host was fetched before its resume: {while_held}"
    assert len(slowed_gaps) >= 3 and min(slowed_gaps) >= SLOW_GAP_S, slowed_gaps
    assert duplicates == 0, "an (url_id, url_version) was indexed twice"
    assert warc_bad == [], f"index events whose WARC record does not read back: {warc_bad[:5]}"
    assert warc_verdict.files >= 1 and warc_verdict.problems == [], warc_verdict.problems[:5]
    assert violations == dict.fromkeys(violations, 0), violations
    assert out_of_order == {}, "a host's lease counter went back between restores: two owners"
    assert pending and stuck == set(), f"hosts that never leased after the restore: {stuck}"
    assert logged and "build, policy.upgrade_note" in logged[0], logged[:1]
    assert restored_hosts, "build v2 did not restore the v1 state through its added fields"
    # The metric counts the same, where the REST API reports it.
    assert added_v2 is None or added_v2 >= 1, added_v2
    assert held_leased == set(held), f"held hosts that never leased: {set(held) - held_leased}"
    assert owners == {0, 1}, f"after the rescale only subtasks {owners} leased"
    assert len(crashes) == 2 and len(drops) == 2, (crashes, drops)
    # A crashed fetcher's replayed lease is not sent again; the URL is re-let at expiry.
    assert all(gap is not None and gap >= LEASE_TIMEOUT_S - 5 for gap in refetch_gaps)
    assert all(len(requests[url]) >= 2 for url, _ in drops)
    assert all(len(a) >= 2 and a[0] == 1 for a in releases.values()), releases
