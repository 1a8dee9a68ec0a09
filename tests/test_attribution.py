"""Attribution against synthetic experiments whose effects are known: main effects,
an interaction, noise, trial drift, failed and missing runs, and agreement with the
one-knob A/B numbers of core/analysis/stats."""

from __future__ import annotations

import itertools
import math
import random
from typing import Any

import pytest

from core.analysis.attribution import (
    attribute,
    decompose,
    design_of,
    part_reading,
    verdict_sentence,
)
from core.analysis.runs import RunView
from core.analysis.stats import RunOfArm, arm_stats
from core.config import RunSpec
from core.experiments.design import KnobGrid, grid_experiment
from core.run_folder import RunStatus

GRAPHS, MEM = "server.cuda_graphs", "server.mem_fraction_static"
CONCS = (1, 64)


def _grid_spec(trials: int = 3, **grid: Any) -> dict[str, Any]:
    base = RunSpec.model_validate({"server": {"engine": "sglang", "model": "/m"}})
    knobs = grid.pop("knobs", {GRAPHS: [False, True], MEM: [0.85, 0.92]})
    exp = grid_experiment("explain", base, KnobGrid(knobs=knobs, **grid), trials, order_seed=1)
    return exp.model_dump(mode="json")


def _view(
    run_id: str, tput: dict[int, float], state: str = "succeeded", kv: float | None = None
) -> RunView:
    points = [
        {
            "index": i,
            "label": f"c={c}",
            "point": {"concurrency": c, "request_rate": "inf", "input_len": 32, "output_len": 32},
            "metrics": {"output_throughput": v, "median_ttft_ms": 100.0 / v * 50},
        }
        for i, (c, v) in enumerate(tput.items())
    ]
    return RunView(
        run_id,
        {},
        RunStatus(state=state, reason="boom" if state != "succeeded" else None),
        {"kv_cache_tokens": kv} if kv else {},
        None,
        {},
        points if state == "succeeded" else [],
    )


def _runs(
    spec: dict[str, Any],
    effect: Any,
    trials: int,
    noise: float = 0.0,
    drift: float = 0.0,
    seed: int = 0,
    skip: set[tuple[str, int]] = frozenset(),
    fail: set[tuple[str, int]] = frozenset(),
) -> list[RunOfArm]:
    """One run per arm and trial: value = 200 · exp(effect(levels, conc) + drift·trial + ε)."""
    rng = random.Random(seed)
    out = []
    for trial in range(trials):
        for arm in spec["arms"]:
            label = arm["label"]
            if (label, trial) in skip:
                continue
            tput = {
                c: 200 * math.exp(effect(arm["changes"], c) + drift * trial + rng.gauss(0, noise))
                for c in CONCS
            }
            state = "failed" if (label, trial) in fail else "succeeded"
            out.append(
                RunOfArm(
                    label,
                    trial,
                    _view(f"r-{label}-{trial}", tput, state, kv=1000 * (1 + arm["changes"][MEM])),
                )
            )
    return out


G, M, GM = math.log(1.09), math.log(0.79), math.log(0.99)


def _known(ch: dict[str, Any], conc: int) -> float:
    scale = 1.0 if conc == 64 else 0.5
    return scale * (G * ch[GRAPHS] + M * (ch[MEM] == 0.92) + GM * ch[GRAPHS] * (ch[MEM] == 0.92))


def _parts(attr: Any, conc: Any = 64, metric: str = "output_throughput") -> dict[str, Any]:
    return {
        p.kind if p.kind in ("total", "interaction") else p.name.split()[0]: p
        for p in decompose(attr, metric, conc)
    }


def test_noise_free_factorial_recovers_the_known_effects_and_parts_sum_to_total() -> None:
    spec = _grid_spec()
    design = design_of(spec)
    assert design is not None and design.factorial and design.changed == (GRAPHS, MEM)
    attr = attribute(_runs(spec, _known, 3, drift=0.05), design)
    parts = _parts(attr)
    assert parts["cuda_graphs"].log == pytest.approx(G, abs=1e-9)
    assert parts["mem_fraction_static"].log == pytest.approx(M, abs=1e-9)
    assert parts["interaction"].log == pytest.approx(GM, abs=1e-9)
    total = parts["total"].log
    assert total == pytest.approx(G + M + GM, abs=1e-9)  # trial drift is blocked out
    assert sum(p.log for k, p in parts.items() if k != "total") == pytest.approx(total)
    assert attr.measured[(64, "output_throughput")] == pytest.approx(total)
    # each concurrency point has its own effects
    assert _parts(attr, 1)["cuda_graphs"].log == pytest.approx(G / 2, abs=1e-9)
    # the run-level KV pool: only the memory fraction moves it
    kv = _parts(attr, None, "kv_cache_tokens")
    assert kv["mem_fraction_static"].rel == pytest.approx(1.92 / 1.85 - 1, abs=1e-9)
    assert abs(kv["cuda_graphs"].log) < 1e-9


def test_95_percent_intervals_cover_the_true_effects_about_95_percent_of_the_time() -> None:
    spec = _grid_spec(trials=3)
    design = design_of(spec)
    assert design is not None
    covered = {"cuda_graphs": 0, "mem_fraction_static": 0, "interaction": 0}
    truth = {"cuda_graphs": G, "mem_fraction_static": M, "interaction": GM}
    reps = 200
    for seed in range(reps):
        attr = attribute(
            _runs(spec, _known, 3, noise=0.03, drift=0.02, seed=seed),
            design,
            metrics=("output_throughput",),
        )
        for name, p in _parts(attr).items():
            if name in covered:
                assert p.log_low is not None and p.log_high is not None
                covered[name] += p.log_low < truth[name] < p.log_high
    for name, n in covered.items():
        assert 0.90 * reps <= n <= 0.99 * reps, (name, n)


def test_with_noise_the_sentence_names_each_part_and_adds_up() -> None:
    spec = _grid_spec(trials=5)
    attr = attribute(_runs(spec, _known, 5, noise=0.01, seed=3), design_of(spec))
    parts = _parts(attr)
    assert not parts["cuda_graphs"].covers_zero  # 9 % and 21 % stand far above 1 % noise
    assert not parts["mem_fraction_static"].covers_zero
    text = verdict_sentence(attr)
    assert text.startswith(
        f"Of the {parts['total'].rel * 100:+.1f}% output throughput at "
        "concurrency 64 (cuda_graphs on + mem_fraction_static 0.92 vs "
        "cuda_graphs off + mem_fraction_static 0.85; 95% CI"
    )
    # the small interaction's interval lies inside ±5 %: equivalent (core.analysis.words)
    assert "cuda_graphs off→on +" in text and "equivalent within ±5%" in text
    assert "within noise" not in text and "noise floor" not in text
    logs = text.split("add up: ")[1].split(" = ")
    assert sum(float(x) for x in logs[0].split()) == pytest.approx(float(logs[1]), abs=2e-3)


def test_a_failed_run_is_reported_and_the_fit_uses_the_rest() -> None:
    spec = _grid_spec(trials=3)
    after = spec["arms"][-1]["label"]
    attr = attribute(_runs(spec, _known, 3, fail={(after, 1)}), design_of(spec))
    assert [(f["arm"], f["trial"], f["state"]) for f in attr.failed] == [(after, 1, "failed")]
    assert any("failed: boom" in n and "left out" in n for n in attr.notes)
    parts = _parts(attr)
    assert parts["cuda_graphs"].log == pytest.approx(G, abs=1e-9)  # unbalanced, still exact
    assert parts["total"].log == pytest.approx(G + M + GM, abs=1e-9)
    assert parts["total"].log_low is not None  # 11 runs leave residual degrees of freedom


def test_an_arm_without_any_run_leaves_interactions_unestimable_and_says_so() -> None:
    spec = _grid_spec(trials=3)
    after = spec["arms"][-1]["label"]
    runs = _runs(
        spec,
        lambda ch, c: G * ch[GRAPHS] + M * (ch[MEM] == 0.92),
        3,
        skip={(after, t) for t in range(3)},
    )
    attr = attribute(runs, design_of(spec))
    parts = _parts(attr)
    assert "interaction" not in parts
    assert parts["cuda_graphs"].log == pytest.approx(G, abs=1e-9)
    assert any("no value from arm(s) " + after in n for n in attr.notes)
    assert any("interactions not estimable" in n for n in attr.notes)
    assert "additive model" in verdict_sentence(attr)


def test_one_trial_gives_effects_without_intervals() -> None:
    spec = _grid_spec(trials=1)
    attr = attribute(_runs(spec, _known, 1), design_of(spec))
    total = _parts(attr)["total"]
    assert total.log == pytest.approx(G + M + GM) and total.log_low is None
    assert "interval unknown" in verdict_sentence(attr)


def test_three_knob_factorial_splits_into_mains_pairs_and_the_rest() -> None:
    knobs = {GRAPHS: [False, True], MEM: [0.85, 0.92], "server.cuda_graph_max_bs": [8, 64]}
    spec = _grid_spec(trials=2, knobs=knobs)
    assert len(spec["arms"]) == 8

    def effect(ch: dict[str, Any], conc: int) -> float:
        big = ch["server.cuda_graph_max_bs"] == 64
        return _known(ch, conc) + 0.1 * big + 0.05 * big * ch[GRAPHS] * (ch[MEM] == 0.92)

    attr = attribute(_runs(spec, effect, 2), design_of(spec))
    parts = decompose(attr, "output_throughput", 64)
    kinds = [p.kind for p in parts]
    assert kinds.count("main") == 3 and kinds.count("interaction") == 3
    assert parts[-2].name == "higher-order interactions"
    assert parts[-2].log == pytest.approx(0.05, abs=1e-9)
    assert sum(p.log for p in parts[:-1]) == pytest.approx(parts[-1].log)
    assert parts[-1].log == pytest.approx(G + M + GM + 0.1 + 0.05, abs=1e-9)


def test_sweep_has_one_main_effect_per_value() -> None:
    spec = _grid_spec(trials=3, knobs={MEM: [0.80, 0.85, 0.88, 0.92]})
    design = design_of(spec)
    assert design is not None and design.after_arm == spec["arms"][-1]["label"]
    runs = _runs(spec, lambda ch, c: 2 * (ch[MEM] - 0.8), 3)
    attr = attribute(runs, design)
    mains = attr.effects[
        (attr.effects["metric"] == "output_throughput")
        & (attr.effects["concurrency"] == 64)
        & (attr.effects["kind"] == "main")
    ]
    assert list(mains["log_effect"].round(6)) == [0.1, 0.16, 0.24]


def test_one_knob_ab_reports_the_same_relative_difference_as_the_ab_verdict() -> None:
    """A plain A/B (arms "on"/"off", baseline the last) attributes all of its difference to
    its one knob, and that is the relative difference core.analysis.stats reports for the arm. The
    attribution's estimate is the ratio of geometric means (OLS on logs), the A/B's the ratio
    of arithmetic means: they agree exactly without spread and within about half the
    variance of the logs with it (0.05 % at 3 % noise)."""
    spec = {
        "name": "graphs",
        "trials": 4,
        "baseline": "off",
        "base": {"server": {}},
        "arms": [
            {"label": "on", "changes": {GRAPHS: True}},
            {"label": "off", "changes": {GRAPHS: False}},
        ],
    }
    rng = random.Random(5)
    runs = [
        RunOfArm(
            arm,
            t,
            _view(
                f"{arm}{t}",
                {c: (230 if arm == "on" else 200) * math.exp(rng.gauss(0, 0.03)) for c in CONCS},
            ),
        )
        for t in range(4)
        for arm in ("on", "off")
    ]
    design = design_of(spec)
    assert design is not None and design.after_arm == "on" and design.baseline_arm == "off"
    attr = attribute(runs, design)
    table = arm_stats(runs, "off")
    for conc in CONCS:
        (graphs, total) = decompose(attr, "output_throughput", conc)
        assert graphs.log == pytest.approx(total.log)
        row = table[
            (table["metric"] == "output_throughput")
            & (table["arm"] == "on")
            & (table["concurrency"] == conc)
        ].iloc[0]
        assert total.rel == pytest.approx(row["rel"], abs=2e-3)
    exact = [
        RunOfArm(arm, t, _view(f"{arm}{t}", {c: 230.0 if arm == "on" else 200.0 for c in CONCS}))
        for t in range(3)
        for arm in ("on", "off")
    ]
    (_, total) = decompose(attribute(exact, design), "output_throughput", 64)
    row = arm_stats(exact, "off").query("metric == 'output_throughput' and arm == 'on'").iloc[0]
    assert total.rel == pytest.approx(row["rel"], abs=1e-12) and row["rel"] == pytest.approx(0.15)


# --- figures ----------------------------------------------------------------------------------


def test_waterfall_bars_step_from_the_baseline_to_the_total() -> None:
    from core.views.figures_attribution import attribution_waterfall

    spec = _grid_spec(trials=3)
    attr = attribute(_runs(spec, _known, 3, noise=0.01, seed=1), design_of(spec))
    parts = decompose(attr, "output_throughput", 64)
    fig = attribution_waterfall(parts, "output_throughput", "at concurrency 64")
    bars = [t for t in fig.data if t.type == "bar"]
    assert len(bars) == len(parts)  # mains, interaction, total
    assert bars[0].base[0] == 0
    for prev, cur in itertools.pairwise(bars[:-1]):  # each part starts where the last ended
        assert cur.base[0] == pytest.approx(prev.base[0] + prev.y[0])
    last = bars[-2]
    assert last.base[0] + last.y[0] == pytest.approx(parts[-1].rel)
    assert bars[-1].y[0] == pytest.approx(parts[-1].rel)
    assert all(b.error_y.array is not None for b in bars)  # every part has its interval
    notes = " ".join(str(a.text) for a in fig.layout.annotations)
    assert "(the parts add up)" in notes and "noise floor" not in notes
    assert not fig.layout.shapes  # no A/A band: the host's noise is no threshold


def test_waterfall_labels_sit_beyond_their_whiskers_and_the_axis_title_fits() -> None:
    """A value label on its own error bar was struck through, and the one-line axis title
    was cut at both ends (issue 24 item 7)."""
    from core.views.figures_attribution import attribution_waterfall

    spec = _grid_spec(trials=3)
    attr = attribute(_runs(spec, _known, 3, noise=0.05, seed=2), design_of(spec))
    for metric in ("output_throughput", "median_ttft_ms"):
        parts = decompose(attr, metric, 64)
        fig = attribution_waterfall(parts, metric, "at concurrency 64")
        bars = [t for t in fig.data if t.type == "bar"]
        assert all(not b.text for b in bars)  # no text on the bar's end, under the whisker
        labels = {a.x: a for a in fig.layout.annotations if a.xref != "paper"}
        lo_axis, hi_axis = fig.layout.yaxis.range
        for bar, part in zip(bars, parts, strict=True):
            end = bar.base[0] + bar.y[0]
            top, bottom = end + bar.error_y.array[0], end - bar.error_y.arrayminus[0]
            label = labels[bar.x[0]]
            assert f"{part.rel * 100:+.1f}%" in label.text
            # a part that is no finding carries its word (core.analysis.words), never "noise"
            reading = part_reading(part, metric)
            assert part.kind == "total" or reading.coloured or f"({reading.text()})" in label.text
            assert "noise" not in label.text
            if part.log >= 0:  # above the whisker's top, growing upwards
                assert label.y >= top and label.yanchor == "bottom"
            else:
                assert label.y <= bottom and label.yanchor == "top"
            assert lo_axis < label.y < hi_axis  # drawn inside the plot, with room for it
        title = fig.layout.yaxis.title.text
        plot_px = fig.layout.height - fig.layout.margin.t - fig.layout.margin.b
        # each line of the rotated title (about 7 px a character) fits the plot's height
        assert all(len(line) * 7 <= plot_px for line in title.split("<br>"))
        assert fig.layout.margin.l >= 80  # two lines of title beside the tick labels


def test_sweep_figure_plots_each_value_with_its_band() -> None:
    from core.views.figures_attribution import sweep_figure

    spec = _grid_spec(trials=3, knobs={MEM: [0.80, 0.85, 0.88, 0.92]})
    runs = _runs(spec, lambda ch, c: 2 * (ch[MEM] - 0.8), 3, noise=0.01)
    design = design_of(spec)
    assert design is not None
    table = arm_stats(runs, design.baseline_arm)
    fig = sweep_figure(table, design, MEM, "output_throughput")
    lines = [t for t in fig.data if t.mode == "lines+markers"]
    assert [t.name for t in lines] == ["concurrency 1", "concurrency 64"]
    assert list(lines[1].x) == [0.80, 0.85, 0.88, 0.92]
    assert len([t for t in fig.data if t.fill == "toself"]) == 2


def test_memory_headroom_is_attributed_from_the_servers_free_memory() -> None:
    spec = _grid_spec(trials=2)
    runs = []
    for r in _runs(spec, _known, 2):
        mem = spec["arms"][[a["label"] for a in spec["arms"]].index(r.arm)]["changes"][MEM]
        facts = {"available_gpu_mem_gb": 140 * (1 - mem) - 2}  # what is left after the pool
        runs.append(
            RunOfArm(
                r.arm,
                r.trial,
                RunView(r.view.run_id, {}, r.view.status, facts, None, {}, r.view.points),
            )
        )
    parts = _parts(attribute(runs, design_of(spec)), None, "memory_headroom_gb")
    assert parts["mem_fraction_static"].rel == pytest.approx(
        (140 * 0.08 - 2) / (140 * 0.15 - 2) - 1
    )
    assert abs(parts["cuda_graphs"].log) < 1e-9 and abs(parts["interaction"].log) < 1e-9


def test_a_knob_the_workload_never_exercised_reads_not_tested_in_the_split() -> None:
    """The shipped H200 2×2: the memory fraction's part is "not tested by this workload"
    (the knob checks said so), the graphs' part keeps its verdict."""
    import sys

    from core.analysis.attribution import experiment_effects, format_attribution
    from core.experiments.design import load_experiment
    from core.settings import DEMO_DIR, Settings

    settings = Settings(
        data_dir=DEMO_DIR, sglang_python=sys.executable, transformers_python=sys.executable
    )
    record = load_experiment(settings, "exp-20261201-041412-6b50")
    if record is None:
        pytest.skip("the 2×2 demo is not shipped")
    plain = format_attribution(settings, record)[2]
    told = format_attribution(settings, record, untested=["mem_fraction_static"])[2]
    assert "mem_fraction_static 0.85→0.92 +9.1% (95% CI -26.1…+61.1%, inconclusive)" in plain
    assert (
        "mem_fraction_static 0.85→0.92 +9.1% (95% CI -26.1…+61.1%, not tested by this workload)"
        in told
    )
    assert "cuda_graphs off→on +226.7% (95% CI +219.6…+233.9%)," in told
    # an interaction with a knob the workload never exercised cannot have been tested either
    assert "interaction cuda_graphs off→on × mem_fraction_static 0.85→0.92 " in told
    assert "within noise" not in told.split("interaction ", 1)[1]
    # the export's effects table says the same
    found = experiment_effects(settings, record, untested=["mem_fraction_static"])
    assert found is not None
    sentences, effects = found
    assert "not tested by this workload" in sentences[0]
    mem = effects[effects["term"] == "mem_fraction_static 0.85→0.92"]
    assert "within noise" not in set(mem["label"]) and "not tested by this workload" in set(
        mem["label"]
    )
    both = effects[effects["term"].str.contains(" × ")]
    assert not both.empty and "within noise" not in set(both["label"])
