"""Experiments: fair by construction (interleaved, seeded, same prompts, fresh servers),
run end to end through the CLI against the fake SGLang."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from core.config import RunSpec
from core.errors import ConfigError
from core.experiments.design import (
    Arm,
    ExperimentSpec,
    KnobGrid,
    arm_of_tags,
    baseline_arm,
    expand,
    grid_arms,
    list_experiments,
    parse_experiment,
    run_arm,
)
from core.run_folder import RunFolder
from core.settings import Settings

REPO = Path(__file__).resolve().parent.parent


def graphs_ab(trials: int = 3, seed: int = 7) -> ExperimentSpec:
    return ExperimentSpec(
        name="CUDA graphs",
        trials=trials,
        order_seed=seed,
        base=RunSpec.model_validate(
            {"server": {"engine": "sglang", "model": "/m", "mem_fraction_static": 0.85}}
        ),
        arms=(
            Arm(label="on", changes={"server.cuda_graphs": True}),
            Arm(label="off", changes={"server.cuda_graphs": False}),
        ),
    )


def test_expansion_interleaves_arms_with_a_recorded_seed() -> None:
    runs = expand(graphs_ab(trials=6), "exp-x")
    assert len(runs) == 12
    trials = [runs[i : i + 2] for i in range(0, 12, 2)]
    # every trial has each arm exactly once, so arms alternate in time
    assert all({a for a, _, _ in t} == {"on", "off"} for t in trials)
    orders = {tuple(a for a, _, _ in t) for t in trials}
    assert len(orders) == 2  # shuffled per trial, not always A then B
    assert [a for a, _, _ in expand(graphs_ab(trials=6), "exp-x")] == [a for a, _, _ in runs]
    for _, _, spec in runs:
        assert spec.intended_diff == ("server.cuda_graphs",)
        assert spec.server.mem_fraction_static == 0.85
    plans = {spec.plan.model_dump_json() for _, _, spec in runs}
    assert len(plans) == 1  # the same seeded prompts for every arm


@pytest.mark.parametrize(
    "label", ["install=sglang-0.5.14", "graphs=on mem=0.92", "fp8-e4m3 + chunk/512", "a b-c"]
)
def test_an_arm_label_is_stored_as_given(label: str) -> None:
    """The run's tag names its arm's label exactly: a - stays a -, a space a space, and a +
    or / is no refused tag (the old tag wrote spaces as - and read every - back as a space)."""
    exp = graphs_ab(trials=1).model_copy(
        update={
            "arms": (Arm(label=label, changes={"server.cuda_graphs": True}), graphs_ab().arms[1])
        }
    )
    runs = expand(exp, "exp-x")
    (spec,) = [spec for arm, _, spec in runs if arm == label]
    assert arm_of_tags(spec.tags) == label
    assert arm_of_tags(RunSpec.model_validate_json(spec.model_dump_json()).tags) == label


def test_an_older_runs_arm_tag_still_reads_as_its_label() -> None:
    """Runs stored before: ``arm:<label>`` with spaces written as -. Read against the
    experiment's labels (the shipped demo's record) each is its label as given."""
    demo = Path(__file__).resolve().parent.parent / "data" / "demo" / "runs"
    old = ["exp:exp-20261202-033636-ec50", "arm:install=sglang-0.5.14"]
    assert run_arm(old, demo) == "install=sglang-0.5.14"
    assert run_arm(["exp:exp-20261130-045815-42d8", "arm:graphs-off"], demo) == "graphs off"
    assert arm_of_tags(["arm:graphs-off"]) == "graphs off"  # no record at hand: as before
    assert arm_of_tags(["arm:a-b"], labels=["a-b", "x y"]) == "a-b"


def test_bad_arms_are_refused_with_the_field() -> None:
    with pytest.raises(ConfigError) as info:
        expand(ExperimentSpec(name="x", arms=(Arm(label="a", changes={"gpu": 1}),)), "e")
    assert info.value.field == "arms.changes"
    with pytest.raises(ConfigError) as info:
        parse_experiment({"name": "x", "arms": [{"label": "a"}, {"label": "a"}]})
    assert "distinct" in info.value.message
    with pytest.raises(ConfigError):
        expand(
            ExperimentSpec(
                name="x",
                base=RunSpec(),
                arms=(Arm(label="a", changes={"server.mem_fraction_static": 0.9}),),
            ),
            "e",
        )


def test_aa_experiment_through_the_cli_reports_noise(
    fake_sglang: Path, settings: Settings, tiny_tokenizer_dir: Path, tmp_path: Path
) -> None:
    plan = {
        "name": "A/A noise check",
        "kind": "aa",
        "trials": 3,
        "base": {
            "server": {"engine": "sglang", "model": str(tiny_tokenizer_dir)},
            "plan": {
                "points": [
                    {"concurrency": 1, "num_prompts": 2, "output_len": 4},
                    {"concurrency": 2, "num_prompts": 2, "output_len": 4},
                ]
            },
        },
        "arms": [{"label": "A1"}, {"label": "A2"}],
    }
    path = tmp_path / "aa.json"
    path.write_text(json.dumps(plan))
    env = {
        **os.environ,
        "SERVELAB_DATA_DIR": str(settings.data_dir),
        "SERVELAB_SGLANG_PYTHON": sys.executable,
    }
    out = subprocess.run(
        [sys.executable, "-m", "core", "experiment", str(path)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "runs: succeeded=6" in out.stdout
    assert "output throughput at concurrency 1 (95% CI" in out.stdout
    assert "confounders: none." in out.stdout and "within noise" not in out.stdout
    assert "equivalent within ±5%" in out.stdout or "inconclusive" in out.stdout
    (record,) = list_experiments(settings)
    assert [r.trial for r in record.runs] == [0, 0, 1, 1, 2, 2]
    # The order seed it stored is the order its runs ran in: the same spec, read back,
    # shuffles the arms of every trial the same way (what a re-run of the design relies on).
    again_spec = ExperimentSpec.model_validate(record.spec)
    assert again_spec.order_seed == record.spec["order_seed"]
    assert [(r.arm, r.trial) for r in record.runs] == [
        (arm, trial) for arm, trial, _ in expand(again_spec, record.experiment_id)
    ]
    started = [RunFolder(settings.runs_dir / r.run_id).status()["started_at"] for r in record.runs]
    assert started == sorted(started)
    again = subprocess.run(
        [sys.executable, "-m", "core", "experiment", "--show", record.experiment_id],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "A/A noise check:" in again.stdout
    assert f"order seed {record.spec['order_seed']})" in again.stdout


def _grid_plan(**grid: object) -> dict[str, object]:
    return {
        "name": "grid",
        "trials": 3,
        "order_seed": 11,
        "base": {"server": {"engine": "sglang", "model": "/m"}},
        "grid": {
            "knobs": {
                "server.cuda_graphs": [False, True],
                "server.mem_fraction_static": [0.85, 0.92],
            },
            **grid,
        },
    }


def test_a_two_by_two_grid_is_a_full_factorial_run_like_any_experiment() -> None:
    exp = parse_experiment(_grid_plan())
    cells = {
        (a.changes["server.cuda_graphs"], a.changes["server.mem_fraction_static"]) for a in exp.arms
    }
    assert cells == {(False, 0.85), (False, 0.92), (True, 0.85), (True, 0.92)}
    base = next(a for a in exp.arms if a.label == exp.baseline_arm)
    assert base.changes == {"server.cuda_graphs": False, "server.mem_fraction_static": 0.85}
    runs = expand(exp, "exp-g")
    assert len(runs) == 12
    trials = [runs[i : i + 4] for i in range(0, 12, 4)]
    assert all(len({a for a, _, _ in t}) == 4 for t in trials)  # each arm once per trial
    assert len({tuple(a for a, _, _ in t) for t in trials}) > 1  # shuffled per trial
    assert {spec.plan.model_dump_json() for _, _, spec in runs} == {
        runs[0][2].plan.model_dump_json()
    }  # same prompts
    assert all(
        s.intended_diff == ("server.cuda_graphs", "server.mem_fraction_static") for _, _, s in runs
    )
    assert parse_experiment(exp.model_dump(mode="json")) == exp  # experiment.json round trip


def test_a_large_grid_becomes_one_at_a_time_from_the_baseline() -> None:
    knobs = {
        "server.cuda_graphs": [False, True],
        "server.mem_fraction_static": [0.80, 0.85, 0.88, 0.92],
        "server.cuda_graph_max_bs": [8, 32, 128],
        "server.attention_backend": ["fa3", "fi"],
    }
    exp = parse_experiment({**_grid_plan(), "grid": {"knobs": knobs}})
    assert exp.grid is not None and exp.grid.resolved_design == "one-at-a-time"
    base = {k: v[0] for k, v in knobs.items()}
    # baseline, one arm per other value, and the explained after-config (all last values)
    assert len(exp.arms) == 1 + 1 + 3 + 2 + 1 + 1
    for arm in exp.arms[1:-1]:
        assert sum(arm.changes[k] != base[k] for k in knobs) == 1
    assert exp.arms[-1].changes == {k: v[-1] for k, v in knobs.items()}
    with pytest.raises(ConfigError) as info:
        parse_experiment({**_grid_plan(), "grid": {"knobs": knobs, "design": "factorial"}})
    assert info.value.field == "grid.design" and "48 arms" in info.value.message


def test_a_sweep_is_a_one_knob_grid() -> None:
    exp = parse_experiment(
        {**_grid_plan(), "grid": {"knobs": {"server.cuda_graph_max_bs": [8, 32, 128, 256]}}}
    )
    assert [a.changes["server.cuda_graph_max_bs"] for a in exp.arms] == [8, 32, 128, 256]
    assert exp.baseline_arm == exp.arms[0].label


@pytest.mark.parametrize(
    ("grid", "field", "words"),
    [
        (
            {"knobs": {"server.mem_fraction_static": [0.85, 1.5]}},
            "grid.knobs.server.mem_fraction_static[1]",
            "below 1",
        ),
        ({"knobs": {"server.cuda_graphs": [True]}}, "grid.knobs", "2 to 8 values"),
        ({"knobs": {"server.cuda_graphs": [True, True]}}, "grid.knobs", "distinct"),
        ({"knobs": {"gpu": [1, 2]}}, "grid.knobs", "not a knob"),
        ({"knobs": {"plan.points": [[], []]}}, "grid.knobs", "not a knob"),
        (
            {
                "knobs": {
                    f"server.{k}": [1, 2]
                    for k in ("cuda_graph_max_bs", "tp_size", "startup_timeout_s", "port", "dtype")
                }
            },
            "grid.knobs",
            "at most 4",
        ),
        (
            {"knobs": {"server.cuda_graphs": [False, True]}, "after": {"server.cuda_graphs": 3}},
            "grid",
            "not one of its grid values",
        ),
        (
            {"knobs": {"server.cuda_graphs": [False, True]}, "design": "random"},
            "grid.design",
            "use one of",
        ),
    ],
)
def test_bad_grids_are_refused_naming_the_field(
    grid: dict[str, object], field: str, words: str
) -> None:
    with pytest.raises(ConfigError) as info:
        parse_experiment({**_grid_plan(), "grid": grid})
    assert info.value.field == field
    assert words in info.value.message


def test_the_equivalence_margin_is_a_plan_field_defaulting_to_five_percent() -> None:
    plan = {"name": "x", "arms": [{"label": "a"}, {"label": "b"}]}
    assert parse_experiment(plan).equivalence_margin_pct == 5.0
    assert parse_experiment({**plan, "equivalence_margin_pct": 2}).equivalence_margin_pct == 2
    assert (
        parse_experiment({**_grid_plan(), "equivalence_margin_pct": 3}).equivalence_margin_pct == 3
    )
    for bad in (0, -1, 100, 250):
        with pytest.raises(ConfigError) as info:
            parse_experiment({**plan, "equivalence_margin_pct": bad})
        assert info.value.field == "equivalence_margin_pct"
        assert "equivalence_margin_pct: 5" in info.value.message


def test_grid_arms_are_labelled_with_the_names_a_team_says() -> None:
    arms, baseline = grid_arms(
        KnobGrid.model_validate(
            {
                "knobs": {
                    "server.cuda_graphs": [False, True],
                    "server.mem_fraction_static": [0.85, 0.92],
                }
            }
        )
    )
    assert [a.label for a in arms] == [
        "graphs=off mem=0.85",
        "graphs=off mem=0.92",
        "graphs=on mem=0.85",
        "graphs=on mem=0.92",
    ]
    assert baseline == "graphs=off mem=0.85"
    # a knob with no short name keeps its field name; past 40 characters, initials
    arms, _ = grid_arms(
        KnobGrid.model_validate(
            {
                "knobs": {
                    "server.dtype": ["float32", "bfloat16"],
                    "server.continuous_batching": [True, False],
                }
            }
        )
    )
    assert arms[1].label == "dtype=float32 batching=off"
    arms, _ = grid_arms(
        KnobGrid.model_validate(
            {
                "knobs": {
                    "server.attention_backend": ["triton", "flashinfer"],
                    "server.cuda_graph_max_bs": [8, 160],
                    "server.dtype": ["float16", "bfloat16"],
                }
            }
        )
    )
    assert arms[-1].label == "ab=flashinfer cgmb=160 d=bfloat16"


def test_baseline_is_the_declared_arm_else_the_control() -> None:
    arms = [
        {"label": "graphs on", "changes": {"server.cuda_graphs": True}},
        {"label": "graphs off", "changes": {"server.cuda_graphs": False}},
    ]
    assert baseline_arm({"arms": arms}) == "graphs off"
    assert baseline_arm({"arms": arms, "baseline": "graphs on"}) == "graphs on"
    sizes = [
        {"label": "big", "changes": {"server.mem_fraction_static": 0.9}},
        {"label": "small", "changes": {"server.mem_fraction_static": 0.7}},
    ]
    assert baseline_arm({"arms": sizes}) == "small"  # the lower value
    # an arm that leaves the knob alone runs the base's value (here: default, None)
    batching = [
        {"label": "batching on", "changes": {"server.continuous_batching": True}},
        {"label": "default", "changes": {}},
    ]
    assert baseline_arm({"arms": batching, "base": {"server": {}}}) == "default"


def test_the_model_and_experiment_json_name_the_same_baseline_arm() -> None:
    """ExperimentSpec.baseline_arm is baseline_arm over its JSON: no declared baseline
    means the control (graphs off), wherever it sits among the arms (not the last arm)."""
    for order in ((True, False), (False, True)):
        exp = parse_experiment(
            {
                "name": "graphs",
                "arms": [
                    {
                        "label": f"graphs {'on' if v else 'off'}",
                        "changes": {"server.cuda_graphs": v},
                    }
                    for v in order
                ],
            }
        )
        assert exp.baseline_arm == "graphs off"
        assert exp.baseline_arm == baseline_arm(exp.model_dump(mode="json"))
