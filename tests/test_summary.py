"""The summary card on hand-made runs: changes with log-scale intervals, the four words of
core.analysis.words by each metric's direction, the declared family (Holm for the
confirmatory contrasts), regressions first and in words, single runs unconfirmed (the host's
noise shown, never a threshold), and the memory rows (a knob's intended cost never a regression)."""

from __future__ import annotations

from typing import Any

import pytest

from core.analysis.card import (
    UNCONFIRMED,
    Story,
    arm_table,
    card_frame,
    card_grid,
    caveats,
    comparison_story,
    experiment_story,
    noise_note,
    regression_lines,
    summary_card,
)
from core.analysis.noise import runs_fingerprint
from core.analysis.points import metric_deltas
from core.analysis.power import host_noise, noise_text
from core.analysis.runs import RunView, load_run
from core.analysis.stats import NOT_TESTED
from core.analysis.trials import experiment_runs
from core.experiments.design import load_experiment
from core.portal.demo import install_demo
from core.run_folder import RunFolder, RunStatus
from core.settings import DEMO_DIR, Settings
from tests.runs_by_hand import make_run, run_facts


def view(
    run_id: str, tput: dict[int, float], ttft_ms: float = 50.0, kv: int | None = None
) -> RunView:
    points = [
        {
            "index": i,
            "label": f"c={c}",
            "point": {"concurrency": c, "request_rate": "inf", "input_len": 32, "output_len": 32},
            "metrics": {
                "output_throughput": t,
                "median_ttft_ms": ttft_ms * c,
                "p99_ttft_ms": 2 * ttft_ms * c,
            },
        }
        for i, (c, t) in enumerate(sorted(tput.items()))
    ]
    facts: dict[str, Any] = {} if kv is None else {"kv_cache_tokens": kv}
    return RunView(
        run_id,
        {"server": {"engine": "sglang"}},
        RunStatus(state="succeeded"),
        facts,
        None,
        {},
        points,
    )


def test_card_judges_each_metric_by_its_direction_and_lists_regressions_first() -> None:
    on = [
        view(f"on{t}", {1: 30 + d, 64: 100 + d}, ttft_ms=70 + d, kv=400_000)
        for t, d in enumerate((0.0, 0.6, -0.5))
    ]
    off = [
        view(f"off{t}", {1: 10 + d, 64: 100 + e}, ttft_ms=50 + d, kv=500_000)
        for t, (d, e) in enumerate(((0.2, 0.3), (-0.3, -0.1), (0.4, 0.1)))
    ]
    rows = summary_card({"on": on, "off": off}, "off")  # runs pair by position (trial)
    by = {(r.metric, r.concurrency): r for r in rows}
    tput1 = by[("output_throughput", 1)]
    assert tput1.verdict == "better" and tput1.confirmed
    # paired by trial: the geometric mean of the per-trial ratios
    assert tput1.change == pytest.approx((30 / 10.2 * 30.6 / 9.7 * 29.5 / 10.4) ** (1 / 3) - 1)
    # a change whose whole interval lies inside ±5 %: equivalent, never "within noise"
    assert by[("output_throughput", 64)].verdict == "equivalent"
    assert by[("output_throughput", 64)].word_text() == "equivalent within ±5%"
    ttft = by[("median_ttft_ms", 64)]
    assert ttft.verdict == "worse" and ttft.low is not None and ttft.low > 0
    assert ttft.family == "confirmatory"  # a headline metric at the headline point
    assert by[("kv_cache_tokens", None)].verdict == "worse"  # a smaller KV pool
    assert by[("kv_cache_tokens", None)].family == "exploratory"
    # only confirmatory contrasts make Regressions: TTFT at c=64, not c=1, not the KV pool
    lines = regression_lines(rows)
    assert lines == [next(r.sentence() for r in rows if r is ttft)]
    assert lines[0].startswith("median TTFT at c=64: +")
    text, verdicts = card_grid(rows, "on")
    assert text.loc["Output throughput (tok/s)", "c=1"].endswith("▲")
    assert verdicts.loc["Median TTFT (ms)", "c=64"] == "worse"
    # cells that do not apply (a per-point metric at start-up) read "—", never "None"
    assert not text.isna().any().any() and "None" not in text.to_string()
    assert set(card_frame(rows)["verdict"]) <= {"better", "worse", "equivalent", "inconclusive"}


def test_no_interval_crosses_minus_100_percent() -> None:
    """A throughput collapse with noisy trials: the interval stays above -100%."""
    low = [view(f"a{t}", {8: v}) for t, v in enumerate((1.0, 40.0, 2.0))]
    base = [view(f"b{t}", {8: v}) for t, v in enumerate((100.0, 102.0, 98.0))]
    (row,) = [
        r for r in summary_card({"x": low, "base": base}, "base") if r.metric == "output_throughput"
    ]
    assert row.low is not None and row.high is not None
    assert -1.0 < row.low < row.change < row.high  # type: ignore[operator]


def test_one_run_each_is_unconfirmed_and_the_aa_floor_is_never_a_threshold() -> None:
    a, b = view("a", {4: 103.0}), view("b", {4: 150.0})
    rows = summary_card({"a": [a], "b": [b]}, "b")
    tput = next(r for r in rows if r.metric == "output_throughput")
    # -31 %, one run each: no interval, so unconfirmed however large; never in Regressions
    assert tput.low is None and tput.verdict == UNCONFIRMED and not tput.confirmed
    assert "no interval: 1 run(s) per arm" in tput.change_text()
    assert regression_lines(rows) == []
    text, verdicts = card_grid(rows, "a")
    assert verdicts.loc["Output throughput (tok/s)", "c=4"] == UNCONFIRMED
    assert text.loc["Output throughput (tok/s)", "c=4"].endswith("·")
    story = comparison_story([a, b], 1, ["a", "b"])
    assert story.baseline == "b" and story.noise == ""  # no noise known: no line at all
    assert story.verdict[-1].startswith("a vs b at c=4")


def test_the_noise_note_is_the_runs_machines_noise_never_a_floor(settings: Settings) -> None:
    """The host's noise (``power.host_noise`` of the runs' fingerprint) in the words of
    ``power.noise_text``; nothing where that machine has shown none."""
    install_demo(settings)
    record = load_experiment(settings, "exp-20261201-041412-6b50")  # the shipped 2x2
    assert record is not None
    views = [r.view for r in experiment_runs(settings, record)]
    server = record.spec["base"]["server"]
    found = host_noise(
        settings, runs_fingerprint(views), engine=server["engine"], model=server["model"]
    )
    assert found is not None
    note = noise_note(settings, views, server)
    assert note.startswith("This host's run-to-run noise ±") and noise_text(found)[1:] in note
    assert "floor" not in note and experiment_story(settings, record).noise == note
    # runs of a machine that has shown no noise, or no data folder: no line
    make_run(settings.runs_dir, "elsewhere", facts=run_facts(cpu_model="Another CPU"))
    assert noise_note(settings, [load_run(RunFolder(settings.runs_dir / "elsewhere"))]) == ""
    assert noise_note(None, views) == ""


def test_the_verdict_and_card_name_points_whose_numbers_are_suspect() -> None:
    """A saturated load generator in 2 of 3 runs of one arm, a point that never reached a
    steady state in the other: the story says so in words, in the card and the verdict."""

    def flag(v: RunView, lag_ms: float) -> RunView:
        v.points[1]["client"] = {
            "client_saturated": True,
            "loop_lag_ms_p99": lag_ms,
            "client_saturated_why": f"event-loop lag p99 {lag_ms} ms > 5 ms",
        }
        return v

    on = [
        flag(view("on0", {1: 30, 64: 100}), 6.2),
        view("on1", {1: 31, 64: 101}),
        flag(view("on2", {1: 29, 64: 99}), 7.1),
    ]
    off = [view(f"off{t}", {1: 10, 64: 100}) for t in range(3)]
    off[0].points[0]["warnings"] = ["all 1 slots were never busy at once: no steady-state window"]
    found = caveats({"on": on, "off": off})
    assert [c.sentence() for c in found] == [
        "c=1: not steady state (all 1 slots were never busy at once) in 1 of 3 runs of off "
        "— mostly ramp-up and drain, not the load the point names",
        "c=64: load generator saturated (worst: event-loop lag p99 7.1 ms > 5 ms) in 2 of 3 "
        "runs of on — the client, not the server, may have limited these numbers",
    ]
    # a comparison of plain runs: the verdict's last line names them
    story = comparison_story([on[0], off[0]], 1, ["graphs on", "graphs off"])
    assert story.caveats and story.verdict[-1] == (
        "Read with care: c=1: not steady state (all 1 slots were never busy at once) in the "
        "run of graphs off; c=64: load generator saturated (event-loop lag p99 6.2 ms > 5 ms) "
        "in the run of graphs on."
    )
    # nothing suspect: nothing said
    clean = comparison_story([on[1], off[1]], 1, ["a", "b"])
    assert clean.caveats == [] and not any("read with care" in v.lower() for v in clean.verdict)


def test_one_caveat_at_every_point_of_the_same_runs_is_named_once() -> None:
    """A demo's single-wave points are "not steady state" at each concurrency: the verdict
    names that once, with each point's own figures, not once per point."""
    on, off = view("on", {1: 30, 4: 60, 16: 90}), view("off", {1: 10, 4: 50, 16: 80})
    for v in (on, off):
        for p in v.points:
            c = p["point"]["concurrency"]
            p["warnings"] = [f"all {c} slots were never busy at once: no steady-state window"]
    story = comparison_story([on, off], 1, ["graphs on", "graphs off"])
    assert story.verdict[-1] == (
        "Read with care: not steady state at c=1 (worst: all 1 slots were never busy at "
        "once), c=4 (worst: all 4 slots were never busy at once) and c=16 (worst: all 16 "
        "slots were never busy at once) in the run of graphs on, the run of graphs off."
    )
    # where the runs differ, each point keeps its own sentence
    on.points[1]["warnings"] = []
    assert comparison_story([on, off], 1, ["graphs on", "graphs off"]).verdict[-1] == (
        "Read with care: not steady state at c=1 (worst: all 1 slots were never busy at "
        "once) and c=16 (worst: all 16 slots were never busy at once) in the run of graphs "
        "on, the run of graphs off; c=4: not steady state (all 4 slots were never busy at "
        "once) in the run of graphs off."
    )


def test_a_single_run_difference_is_unconfirmed_and_a_wide_interval_inconclusive() -> None:
    """One run per arm: whatever the change, "unconfirmed", on the card as in the
    single-run delta table and the Compare verdict. With trials, an interval that covers 0
    but not only ±5 % reads "inconclusive" with the trials that would resolve it."""
    for value in (100.3, 130.0):
        a, b = view("a", {4: value}), view("b", {4: 100.0})
        tput = next(
            r for r in summary_card({"a": [a], "b": [b]}, "b") if r.metric == "output_throughput"
        )
        assert tput.verdict == "unconfirmed" and not tput.confirmed
        deltas = metric_deltas([b, a], metrics=["output_throughput"], names=["b", "a"])
        assert list(deltas["verdict_a"]) == ["unconfirmed"]
        story = comparison_story([a, b], 1, ["a", "b"])
        assert "Output throughput (tok/s) +" in story.verdict[-1]
        assert "(unconfirmed)" in story.verdict[-1]
        words = " ".join(story.verdict)
        assert not any(w in words for w in ("better", "worse", "within noise", "Regressions"))
    trials_a = [view(f"a{t}", {4: v}) for t, v in enumerate((100.3, 99.0, 101.5))]
    trials_b = [view(f"b{t}", {4: v}) for t, v in enumerate((100.0, 101.0, 99.2))]
    rows = summary_card({"a": trials_a, "b": trials_b}, "b")
    noisy = next(r for r in rows if r.metric == "output_throughput")
    assert noisy.verdict == "inconclusive" and noisy.confirmed
    assert noisy.word_text().startswith("inconclusive; about ")
    assert noisy.word_text().endswith(" trials would resolve ±5% at this noise")
    assert noisy.reading.trials is not None and noisy.reading.trials > 3


# --- the knob checks in the verdict, on the shipped H200 demos (stored data, no re-run) ---


def _demo_story(exp_id: str) -> Story:
    import sys

    settings = Settings(
        data_dir=DEMO_DIR, sglang_python=sys.executable, transformers_python=sys.executable
    )
    record = load_experiment(settings, exp_id)
    if record is None:
        pytest.skip(f"demo {exp_id} not shipped")
    return experiment_story(settings, record)


def test_the_2x2_verdict_leads_with_the_knobs_and_never_calls_the_memory_fraction_noise() -> None:
    story = _demo_story("exp-20261201-041412-6b50")
    mem, graphs = story.verdict[0], story.verdict[1]
    assert mem.startswith("mem_fraction_static 0.85→0.92: output throughput at c=64 +9.1% (95% CI")
    assert "not tested by this workload: the KV cache was never the limit" in mem
    assert "peak 0.14% of 5.50 M tokens" in mem
    assert "+9.74 GB reserved → +454,083 KV tokens (+8.3%)" in mem
    assert "To test it: " in mem and "concurrency ≥ 42,956" in mem  # 5,498,295 / (64 + 64)
    assert graphs.startswith("cuda_graphs off→on: output throughput at c=64 +226.7%")
    assert "better" in graphs and "+0.40 GB graph memory" in graphs
    assert "100% of decode passes in CUDA graphs" in graphs
    # the contrast of the memory fraction alone: never "within noise", anywhere
    assert not any("within noise" in line for line in story.verdict[:2])
    # the memory both knobs are meant to consume is their cost: no Regressions paragraph
    assert not any(line.startswith("Regressions") for line in story.verdict)
    assert (
        "+9.1% output throughput at concurrency 64 (95% CI -26.1…+61.1%), not tested"
        in (story.verdict[2])
    )
    # the family is declared: each knob's own arm × the 3 headline metrics at c=64
    assert story.family is not None and "Holm over 6 comparisons" in story.family
    assert story.family in story.verdict
    alone = [r for r in story.card if r.arm == "graphs=off mem=0.92"]
    assert {r.verdict for r in alone if r.metric == "output_throughput"} == {NOT_TESTED}
    assert all(r.verdict != "within noise" for r in alone)
    # what the knob is meant to cost is its cost (KnobSpec.meant_cost), never worse / red
    assert {r.verdict for r in alone if r.metric == "peak_gpu_mib"} == {"cost"}
    assert {r.verdict for r in alone if r.metric == "kv_cache_tokens"} == {"better"}
    _, colours = card_grid(story.card, "graphs=off mem=0.92")
    assert set(colours.loc["Peak GPU memory (MiB)"]) - {""} == {"cost"}
    text, _ = card_grid(story.card, "graphs=off mem=0.92")
    assert text.loc["Output throughput (tok/s)", "c=64"].endswith("n/t")
    checks = {c["knob"]: c for c in story.knob_checks}
    assert checks["mem_fraction_static"]["exercised"] is False
    assert checks["cuda_graphs"]["exercised"] is True
    assert set(story.ledger) == set(story.arms)
    assert story.costs == (
        "mem_fraction_static 0.92: +9.74 GB reserved → +454,083 KV tokens (+8.3%); "
        "cuda_graphs on: +0.40 GB graph memory (decode 0.06, prefill 0.34)"
    )


def test_the_2x2_arm_table_on_page_cli_and_export_says_not_tested_for_the_memory_arm() -> None:
    """The per-arm table (Experiment page, `experiment --show`, CSV/Parquet export) labels the
    memory-fraction-only arm as the verdict does, not "within noise"."""
    import sys

    from core.analysis.trials import experiment_runs

    settings = Settings(
        data_dir=DEMO_DIR, sglang_python=sys.executable, transformers_python=sys.executable
    )
    record = load_experiment(settings, "exp-20261201-041412-6b50")
    if record is None:
        pytest.skip("demo not shipped")
    runs = experiment_runs(settings, record)
    story = experiment_story(settings, record, runs)
    assert story.untested_arms == ["graphs=off mem=0.92"]
    table = arm_table(runs, story)
    thr = table[table["metric"] == "output_throughput"]
    assert set(thr.loc[thr["arm"] == "graphs=off mem=0.92", "label"]) == {NOT_TESTED}
    assert set(thr.loc[thr["arm"] == "graphs=on mem=0.85", "label"]) == {"better"}
    assert "within noise" not in set(thr["label"])


def test_the_kv_pressure_ab_reads_inconclusive_with_the_trials_it_would_take() -> None:
    """The adaptive KV-pressure demo (-0.7 % [-9.0, +8.5]): neither better nor
    "within noise" but inconclusive against the plan's ±5 %, with the trials that would
    resolve it; the memory the knob reserves is its cost, never a regression."""
    story = _demo_story("exp-20261202-001049-5252")
    (mem,) = [line for line in story.verdict if line.startswith("mem_fraction_static")]
    assert "output throughput at c=640 -0.7% (95.9% CI -7.6…+6.8%), inconclusive; about " in mem
    assert " trials would resolve ±5% at this noise" in mem
    row = next(r for r in story.card if r.metric == "output_throughput")
    assert row.reading.trials is not None and row.reading.trials > 4
    assert not any(line.startswith("Regressions") for line in story.verdict)
    assert {r.verdict for r in story.card if r.metric == "peak_gpu_mib"} == {"cost"}
    assert story.family is not None and "Holm over 3 comparisons" in story.family


def test_single_runs_on_compare_name_no_family_and_claim_nothing() -> None:
    a, b = view("a", {4: 150.0}), view("b", {4: 100.0})
    story = comparison_story([a, b], 1, ["a", "b"])
    assert story.family is None and not any(r.verdict in ("better", "worse") for r in story.card)


def test_the_kv_pressure_verdict_says_the_memory_fraction_was_tested() -> None:
    story = _demo_story("exp-20261201-204553-b919")
    (mem,) = [line for line in story.verdict if line.startswith("mem_fraction_static")]
    assert "tested: the KV cache was a limit" in mem and "not tested" not in mem
    assert "+39,910 KV tokens (+8.3%)" in mem and "To test it" not in mem
    assert story.verdict[0] == mem


def test_the_seed_pair_on_compare_says_the_memory_fraction_was_not_tested() -> None:
    """Two plain runs of the 2×2 demo (graphs off + 0.85, graphs on + 0.92), no declared
    knob: the knobs under test come from the specs."""
    views = [
        load_run(RunFolder(DEMO_DIR / "runs" / r))
        for r in ("20261201-000311-8d8413", "20261201-000511-eb5799")
    ]
    story = comparison_story(views, 0, ["graphs off 0.85", "graphs on 0.92"])
    mem, graphs = story.verdict[0], story.verdict[1]
    assert mem.startswith("mem_fraction_static 0.85→0.92: the difference is cuda_graphs or noise")
    assert "not tested by this workload" in mem and "of 5.50 M tokens" in mem
    assert graphs.startswith("cuda_graphs off→on:") and "100% of decode passes" in graphs
    assert [c["exercised"] for c in story.knob_checks] == [False, True]
    assert story.as_json()["knob_checks"] == story.knob_checks


def test_arms_sent_different_workloads_at_a_point_is_the_loudest_caveat() -> None:
    """Same load shape, different workloads (a fixed and a shared-prefix workload): the
    comparison is not prompt for prompt, and the story says so first, by arm and digest."""
    on = [view(f"on{t}", {4: 100}) for t in range(2)]
    off = [view(f"off{t}", {4: 90}) for t in range(2)]
    for v in on:
        v.points[0].update(workload={"digest": "aaa"}, prompts_digest="p1")
    for v in off:
        v.points[0].update(workload={"digest": "bbb"}, prompts_digest="p2")
    found = caveats({"on": on, "off": off})
    assert [c.kind for c in found] == ["DIFFERENT PROMPTS"]
    line = found[0].sentence()
    assert line.startswith("c=4: DIFFERENT PROMPTS (on: workload aaa prompts p1; off: workload")
    assert "all 2 runs of on" in line and "not a prompt-for-prompt comparison" in line
    story = comparison_story([on[0], off[0]], 1, ["on", "off"])
    assert "DIFFERENT PROMPTS" in story.verdict[-1]
    # the same workload and prompts: nothing said
    for v in off:
        v.points[0].update(workload={"digest": "aaa"}, prompts_digest="p1")
    assert caveats({"on": on, "off": off}) == []
