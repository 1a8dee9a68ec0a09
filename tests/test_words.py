"""The four words, from one place: better / worse beyond zero, equivalent inside the plan's
margin, inconclusive with the trials that would resolve it, unconfirmed without an interval."""

from __future__ import annotations

import math

import pytest

from core.analysis import points
from core.analysis.power import resolvable_effect
from core.analysis.stats import t_quantile
from core.analysis.words import (
    UNCONFIRMED,
    Reading,
    demote,
    margin_of,
    read_difference,
    trials_to_resolve,
)


def test_an_interval_beyond_zero_is_better_or_worse_by_the_metrics_direction() -> None:
    assert read_difference("output_throughput", 0.1, 0.05, 0.15, 3).word == "better"
    assert read_difference("median_ttft_ms", 0.1, 0.05, 0.15, 3).word == "worse"
    assert read_difference("median_ttft_ms", -0.1, -0.15, -0.05, 3).word == "better"


def test_an_interval_inside_the_margin_is_equivalent_and_the_margin_is_the_plans() -> None:
    r = read_difference("output_throughput", 0.01, -0.03, 0.04, 5)
    assert r.word == "equivalent" and r.text() == "equivalent within ±5%"
    wide = read_difference("output_throughput", 0.01, -0.03, 0.04, 5, margin=0.025)
    assert wide.word == "inconclusive"
    assert margin_of({"equivalence_margin_pct": 2.5}) == 0.025 and margin_of({}) == 0.05
    assert Reading("equivalent", 0.025).text() == "equivalent within ±2.5%"


def test_a_wide_interval_is_inconclusive_with_the_trials_that_would_resolve_it() -> None:
    """The KV-pressure demo's −0.7 % [−9.0, +8.5] at 97.5 % over 4 trials."""
    r = read_difference("output_throughput", -0.007, -0.090, 0.085, 4, level=0.975)
    assert r.word == "inconclusive" and r.resolve == 0.05 and r.trials is not None
    assert r.text() == f"inconclusive; about {r.trials} trials would resolve ±5% at this noise"
    # the trial count is power.resolvable_effect's: the first N whose half-width is ≤ 5 %
    assert r.trials > 4
    sd = 0.0420  # (ln 1.085 − ln 0.910) / 2 / t(0.9875, 3) · √4
    assert r.trials == trials_to_resolve(sd, 0.05, 5)
    assert resolvable_effect(sd, r.trials) <= 0.05 < resolvable_effect(sd, r.trials - 1)  # type: ignore[operator]
    # a change larger than the margin: the trials that would tell it from zero
    big = read_difference("output_throughput", 0.09, -0.30, 0.69, 3)
    assert big.resolve == pytest.approx(0.09) and "would resolve ±9%" in big.text()
    assert trials_to_resolve(10.0, 0.01) is None
    assert "more than 50 trials" in Reading("inconclusive", 0.05, None, 0.01).text()


def test_no_interval_is_unconfirmed_however_large_and_never_coloured() -> None:
    for change in (0.001, 0.3, -0.9):
        r = read_difference("output_throughput", change, None, None, 1)
        assert r.word == UNCONFIRMED and not r.coloured and r.text() == "unconfirmed"
    assert read_difference("output_throughput", None, None, None, 0).word == UNCONFIRMED


def test_a_finding_the_family_does_not_confirm_reads_worse_alone_never_inconclusive() -> None:
    """The graphs-off demo's c=64 contrast: its 95 % interval excludes zero over 3 trials,
    Holm over 6 does not confirm it; it reads worse alone, with the trials whose 99.2 %
    interval (5 % / 6) would exclude zero at this noise, were the change what it is now."""
    r = read_difference("output_throughput", -0.655, -0.816, -0.353, 3)
    assert r.word == "worse"
    d = demote(r, "the family (Holm over 6 comparisons)", 1 - 0.05 / 6, (-0.655, -0.816, -0.353), 3)
    assert d.word == "worse alone" and not d.coloured and d.trials == 4
    assert d.text() == (
        "worse alone, not confirmed over the family (Holm over 6 comparisons); about 4 trials "
        "would confirm it at this noise (at 99.2%, the per-comparison level that confirms it)"
    )
    assert "inconclusive" not in d.text()
    # the trials are the first whose interval at the family's level excludes zero
    sd = (math.log1p(-0.353) - math.log1p(-0.816)) / 2 / t_quantile(0.975, 2) * math.sqrt(3)
    for n, excludes in ((3, False), (4, True)):
        half = t_quantile(1 - 0.05 / 12, n - 1) * sd / math.sqrt(n)
        assert (half < abs(math.log1p(-0.655))) is excludes
    up = demote(
        read_difference("output_throughput", 0.02, 0.006, 0.034, 3),
        "x",
        0.99,
        (0.02, 0.006, 0.034),
        3,
    )
    assert up.word == "better alone" and up.text().startswith("better alone, not confirmed over x")
    same = read_difference("output_throughput", 0.0, -0.01, 0.01, 3)
    assert demote(same, "x", 0.99, (0.0, -0.01, 0.01), 3) == same


def test_the_resolvable_effect_at_a_stricter_level_is_wider() -> None:
    assert resolvable_effect(0.1, 5) == resolvable_effect(0.1, 5, 0.95)
    strict = resolvable_effect(0.1, 5, 1 - 0.05 / 6)
    assert strict is not None and strict > (resolvable_effect(0.1, 5) or 0)


def test_the_single_run_table_says_the_same_word() -> None:
    assert points.UNCONFIRMED == UNCONFIRMED
