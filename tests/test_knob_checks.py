"""Could the workload show the knob? Checked on the shipped H200 demos, from stored data."""

from __future__ import annotations

import sys

import pytest

from core.analysis.knob_checks import knob_checks, knob_lines
from core.analysis.runs import RunView
from core.analysis.trials import experiment_runs
from core.experiments.design import load_experiment
from core.settings import DEMO_DIR, Settings


def _arms(exp_id: str) -> dict[str, list[RunView]]:
    settings = Settings(
        data_dir=DEMO_DIR, sglang_python=sys.executable, transformers_python=sys.executable
    )
    record = load_experiment(settings, exp_id)
    if record is None:
        pytest.skip(f"demo {exp_id} not shipped")
    arms: dict[str, list[RunView]] = {}
    for r in experiment_runs(settings, record):
        if r.view.status.state == "succeeded":
            arms.setdefault(r.arm, []).append(r.view)
    return arms


def test_the_2x2_demo_never_tested_the_memory_fraction_and_ran_all_decode_in_graphs() -> None:
    checks = {c["knob"]: c for c in knob_checks(_arms("exp-20261201-041412-6b50"))}
    mem = checks["mem_fraction_static"]
    assert mem["exercised"] is False and mem["capacity"] == 5498295
    assert mem["why"].startswith("not tested by this workload")
    assert "peak 0.14 % of 5.50 M tokens" in mem["why"]
    graphs = checks["cuda_graphs"]
    assert graphs["exercised"] is True and graphs["used_peak"] == 1.0
    assert "100 % of decode passes" in graphs["why"]
    assert all("within noise" not in line for line in knob_lines(list(checks.values())))


def test_the_kv_pressure_demo_tested_the_memory_fraction() -> None:
    (mem,) = knob_checks(_arms("exp-20261201-204553-b919"))
    assert mem["knob"] == "mem_fraction_static" and mem["exercised"] is True
    assert mem["used_peak"] / mem["capacity"] > 0.99
    assert mem["why"].startswith("tested") and "queued" in mem["why"]
