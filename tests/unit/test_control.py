"""Host controls on a virtual clock: pause, resume, set, reset, show, url show; versions,
replays, state across a restore; the settings' validation; finding a running crawl."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace

import pytest

from crawler.cli import main as crawl
from crawler.control import host_key_of, render_host, render_url
from crawler.runs import RunNotFound, find_run, forget_run, live_runs, record_run
from udfs.config import ConfigError, host_policy_settings, load_defaults
from udfs.config.policies import host_policy
from udfs.core.control import Command, HostCommand, apply_command, describe_url
from udfs.core.frontier import HostFrontier, Kind, Outcome, UrlStatus

from .test_frontier import CFG, LOOKAHEAD, H, host, ok, with_robots

pytestmark = pytest.mark.unit
DEFAULT_POLICY = host_policy(load_defaults())


def cmd(command: Command, version: int, **kw) -> HostCommand:
    return HostCommand(f"c{version}", H, command, version, **kw)


def drain(h: HostFrontier, start: float, end: float, step: float = 0.05):
    """Grant and complete at once every lease the host gives from `start` to `end`;
    the request start times (not_before) in order."""
    starts, t = [], start
    while t < end:
        lease = h.poll(t)
        if lease is not None and lease.kind is Kind.PAGE:
            starts.append(lease.not_before)
            h.complete(ok(lease, http_status=200), max(t, lease.not_before))
        t += step
    return starts


def test_pause_stops_new_leases_and_resume_restarts_them():
    h = host()
    t = with_robots(h, urls=[f"{H}/p{i}" for i in range(20)])
    assert drain(h, t, t + 3)
    reply = apply_command(h, cmd(Command.PAUSE, 10), t + 3, DEFAULT_POLICY)
    assert reply.ok and reply.applied and reply.detail["paused"]
    assert drain(h, t + 3, t + 30) == []
    assert h.next_wake(t + 30) is None  # no lease out: nothing to wake for
    reply = apply_command(h, cmd(Command.RESUME, 11), t + 30, DEFAULT_POLICY)
    assert reply.applied and not reply.detail["paused"]
    assert h.next_wake(t + 30) is not None and drain(h, t + 30, t + 33)


def test_a_paused_host_keeps_its_leases_out_until_they_complete_or_expire():
    h = host(cfg=LOOKAHEAD)
    t = with_robots(h, urls=[f"{H}/p{i}" for i in range(5)])
    out = [h.poll(t), h.poll(t)]
    assert all(out)
    apply_command(h, cmd(Command.PAUSE, 1), t, DEFAULT_POLICY)
    assert h.poll(t + 0.1) is None
    assert h.next_wake(t) == min(x.expires_at for x in out)  # only their expiry
    assert len(describe(h, t)["in_flight"]) == 2


def describe(h, now):
    return apply_command(h, cmd(Command.SHOW, 0), now, DEFAULT_POLICY).detail


def test_set_changes_only_this_hosts_policy_and_every_later_gap():
    h = host()
    other = HostFrontier("http://other.example", CFG, seed=1)
    t = with_robots(h, urls=[f"{H}/p{i}" for i in range(30)])
    before = drain(h, t, t + 5)
    assert min(b - a for a, b in zip(before, before[1:], strict=False)) < 3
    reply = apply_command(h, cmd(Command.SET, 1_000, settings={"min_gap_s": 3.0}), t + 5,
                          DEFAULT_POLICY)
    assert reply.applied and reply.detail["policy"]["min_gap_s"] == 3.0
    assert h.pacer.policy.policy_version == 1 and other.pacer.policy == CFG.host
    after = drain(h, t + 5, t + 40)
    assert len(after) >= 8
    assert min(b - a for a, b in zip(after, after[1:], strict=False)) >= 3.0


def test_commands_apply_in_arrival_order_and_a_record_written_twice_applies_once():
    h = host()
    with_robots(h)
    apply_command(h, cmd(Command.SET, 50, settings={"min_gap_s": 2.0}), 1.0, DEFAULT_POLICY)
    # The same record again (a producer's retry): its command_id is known.
    again = apply_command(h, cmd(Command.SET, 50, settings={"min_gap_s": 9.0}), 2.0,
                          DEFAULT_POLICY)
    assert again.ok and not again.applied and "applied already" in again.detail["note"]
    assert h.pacer.policy.min_gap_s == 2.0 and h.control_version == 1
    # A later command from a sender whose clock is behind still applies: the topic's
    # order is the order, not the senders' clocks.
    later = apply_command(h, cmd(Command.PAUSE, 40), 2.0, DEFAULT_POLICY)
    assert later.applied and h.paused and h.control_version == 2


def test_reset_goes_back_to_the_configured_policy_with_a_newer_version():
    h = host()
    with_robots(h)
    apply_command(h, cmd(Command.SET, 5, settings={"min_gap_s": 7.0, "max_in_flight": 3}),
                  1.0, DEFAULT_POLICY)
    apply_command(h, cmd(Command.PAUSE, 6), 1.0, DEFAULT_POLICY)
    reply = apply_command(h, cmd(Command.RESET, 7), 1.0, DEFAULT_POLICY)
    assert reply.applied and not h.paused
    assert replace(h.pacer.policy, policy_version=0) == DEFAULT_POLICY
    assert h.pacer.policy.policy_version == 2


def test_bad_settings_are_refused_and_change_nothing():
    h = host()
    reply = apply_command(h, cmd(Command.SET, 5, settings={"speed": 9}), 1.0, DEFAULT_POLICY)
    assert not reply.ok and "speed" in reply.error and h.control_version == 0
    assert not apply_command(h, cmd(Command.SET, 6), 1.0, DEFAULT_POLICY).ok
    assert not apply_command(h, cmd(Command.SHOW_URL, 7), 1.0, DEFAULT_POLICY).ok


def test_controls_and_recent_outcomes_survive_a_restore_and_old_state_restores_unpaused():
    h = host()
    t = with_robots(h, urls=[f"{H}/p{i}" for i in range(3)])
    drain(h, t, t + 2)
    apply_command(h, cmd(Command.SET, 9, settings={"min_gap_s": 4.0}), t + 2, DEFAULT_POLICY)
    apply_command(h, cmd(Command.PAUSE, 10), t + 2, DEFAULT_POLICY)
    back = HostFrontier.restore(h.snapshot(), CFG)
    assert back.paused and back.control_version == 2 and back.pacer.policy.min_gap_s == 4.0
    assert back.commands == ["c9", "c10"]
    assert back.ends.recent == h.ends.recent
    assert [r[2] for r in back.ends.recent][-1] == Outcome.OK.value
    assert back.ends.recent[0][1] == "ROBOTS"
    old = {k: v for k, v in h.snapshot().items()
           if k not in ("paused", "control_version", "commands", "recent")}
    older = HostFrontier.restore(old, CFG)  # written by a build without host controls
    assert not older.paused and older.control_version == 0
    assert {"paused", "control_version", "commands", "recent"} <= older.added_fields


def test_url_show_says_why_a_url_waits():
    h = host()
    h.discover(f"{H}/a", 0.0)
    assert describe_url(h, f"{H}/nope", 0.0)["known"] is False
    assert "robots.txt" in describe_url(h, f"{H}/a", 0.0)["why"]
    t = with_robots(h, body="User-agent: *\nDisallow: /private/\n", urls=[f"{H}/private/x"])
    assert "disallowed" in describe_url(h, f"{H}/private/x", t)["why"]
    lease = h.poll(t)
    assert lease is not None and lease.url == f"{H}/a"
    d = describe_url(h, f"{H}/a", t)
    assert d["status"] == UrlStatus.LEASED.value and d["why"].startswith("leased")
    h.complete(ok(lease, http_status=200), t)
    d = describe_url(h, f"{H}/a", t + 0.2)
    assert d["status"] == "FETCHED" and "next visit in" in d["why"] and d["version"] == 1
    h.discover(f"{H}/b", t + 0.2)
    apply_command(h, cmd(Command.PAUSE, 1), t + 0.2, DEFAULT_POLICY)
    assert "paused" in describe_url(h, f"{H}/b", t + 0.2)["why"]
    apply_command(h, cmd(Command.RESUME, 2), t + 0.2, DEFAULT_POLICY)
    h.discover(f"{H}/c", t + 0.2)
    assert "politeness" in describe_url(h, f"{H}/b", t + 0.5)["why"]  # the 1 s gap
    assert "ahead of it" in describe_url(h, f"{H}/c", t + 5)["why"] or \
        "ahead of it" in describe_url(h, f"{H}/b", t + 5)["why"]
    json.dumps(describe_url(h, f"{H}/b", t + 5))  # the reply is JSON
    assert "why:" in render_url(describe_url(h, f"{H}/b", t + 5))
    text = render_host(describe(h, t + 5))
    assert "robots.txt: RULES" in text and "OK 200 (page" in text


def test_host_policy_settings_are_checked_like_the_configuration():
    assert host_policy_settings({"politeness.min_gap_s": "3", "max_in_flight": "2"}) == \
        {"min_gap_s": 3.0, "max_in_flight": 2}
    for bad, words in (({"politeness.min_gap_s": "-1"}, "politeness.min_gap_s"),
                       ({"politeness.max_in_flight": "1.5"}, "expected an integer"),
                       ({"fetch.timeout_s": "3"}, "not a per-host policy key"),
                       ({"policy_version": "3"}, "not a per-host policy key")):
        with pytest.raises(ConfigError, match=words):
            host_policy_settings(bad)


@pytest.mark.parametrize("argv, words", [
    (["host", "set", "http://a.test"], "set needs at least one"),
    (["host", "set", "http://a.test", "politeness.min_gap_s=-2"], "politeness.min_gap_s"),
    (["host", "set", "http://a.test", "fetch.timeout_s=2"], "not a per-host policy key"),
    (["host", "set", "http://a.test", "min_gap_s"], "look like"),
    (["host", "pause", "a.test"], "scheme://host"),
    (["host", "pause", "http://a.test", "min_gap_s=1"], "takes no settings"),
    (["url", "show", "ftp://a.test/x"], "URL"),
    (["host", "show", "http://a.test", "--timeout", "0"], "--timeout"),
])
def test_bad_host_and_url_commands_are_one_line_and_exit_2(argv, words, capsys):
    assert crawl(argv) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1


def test_host_key_of_takes_a_url_or_a_host_key():
    assert host_key_of("https://Example.COM") == "https://example.com"
    assert host_key_of("http://a.test:8080/x/y?z") == "http://a.test:8080"
    assert host_key_of("example.com") is None


def test_a_running_crawl_is_found_by_its_run_file_and_a_dead_one_is_not(tmp_path):
    alive = tmp_path / "runs" / "20261201-000001"
    record_run(alive, "20261201-000001", ["topics.leases.name=run-x.crawl.leases"], [])
    dead = tmp_path / "runs" / "20261201-000002"
    record_run(dead, "20261201-000002", [], [])
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    data = json.loads((dead / "run.json").read_text())
    (dead / "run.json").write_text(json.dumps({**data, "pid": int(gone.stdout)}))
    assert [r.run_id for r in live_runs(tmp_path)] == ["20261201-000001"]
    run = find_run(tmp_path, None)
    assert run is not None and run.pid == os.getpid()
    assert run.overrides == ("topics.leases.name=run-x.crawl.leases",)
    with pytest.raises(RunNotFound, match="20261201-000002"):
        find_run(tmp_path, "20261201-000002")
    forget_run(alive)
    assert find_run(tmp_path, None) is None
