"""The frontier operator's host value in keyed state (udfs/frontier/operator.py,
`FrontierFunction._save`): after every call, completions, rediscoveries and timers alike,
what a restore would read is the live host's value."""

from __future__ import annotations

from udfs.config import load_config

from .test_config_keys import (  # noqa: F401  (world: the fixture)
    Answer,
    FrontierJob,
    seeds,
    world,
)

H = "http://a.test"
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
        # What a restore would read is what the host would write now (nothing pending).
        assert fn.host_state.value() == h.save(fn.url_state, fn.resident, fn.segments,
                                               fn.robots_body)

    fn._save = checked
    with job.clock():
        job.discover(**seeds("/1"))
        job.run(30)
        job.discover(**seeds(*(link[len(H):] for link in LINKS)))  # all known by now
        job.run(60)
    assert len(job.leased()) == len(LINKS)  # every page, once
    assert calls[0] > 3 * len(LINKS)  # completions, rediscoveries, timers
