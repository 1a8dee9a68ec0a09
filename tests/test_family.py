"""Holm and Benjamini–Hochberg as pure functions, and the p-value behind a paired interval."""

from __future__ import annotations

import math

import numpy as np
import pytest

from core.analysis.family import benjamini_hochberg, holm, holm_name, p_from_interval
from core.analysis.stats import paired_log_ratio


def test_holm_steps_down_and_stops_at_the_first_failure() -> None:
    # sorted: 0.01 <= 0.05/4, 0.015 <= 0.05/3, 0.03 > 0.05/2: stop; 0.04 never tested
    assert holm([0.03, 0.01, 0.04, 0.015]) == [False, True, False, True]
    assert holm([0.01, 0.02]) == [True, True]  # 0.01 <= 0.025, 0.02 <= 0.05
    assert holm([0.051, 0.001]) == [False, True]  # the last one against 0.05 itself
    assert holm([math.nan, 0.001]) == [False, True]
    assert holm([]) == []


def test_benjamini_hochberg_takes_the_largest_passing_rank() -> None:
    # m=4, q=0.05: thresholds 0.0125, 0.025, 0.0375, 0.05; p_(3)=0.03 passes, so ranks 1-3
    assert benjamini_hochberg([0.03, 0.02, 0.2, 0.014]) == [True, True, False, True]
    assert benjamini_hochberg([0.5, 0.6]) == [False, False]
    assert benjamini_hochberg([math.nan, 0.0]) == [False, True]


def test_holm_names_its_family() -> None:
    assert holm_name(6) == "Holm over 6 comparisons" and holm_name(1) == "Holm over 1 comparison"


def test_the_p_value_of_an_interval_is_the_paired_t_tests() -> None:
    """Recovered from the interval alone, it equals the paired t-test on the log-ratios."""
    from scipy import stats as sps

    rng = np.random.default_rng(4)
    for _ in range(20):
        a = dict(enumerate(100 * np.exp(rng.normal(0.05, 0.1, 4))))
        b = dict(enumerate(100 * np.exp(rng.normal(0.0, 0.1, 4))))
        change, low, high = paired_log_ratio(a, b)
        assert change is not None and low is not None and high is not None
        logs = np.log([a[t] / b[t] for t in range(4)])
        expected = float(sps.ttest_1samp(logs, 0.0).pvalue)
        assert p_from_interval(change, low, high, 4) == pytest.approx(expected, rel=1e-6)
        # an interval that excludes 0 is exactly a p-value under 5 %
        assert (p_from_interval(change, low, high, 4) < 0.05) == (low > 0 or high < 0)
