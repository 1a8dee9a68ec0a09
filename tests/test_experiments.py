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
from core.experiments import Arm, ExperimentSpec, expand, list_experiments, parse_experiment
from core.settings import Settings

REPO = Path(__file__).resolve().parent.parent


def graphs_ab(trials: int = 3, seed: int = 7) -> ExperimentSpec:
    return ExperimentSpec(
        name="CUDA graphs", trials=trials, order_seed=seed,
        base=RunSpec.model_validate({"server": {"engine": "sglang", "model": "/m",
                                                "mem_fraction_static": 0.85}}),
        arms=(Arm(label="on", changes={"server.cuda_graphs": True}),
              Arm(label="off", changes={"server.cuda_graphs": False})))


def test_expansion_interleaves_arms_with_a_recorded_seed() -> None:
    runs = expand(graphs_ab(trials=6), "exp-x")
    assert len(runs) == 12
    trials = [runs[i:i + 2] for i in range(0, 12, 2)]
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


def test_bad_arms_are_refused_with_the_field() -> None:
    with pytest.raises(ConfigError) as info:
        expand(ExperimentSpec(name="x", arms=(Arm(label="a", changes={"gpu": 1}),)), "e")
    assert info.value.field == "arms.changes"
    with pytest.raises(ConfigError) as info:
        parse_experiment({"name": "x", "arms": [{"label": "a"}, {"label": "a"}]})
    assert "distinct" in info.value.message
    with pytest.raises(ConfigError):
        expand(ExperimentSpec(name="x", base=RunSpec(), arms=(
            Arm(label="a", changes={"server.mem_fraction_static": 0.9}),)), "e")


def test_aa_experiment_through_the_cli_reports_noise(fake_sglang: Path, settings: Settings,
                                                     tiny_tokenizer_dir: Path,
                                                     tmp_path: Path) -> None:
    plan = {"name": "A/A noise check", "kind": "aa", "trials": 3,
            "base": {"server": {"engine": "sglang", "model": str(tiny_tokenizer_dir)},
                     "plan": {"points": [{"concurrency": 1, "num_prompts": 2, "output_len": 4},
                                         {"concurrency": 2, "num_prompts": 2,
                                          "output_len": 4}]}},
            "arms": [{"label": "A1"}, {"label": "A2"}]}
    path = tmp_path / "aa.json"
    path.write_text(json.dumps(plan))
    env = {**os.environ, "SERVELAB_DATA_DIR": str(settings.data_dir),
           "SERVELAB_SGLANG_PYTHON": sys.executable}
    out = subprocess.run([sys.executable, "-m", "core", "experiment", str(path)], cwd=REPO,
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "runs: succeeded=6" in out.stdout
    assert "output throughput at concurrency 1 (95% CI" in out.stdout
    assert "within noise" in out.stdout and "confounders: none." in out.stdout
    (record,) = list_experiments(settings)
    assert [r["trial"] for r in record["runs"]] == [0, 0, 1, 1, 2, 2]
    assert record["spec"]["order_seed"] >= 0
    again = subprocess.run([sys.executable, "-m", "core", "experiment", "--show",
                            record["experiment_id"]], cwd=REPO, env=env, capture_output=True,
                           text=True, timeout=60)
    assert "A/A noise check:" in again.stdout
