"""core.analysis.sequential: the stop rule of trials: auto, on synthetic data (seeded), as
the attribution tests do: its error rate with no effect under repeated looks, its power
with a real one, and equivalence inside the margin."""

from __future__ import annotations

import numpy as np
import pytest

from bench.sim_sequential import experiment
from core.analysis.sequential import (
    ALPHA,
    PRIMARY_SHARE,
    decide,
    headline_contrasts,
    look_level,
    margins_for,
    nominal_levels,
    planned_looks,
)

MIN_T, MAX_T = 3, 10


def test_the_boundary_spends_alpha_over_the_planned_looks() -> None:
    """Each look's nominal level grows toward the last (error spending); one look is the
    plain interval; the last of 3…10 keeps most of the fixed design's level."""
    levels = nominal_levels(0.05, MIN_T, MAX_T)
    assert planned_looks(MIN_T, MAX_T) == len(levels) == 8
    assert list(levels) == sorted(levels) and levels[0] < 0.001
    assert 0.035 < levels[-1] < 0.05
    assert look_level(3, 3) == pytest.approx(1 - ALPHA, abs=0.002)


def test_no_effect_is_called_better_or_worse_at_most_5_percent_per_experiment() -> None:
    """Seeded A/A experiments (three headline contrasts, runs of a trial correlated 0.5,
    CV 10 %) through the stop rule: any contrast called better/worse in at most 5 %; the
    binomial sd at 300 experiments is 1.3 %, so the bound is checked with room."""
    rng = np.random.default_rng(11)
    wrong = sum(
        any(d in ("better", "worse") for d in experiment(rng, 0.0, 0.10, 0.5, 3, 10)[0].values())
        for _ in range(300)
    )
    assert wrong / 300 <= 0.07


def test_a_real_effect_is_found_and_never_called_equivalent() -> None:
    """+20 % at CV 10 %: throughput better in most experiments, no contrast ever ends
    "equivalent" (the margin is ±5 %), and once decided a contrast stays decided."""
    rng = np.random.default_rng(5)
    results = [experiment(rng, 0.20, 0.10, 0.5, 3, 10) for _ in range(100)]
    assert sum(d["output_throughput"] == "better" for d, _ in results) >= 90
    assert not any("equivalent" in d.values() for d, _ in results)
    assert float(np.mean([n for _, n in results])) < 10


def test_decisions() -> None:
    assert decide("output_throughput", 0.1, 0.02, 0.2, 0.05) == "better"
    assert decide("median_ttft_ms", 0.1, 0.02, 0.2, 0.05) == "worse"  # lower is better
    assert decide("median_ttft_ms", -0.1, -0.2, -0.02, 0.05) == "better"
    assert decide("output_throughput", 0.0, -0.03, 0.04, 0.05) == "equivalent"
    assert decide("output_throughput", 0.0, -0.03, 0.06, 0.05) == "undecided"
    # inside the margin but excluding 0: a detected change, not "equivalent"
    assert decide("output_throughput", 0.02, 0.01, 0.03, 0.05) == "better"
    assert decide("output_throughput", 0.02, None, None, 0.05) == "undecided"


def test_margins_come_from_the_plan_never_from_an_aa() -> None:
    assert margins_for({"median_itl_ms": 0.1}, 0.05) == {
        "output_throughput": 0.05,
        "median_ttft_ms": 0.05,
        "median_itl_ms": 0.1,
    }


def test_a_decided_contrast_stays_decided_and_passes_its_level_on() -> None:
    """A look keeps what the last look decided (its interval too), even when the new
    trial alone would not decide it; once throughput is found better, TTFT and ITL are
    tested at a higher level than their initial share."""
    from bench.sim_sequential import runs_of

    rng = np.random.default_rng(3)
    big = {"A": np.full((10, 3), 100.0), "B": np.full((10, 3), 100.0)}
    big["B"][:, 0] = 150 * np.exp(rng.normal(0, 0.01, 10))  # throughput +50 %
    big["A"][:, 1:] *= np.exp(rng.normal(0, 0.2, (10, 2)))  # latencies: noisy, no change
    margins = margins_for({}, 0.05)
    first = headline_contrasts(
        runs_of({k: v[:6] for k, v in big.items()}, 6), "A", margins, 6, min_trials=3, max_trials=10
    )
    tput = next(c for c in first if c.metric == "output_throughput")
    assert tput.decision == "better"
    others = [c for c in first if c.metric != "output_throughput"]
    base_level = 1 - nominal_levels(ALPHA * (1 - PRIMARY_SHARE) / 2, 3, 10)[3]
    assert all(c.decision == "undecided" and c.level < base_level for c in others)  # type: ignore[attr-defined]
    big["B"][6:, 0] = 100.0  # the next trial shows no change in throughput
    later = headline_contrasts(
        runs_of({k: v[:7] for k, v in big.items()}, 7),
        "A",
        margins,
        7,
        min_trials=3,
        max_trials=10,
        previous=first,
    )
    kept = next(c for c in later if c.metric == "output_throughput")
    assert kept == tput
