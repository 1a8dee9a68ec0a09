"""Experiment statistics on hand-made data: a real difference is found, an A/A
difference is called noise, small samples get no invented interval."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from core.analysis.runs import RunView
from core.analysis.stats import RunOfArm, arm_stats, mean_ci, paired_log_ratio, verdict
from core.run_folder import RunStatus


def view(
    run_id: str,
    tput: dict[int, float],
    tpot_ms: float = 20.0,
    graphs: bool = True,
    frac: float = 0.85,
    kv: int = 100_000,
) -> RunView:
    points = [
        {
            "index": i,
            "label": f"c={c}",
            "point": {"concurrency": c, "request_rate": "inf", "input_len": 32, "output_len": 32},
            "metrics": {
                "output_throughput": t,
                "median_tpot_ms": tpot_ms,
                "median_ttft_ms": 50.0,
                "error_rate": 0.0,
            },
        }
        for i, (c, t) in enumerate(sorted(tput.items()))
    ]
    spec = {
        "server": {"engine": "sglang", "cuda_graphs": graphs, "mem_fraction_static": frac},
        "plan": {"seed": 42},
        "intended_diff": ["server.cuda_graphs"],
    }
    return RunView(
        run_id, spec, RunStatus(state="succeeded"), {"kv_cache_tokens": kv}, None, {}, points
    )


def test_mean_ci_needs_three_trials() -> None:
    assert mean_ci([10.0, 12.0]) == (11.0, None, None)
    mean, low, high = mean_ci([10.0, 11.0, 12.0])
    assert mean == 11.0 and low is not None and high is not None
    # t(0.975, 2) = 4.303, sem = 1/sqrt(3)
    assert low == pytest.approx(11 - 4.303 / math.sqrt(3), abs=1e-3)


def test_paired_log_ratio_by_hand() -> None:
    """Each trial gives one log(arm/base); mean ± t(n-1) sem, mapped back."""
    rel, low, high = paired_log_ratio({0: 30.0, 1: 33.0, 2: 27.0}, {0: 10.0, 1: 10.0, 2: 10.0})
    logs = np.log([3.0, 3.3, 2.7])
    half = float(sps.t.ppf(0.975, 2)) * float(np.std(logs, ddof=1)) / math.sqrt(3)
    assert rel == pytest.approx(math.expm1(logs.mean()))
    assert low == pytest.approx(math.expm1(logs.mean() - half))
    assert high == pytest.approx(math.expm1(logs.mean() + half))


def test_pairing_by_trial_removes_what_a_trial_shares() -> None:
    """A host that drifts by 20 % between trials moves both arms alike: paired by trial the
    +10 % reads exactly; only the trials both arms completed count."""
    base = {0: 100.0, 1: 80.0, 2: 120.0, 3: 90.0}
    arm = {0: 110.0, 1: 88.0, 2: 132.0}
    assert paired_log_ratio(arm, base) == pytest.approx((0.1, 0.1, 0.1))
    assert paired_log_ratio({0: 110.0, 1: 88.0}, base)[1:] == (None, None)  # 2 pairs


def test_intervals_stay_possible() -> None:
    """A relative change cannot be below -100% and a latency interval not below 0 ms,
    however noisy the trials."""
    rel, low, high = paired_log_ratio({0: 1.0, 1: 50.0, 2: 100.0}, {0: 100.0, 1: 101.0, 2: 99.0})
    assert rel is not None and low is not None and high is not None
    assert -1.0 < low < rel < high
    mean, ci_low, _ = mean_ci([1.0, 50.0, 100.0])  # a t interval would reach -72 ms
    assert mean == pytest.approx(50.333, abs=1e-3) and ci_low == 0.0


def test_zero_error_rates_read_as_no_change() -> None:
    assert paired_log_ratio({0: 0.0, 1: 0.0, 2: 0.0}, {0: 0.0, 1: 0.0, 2: 0.0}) == (0.0, 0.0, 0.0)
    assert paired_log_ratio({0: 0.1, 1: 0.0, 2: 0.0}, {0: 0.0, 1: 0.0, 2: 0.0}) == (None,) * 3


@pytest.mark.parametrize("trials", [3, 8])
def test_paired_interval_covers_a_known_effect_95_percent_of_the_time(trials: int) -> None:
    """500 simulated experiments (seeded): a +15 % effect, a per-trial host level shared by
    both arms (sd 20 %), lognormal noise per run (sd 5 %). The paired 95% interval must
    cover the true +15 % in at least 93 % of them."""
    rng = np.random.default_rng(23)
    effect, covered, n_sim = 0.15, 0, 500
    for _ in range(n_sim):
        host = rng.normal(0, 0.2, trials)
        base = np.exp(np.log(1000) + host + rng.normal(0, 0.05, trials))
        arm = np.exp(np.log(1000 * (1 + effect)) + host + rng.normal(0, 0.05, trials))
        _, low, high = paired_log_ratio(dict(enumerate(arm)), dict(enumerate(base)))
        assert low is not None and high is not None
        covered += low <= effect <= high
    assert covered / n_sim >= 0.93


def test_arm_stats_of_an_experiment_without_results_has_its_columns() -> None:
    queued = RunView("q", {"server": {}}, RunStatus(state="queued"), {}, None, {}, [])
    table = arm_stats([RunOfArm("a", 0, queued), RunOfArm("b", 0, queued)], "a")
    assert table.empty and "metric" in table.columns
    assert verdict("x", table, [RunOfArm("a", 0, queued)], "a") == "x: no comparable results yet."


def test_known_difference_is_found_and_aa_is_noise() -> None:
    on = [
        RunOfArm("graphs on", t, view(f"on{t}", {1: 30 + d, 64: 100 + d}))
        for t, d in enumerate((0.0, 0.6, -0.5))
    ]
    off = [
        RunOfArm("graphs off", t, view(f"off{t}", {1: 10 + d, 64: 100 + e}, graphs=False))
        for t, (d, e) in enumerate(((0.2, 0.3), (-0.3, -0.1), (0.4, 0.1)))
    ]
    table = arm_stats(on + off, baseline_arm="graphs off")
    row = table[(table.metric == "output_throughput") & (table.arm == "graphs on")]
    c1 = row[row.concurrency == 1].iloc[0]
    c64 = row[row.concurrency == 64].iloc[0]
    # the paired estimate: the geometric mean of the per-trial ratios, minus 1
    ratios = [30 / 10.2, 30.6 / 9.7, 29.5 / 10.4]
    assert c1["label"] == "better"
    assert c1["rel"] == pytest.approx(math.prod(ratios) ** (1 / 3) - 1)
    assert c64["label"] == "inconclusive"  # the raw word; the card adds the margin
    sentence = verdict("CUDA graphs", table, on + off, "graphs off")
    assert sentence.startswith("CUDA graphs: +197.5% output throughput at concurrency 1 (95% CI")
    assert "at concurrency 64" in sentence and "inconclusive" in sentence
    assert "KV pool +0.0%" in sentence and "confounders: none." in sentence

    a1 = [RunOfArm("A1", t, view(f"a{t}", {1: 20 + d})) for t, d in enumerate((0.1, -0.2, 0.3))]
    a2 = [RunOfArm("A2", t, view(f"b{t}", {1: 20 + d})) for t, d in enumerate((-0.1, 0.2, 0))]
    aa = arm_stats(a1 + a2, baseline_arm="A1")
    assert set(aa[aa.arm == "A2"]["label"]) == {"inconclusive"}


def test_two_trials_say_unknown_instead_of_inventing_an_interval() -> None:
    runs = [RunOfArm("on", t, view(f"on{t}", {1: 30})) for t in range(2)] + [
        RunOfArm("off", t, view(f"off{t}", {1: 10}, graphs=False)) for t in range(2)
    ]
    table = arm_stats(runs, "off")
    row = table[(table.metric == "output_throughput") & (table.arm == "on")].iloc[0]
    assert row["rel"] == pytest.approx(2.0) and pd.isna(row["rel_low"])
    assert row["label"] == "unconfirmed"
    assert "interval unknown" in verdict("x", table, runs, "off")


def test_confounder_is_named_in_the_verdict() -> None:
    on = [RunOfArm("on", t, view(f"on{t}", {1: 30}, frac=0.92, kv=498_000)) for t in range(3)]
    off = [RunOfArm("off", t, view(f"off{t}", {1: 10}, graphs=False, kv=370_000)) for t in range(3)]
    sentence = verdict("CUDA graphs", arm_stats(on + off, "off"), on + off, "off")
    assert "confounders: server.mem_fraction_static." in sentence
    assert "KV pool +34.6%" in sentence


def test_frontier_and_band_figures() -> None:
    from core.analysis.stats import frontier
    from core.views.figures import arm_bands_figure, frontier_figure

    on = [
        RunOfArm("on", t, view(f"on{t}", {1: 30 + t, 8: 200 + t, 64: 900 + t}, tpot_ms=10.0))
        for t in range(3)
    ]
    off = [
        RunOfArm(
            "off",
            t,
            view(f"off{t}", {1: 10 + t, 8: 60 + t, 64: 300 + t}, tpot_ms=40.0, graphs=False),
        )
        for t in range(3)
    ]
    table = arm_stats(on + off, "off")
    points = frontier(table, gpus_per_run=2)
    row = points[(points.arm == "on") & (points.concurrency == 64)].iloc[0]
    assert row["user_tok_s"] == pytest.approx(100.0)  # 1000 / 10 ms
    assert row["tok_s_per_gpu"] == pytest.approx(901 / 2)
    assert row["on_frontier"]
    fig = frontier_figure(points, 2)
    assert "1000 / median TPOT" in fig.layout.title.text and "2 GPU(s)" in fig.layout.title.text
    bands = arm_bands_figure(table, "output_throughput")
    # per arm: one band (95% CI) and one line
    assert [t.fill for t in bands.data].count("toself") == 2 and len(bands.data) == 4


def test_engine_version_difference_is_a_confounder() -> None:
    on = [RunOfArm("on", t, view(f"on{t}", {1: 30})) for t in range(3)]
    off = [RunOfArm("off", t, view(f"off{t}", {1: 10}, graphs=False)) for t in range(3)]
    off[0].view.facts["engine_version"] = "0.5.10"
    for r in [*on, *off[1:]]:
        r.view.facts["engine_version"] = "0.5.23"
    sentence = verdict("x", arm_stats(on + off, "off"), on + off, "off")
    assert "confounders: facts.engine_version." in sentence


def test_run_cancelled_before_start_is_no_environment_confounder() -> None:
    # The H200 experiment cancelled queued runs (device budget): they have no facts at all,
    # which is not a different engine or GPU.
    runs = [
        RunOfArm(arm, t, view(f"{arm}{t}", {1: 30 if arm == "on" else 10}, graphs=arm == "on"))
        for arm in ("on", "off")
        for t in range(3)
    ]
    for r in runs:
        r.view.facts.update(engine_version="0.5.17", gpu="NVIDIA H200")
    cancelled = view("off3", {}, graphs=False)
    cancelled.facts.clear()
    runs.append(RunOfArm("off", 3, cancelled))
    sentence = verdict("x", arm_stats(runs, "off"), runs, "off")
    assert sentence.endswith("confounders: none.")


def test_each_arm_names_its_own_kv_pool_change() -> None:
    """With several arms the verdict gives each arm's KV-pool change; the last arm's must
    not stand for all (a 2x2 read "KV pool +0%" although two arms had +35%)."""
    base = [
        RunOfArm("off 0.85", t, view(f"a{t}", {1: 10}, graphs=False, kv=370_000)) for t in range(3)
    ]
    big = [
        RunOfArm("off 0.92", t, view(f"b{t}", {1: 10}, graphs=False, kv=498_000)) for t in range(3)
    ]
    on = [RunOfArm("on 0.85", t, view(f"c{t}", {1: 30}, kv=370_000)) for t in range(3)]
    runs = base + big + on
    sentence = verdict("2x2", arm_stats(runs, "off 0.85"), runs, "off 0.85")
    assert "KV pool off 0.92 +34.6%, on 0.85 +0.0%;" in sentence


def test_a_verdict_of_several_arms_reads_one_sentence_per_arm() -> None:
    """A 2x2's verdict was one sentence over every arm and concurrency (issue 24): each arm
    gets its own, naming it once, its lowest and highest concurrency inside."""
    base = [RunOfArm("off", t, view(f"a{t}", {1: 10, 8: 40}, graphs=False)) for t in range(3)]
    big = [RunOfArm("big", t, view(f"b{t}", {1: 11, 8: 44}, graphs=False)) for t in range(3)]
    on = [RunOfArm("on", t, view(f"c{t}", {1: 30, 8: 120})) for t in range(3)]
    runs = base + big + on
    sentence = verdict("2x2", arm_stats(runs, "off"), runs, "off")
    first, second, tail = sentence.split(". ")
    assert first.startswith("2x2: big vs off: ") and second.startswith("on vs off: ")
    for text in (first, second):
        assert text.count(" vs ") == 1  # the arm named once, not before each concurrency
        assert "output throughput at concurrency 1 (" in text
        assert "output throughput at concurrency 8 (" in text
    assert tail.startswith("KV pool ") and tail.endswith("confounders: none.")
