"""core.analysis.rates: an error rate's difference between arms, defined at zero errors,
against Newcombe's published example and a seeded coverage simulation; and the arm table
giving it (never "fewer than 3 trials" at 10 trials)."""

from __future__ import annotations

import numpy as np
import pytest

from core.analysis.rates import rate_difference, wilson
from core.analysis.runs import RunView
from core.analysis.stats import RunOfArm, arm_stats
from core.run_folder import RunStatus


def test_newcombes_example_and_wilsons_interval_at_zero() -> None:
    # Newcombe 1998, Stat Med 17, table II: 56/70 vs 48/80 → +0.2000 (0.0524, 0.3339)
    d, low, high = rate_difference({0: (56, 70)}, {0: (48, 80)}) or (0, 0, 0)
    assert (d, low, high) == pytest.approx((0.2, 0.0524, 0.3339), abs=5e-4)
    assert wilson(0, 100) == pytest.approx((0.0, 0.0370), abs=5e-4)
    assert rate_difference({0: (0, 0)}, {0: (1, 10)}) is None


def test_the_interval_covers_at_its_level_with_rates_near_zero() -> None:
    """2000 seeded pairs of arms, 10 trials of 200 requests, error rates 0.2 % and 0.5 %
    (most trials have no error): the 95 % interval covers the true difference at least
    93 % of the time."""
    rng = np.random.default_rng(7)
    covered = 0
    for _ in range(2000):
        a = {t: (int(rng.binomial(200, 0.005)), 200) for t in range(10)}
        b = {t: (int(rng.binomial(200, 0.002)), 200) for t in range(10)}
        _, low, high = rate_difference(a, b) or (0, 1, -1)
        covered += low <= 0.003 <= high
    assert covered / 2000 >= 0.93


def _run(arm: str, trial: int, failed: int) -> RunOfArm:
    metrics = {"error_rate": failed / 100, "failed": failed, "num_requests": 100}
    point = {"index": 0, "label": "c=1", "point": {"concurrency": 1}, "metrics": metrics}
    view = RunView(f"{arm}{trial}", {}, RunStatus(state="succeeded"), {}, None, {}, [point])
    return RunOfArm(arm, trial, view)


def test_an_error_rate_with_zeros_gets_an_interval_and_a_word_at_ten_trials() -> None:
    base = [_run("A", t, 0) for t in range(10)]
    worse = [_run("B", t, 3 if t % 2 else 0) for t in range(10)]  # 15 of 1000
    table = arm_stats([*base, *worse], "A", metrics=("error_rate",))
    row = table[table["arm"] == "B"].iloc[0]
    assert row["rel"] == pytest.approx(0.015)
    assert row["rel_low"] > 0 and row["label"] == "worse"
    assert "fewer than 3 trials" not in row["label"]
