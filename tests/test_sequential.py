"""core.analysis.sequential: the stop rule of trials: auto, on synthetic data (seeded), as
the attribution tests do: its error rate with no effect under repeated looks, its power
with a real one, and equivalence inside the margin."""

from __future__ import annotations

import numpy as np

from core.analysis.sequential import decide, look_level, margins_for, planned_looks
from core.analysis.stats import paired_log_ratio

MIN_T, MAX_T = 3, 10


def _simulate(
    effect: float, noise_sd: float, n_sim: int, level: float, margin: float = 0.05, seed: int = 23
) -> tuple[dict[str, int], list[int]]:
    """n_sim adaptive experiments of one contrast (throughput, higher is better): a
    per-trial host level shared by both arms (sd 20 %, the pairing removes it), lognormal
    noise per run. After each trial from MIN_T on: decide at ``level``; stop when decided
    or at MAX_T. The decisions and the trials each took."""
    rng = np.random.default_rng(seed)
    out = {"better": 0, "worse": 0, "equivalent": 0, "undecided": 0}
    took = []
    for _ in range(n_sim):
        host = rng.normal(0, 0.2, MAX_T)
        base = np.exp(np.log(1000) + host + rng.normal(0, noise_sd, MAX_T))
        arm = np.exp(np.log(1000 * (1 + effect)) + host + rng.normal(0, noise_sd, MAX_T))
        decision = "undecided"
        n = MIN_T
        for n in range(MIN_T, MAX_T + 1):
            rel, low, high = paired_log_ratio(
                dict(enumerate(arm[:n])), dict(enumerate(base[:n])), level
            )
            decision = decide("output_throughput", rel, low, high, margin)
            if decision != "undecided":
                break
        out[decision] += 1
        took.append(n)
    return out, took


def test_the_level_spends_alpha_over_the_planned_looks() -> None:
    assert planned_looks(3, 10) == 8
    assert look_level(3, 10) == 1 - 0.05 / 8
    assert look_level(3, 3) == 0.95  # one look: the plain interval


def test_no_effect_is_called_better_or_worse_at_most_5_percent_of_the_time() -> None:
    """2000 experiments with no effect, looking after every trial from 3 to 10: the share
    called better or worse (a type-I error; "equivalent" and "undecided" are not) stays
    at most the nominal 5 % (the binomial standard error at 5 % is 0.5 %). The plain 95 %
    interval looked at the same way errs far more often: the adjustment is needed."""
    adjusted, _ = _simulate(0.0, 0.05, 2000, look_level(MIN_T, MAX_T))
    errors = (adjusted["better"] + adjusted["worse"]) / 2000
    assert errors <= 0.05
    naive, _ = _simulate(0.0, 0.05, 2000, 0.95)
    assert (naive["better"] + naive["worse"]) / 2000 > 0.08


def test_a_real_effect_is_found_in_few_trials() -> None:
    """+20 % throughput with 5 % run noise: "better" in at least 95 % of 500 experiments,
    in about 5 trials (median), never "worse"."""
    found, took = _simulate(0.20, 0.05, 500, look_level(MIN_T, MAX_T), seed=5)
    assert found["better"] / 500 >= 0.95 and found["worse"] == 0
    assert float(np.median(took)) <= 6


def test_no_effect_with_little_noise_ends_equivalent() -> None:
    """No effect, 1 % run noise, a ±5 % margin: most experiments end "equivalent"."""
    found, _ = _simulate(0.0, 0.01, 500, look_level(MIN_T, MAX_T), seed=7)
    assert found["equivalent"] / 500 >= 0.9


def test_decisions() -> None:
    assert decide("output_throughput", 0.1, 0.02, 0.2, 0.05) == "better"
    assert decide("median_ttft_ms", 0.1, 0.02, 0.2, 0.05) == "worse"  # lower is better
    assert decide("median_ttft_ms", -0.1, -0.2, -0.02, 0.05) == "better"
    assert decide("output_throughput", 0.0, -0.03, 0.04, 0.05) == "equivalent"
    assert decide("output_throughput", 0.0, -0.03, 0.06, 0.05) == "undecided"
    # inside the margin but excluding 0: a detected change, not "equivalent"
    assert decide("output_throughput", 0.02, 0.01, 0.03, 0.05) == "better"
    assert decide("output_throughput", 0.02, None, None, 0.05) == "undecided"


def test_margins_come_from_the_spec_then_the_noise_floor_then_the_default() -> None:
    floor = {"experiment_id": "exp-aa", "output_throughput": 0.03, "median_ttft_ms": 0.0}
    assert margins_for({"median_itl_ms": 0.1}, floor, 0.05) == {
        "output_throughput": 0.03,
        "median_ttft_ms": 0.05,  # a floor of 0 is no margin
        "median_itl_ms": 0.1,
    }
    assert margins_for({}, None, 0.05) == dict.fromkeys(
        ("output_throughput", "median_ttft_ms", "median_itl_ms"), 0.05
    )
