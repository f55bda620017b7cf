"""The frontier operator's calls (udfs/frontier/operator.py): a completion brings its own
host's new URLs in the same call, and after every call, completions, rediscoveries and
timers alike, what a restore would read is the live host's value (`_save`)."""

from __future__ import annotations

from udfs.config import load_config
from udfs.core.frontier import HostFrontier
from udfs.frontier.operator import host_row

from .test_config_keys import (  # noqa: F401  (world: the fixture)
    Answer,
    FrontierJob,
    completion_record,
    seeds,
    world,
)

H = "http://a.test"
OTHER = "http://b.test"
LINKS = tuple(f"{H}/{i}" for i in range(1, 7))


def known_links(lease: dict, job: FrontierJob) -> Answer:
    """Every page links to the same six pages of its host: after the first, links it knew."""
    return Answer(duration_s=0.05, links=LINKS)


def test_the_stored_host_is_the_live_one_after_every_call(world):  # noqa: F811
    cfg = load_config(env={}, overrides=["politeness.min_gap_s=1.0"])
    job = FrontierJob(cfg, world, known_links, lookahead=True)
    fn = job.fn
    calls = [0]
    save = fn._save

    def checked(h, before: int, now: float) -> None:
        save(h, before, now)
        calls[0] += 1
        # What a restore would read back (its value, URLs and robots.txt) is the live host.
        restored = HostFrontier.load(h.host_key, fn.host_state.value(), fn.cfg, fn.url_state,
                                     fn.resident, fn.segments, fn.url_state.items,
                                     fn.resident.keys, fn.robots_body)
        assert restored.snapshot() == h.snapshot()

    fn._save = checked
    with job.clock():
        job.discover(**seeds("/1"))
        job.run(30)
        job.discover(**seeds(*(link[len(H):] for link in LINKS)))  # all known by now
        job.run(60)
    assert len(job.leased()) == len(LINKS)  # every page, once
    assert calls[0] > 2 * len(LINKS)  # completions, rediscoveries, timers


def test_a_completion_brings_its_own_hosts_urls_and_others_go_apart(world):  # noqa: F811
    cfg = load_config(env={}, overrides=["politeness.min_gap_s=1.0"])

    def links(lease: dict, job: FrontierJob) -> Answer:  # a.test's pages link; b.test's not
        return Answer(links=(f"{H}/2", f"{H}/3", f"{OTHER}/1") if lease["host_key"] == H
                      else ())

    job = FrontierJob(cfg, world, links, lookahead=True)
    kinds: list[tuple[str, str]] = []
    process = job.fn.process_element

    def recorded(value, ctx):
        kinds.append((ctx.get_current_key(), chr(value[0])))
        return process(value, ctx)

    job.fn.process_element = recorded
    with job.clock():
        job.discover(**seeds("/1"))
        job.run(30)
    assert set(job.leased()) == {f"{H}/1", f"{H}/2", f"{H}/3", f"{OTHER}/1"}
    # a.test's pages came back as completions (C) that brought its URLs: its only D row
    # is the seed's. b.test's URL went apart, in a D row of its own.
    assert [k for k in kinds if k[0] == H and k[1] == "D"] == [(H, "D")]
    assert sum(1 for k in kinds if k == (H, "C")) >= 4  # robots.txt and three pages
    assert (OTHER, "D") in kinds


def test_a_completion_alone_as_an_earlier_build_sent_it_is_still_taken(world):  # noqa: F811
    # Before completions brought their host's URLs along, the row held the completion
    # alone (defensive: aligned checkpoints keep no row in transit to the operator).
    cfg = load_config(env={}, overrides=["politeness.min_gap_s=1.0"])
    job = FrontierJob(cfg, world, lambda lease, job: None, lookahead=True)
    with job.clock():
        job.discover(**seeds("/1"))
        job.run(2)
        lease = next(x for x in job.leases if x["kind"] == "PAGE")
        completion = job.reg.decode("completion", job.reg.encode(
            "completion", completion_record(lease, Answer(), job.now)))
        completion["discovered"] = []
        job.key = H
        job._collect(job.fn.process_element(host_row(H, "C", completion)[1], job.ctx))
    assert job.keyed("host", H)["stats"]["completions_accepted"] == 1  # the page /1
