"""Trap rules: one URL's limits, template growth per host, daily host budget."""

from __future__ import annotations

import pytest

from udfs.config import load_defaults
from udfs.config.policies import trap_policy
from udfs.core.traps import (
    DAY_S,
    DailyBudget,
    TemplateBudget,
    TrapPolicy,
    TrapReason,
    check_url,
    url_template,
)

POLICY = trap_policy(load_defaults())


def test_policy_comes_from_the_configuration():
    assert POLICY.max_url_length == 2048 and POLICY.max_depth == 16


@pytest.mark.parametrize("url, depth, reason", [
    ("http://h.example/a", 0, None),
    ("http://h.example/a", 16, None),
    ("http://h.example/a", 17, TrapReason.DEPTH),
    ("http://h.example/" + "a" * 2031, 1, None),  # exactly 2,048 characters
    ("http://h.example/" + "a" * 2032, 1, TrapReason.URL_LENGTH),
    ("http://h.example/?" + "&".join(f"p{i}=1" for i in range(16)), 1, None),
    ("http://h.example/?" + "&".join(f"p{i}=1" for i in range(17)), 1, TrapReason.QUERY_PARAMS),
    ("http://h.example/a/b/a/b/a/b", 1, None),
    ("http://h.example/a/b/a/b/a/b/a", 1, TrapReason.REPEATED_SEGMENTS),
    ("http://h.example/x/x/x/x", 1, TrapReason.REPEATED_SEGMENTS),
])
def test_check_url(url, depth, reason):
    assert len("http://h.example/" + "a" * 2031) == 2048
    assert check_url(url, depth, POLICY) == reason


@pytest.mark.parametrize("url, template", [
    ("http://h.example/cal/2026/11/30?view=day", "/cal/{n}/{n}/{n}?view=day"),
    ("http://h.example/item/0a1b2c3d4e5f?ref=x", "/item/{hex}?ref=x"),
    ("http://h.example/u/123e4567-e89b-12d3-a456-426614174000", "/u/{uuid}"),
    ("http://h.example/page-12.html?p=3&q=abc", "/page-{n}.html?p={n}&q=abc"),
    ("http://h.example/about", "/about"),
    ("http://h.example/deadbeef", "/deadbeef"),  # hex-looking words without digits stay
])
def test_url_template(url, template):
    assert url_template(url) == template


def test_template_budget_pauses_and_samples_one_pattern_only():
    policy = TrapPolicy(template_budget=10, template_sample_every=5)
    budget = TemplateBudget()
    now = 1000.0
    admitted = [budget.admit(f"http://h.example/cal/2026/{i}", now, policy) is None
                for i in range(40)]
    assert admitted[:10] == [True] * 10
    # Past the budget: paused, one in five sampled (the 15th, 20th, ... new URL).
    assert sum(admitted[10:]) == 6 and admitted[14] and not admitted[10]
    reasons = {budget.admit("http://h.example/cal/2026/99", now, policy)}
    assert reasons == {TrapReason.TEMPLATE_BUDGET}
    # Unrelated URLs of the same host are not blocked.
    assert budget.admit("http://h.example/about", now, policy) is None
    assert budget.admit("http://h.example/news/7", now, policy) is None
    # A new day starts a new budget.
    assert budget.admit("http://h.example/cal/2026/100", now + DAY_S, policy) is None


def test_template_state_is_bounded():
    policy = TrapPolicy(max_templates_per_host=3, template_budget=2, template_sample_every=1000)
    budget = TemplateBudget()
    for word in ("a", "b", "c", "d", "e", "f"):
        budget.admit(f"http://h.example/{word}", 0, policy)
    assert len(budget.counts) == 4 and budget.counts[TemplateBudget.OVERFLOW] == 3
    assert budget.admit("http://h.example/g", 0, policy) is TrapReason.TEMPLATE_BUDGET


def test_daily_budget():
    b = DailyBudget()
    assert [b.take(10.0, 3) for _ in range(4)] == [None, None, None,
                                                    TrapReason.HOST_DAILY_BUDGET]
    assert b.remaining(10.0, 3) == 0 and b.remaining(DAY_S + 1, 3) == 3
    assert b.take(DAY_S + 1, 3) is None and b.used == 1
