"""The command line's checks: every bad flag reported in one pass, before anything is stored."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from core import cli

REPO = Path(__file__).resolve().parent.parent


def test_unknown_flag_negative_number_and_bad_model_path_in_one_pass(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "SERVELAB_DATA_DIR": str(tmp_path / "data"),
        "SERVELAB_MODEL_ROOTS": str(tmp_path / "models"),
    }
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "core",
            "run",
            "--engine",
            "transformers",
            "--extra-arg=--foo",
            "--num-prompts",
            "-3",
            "--concurrency",
            "1",
            "--model",
            "/etc/servelab-model",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if "transformers is not installed" in out.stderr:
        pytest.skip("transformers is not installed here")
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 3, out.stderr
    assert any(
        line.startswith(
            "error: server.model (--model): '/etc/servelab-model' is "
            "outside the allowed model folders"
        )
        for line in lines
    )
    assert any(
        line.startswith(
            "error: server.extra_args (--extra-arg): --foo is not an option of transformers"
        )
        for line in lines
    )
    assert (
        "error: plan.points.0.num_prompts (--num-prompts): give a number of at least 1 "
        "(you gave -3)" in lines
    )
    assert not (tmp_path / "data" / "runs").exists() or not any(
        (tmp_path / "data" / "runs").iterdir()
    )


@pytest.mark.parametrize(
    ("field", "flag"),
    [
        ("server.extra_args", "--extra-arg"),
        ("plan.points.3.num_prompts", "--num-prompts"),
        ("server.cb_max_memory_percent", "--cb-max-memory-percent"),
        ("tags", "--tag"),
        ("--plan", "--plan"),
    ],
)
def test_each_field_is_named_with_the_flag_that_sets_it(field: str, flag: str) -> None:
    assert cli._flag_of(field) == flag


def test_exact_length_can_be_switched_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERVELAB_DATA_DIR", str(tmp_path / "data"))
    args = cli._parser().parse_args(["run", "--engine", "transformers", "--no-exact-length"])
    assert cli.spec_from_args(args).plan.ignore_eos is False
    args = cli._parser().parse_args(["run", "--engine", "transformers"])
    assert cli.spec_from_args(args).plan.ignore_eos is True


def _demo_copy(tmp_path: Path) -> dict[str, str]:
    """A copy of the shipped demo as the data folder (the catalog the CLI builds stays there)."""
    import shutil

    from core.settings import DEMO_DIR

    if not (DEMO_DIR / "experiments" / "exp-20261201-041412-6b50").is_dir():
        pytest.skip("the H200 2×2 demo is not shipped")
    shutil.copytree(DEMO_DIR, tmp_path / "data")
    return {**os.environ, "SERVELAB_DATA_DIR": str(tmp_path / "data")}


def _core_json(env: dict[str, str], *args: str) -> Any:
    out = subprocess.run(
        [sys.executable, "-m", "core", *args, "--json"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_experiment_show_json_carries_the_knob_checks_and_the_ledger(tmp_path: Path) -> None:
    env = _demo_copy(tmp_path)
    story = _core_json(env, "experiment", "--show", "exp-20261201-041412-6b50")
    assert {"baseline", "arms", "verdict", "card", "knob_checks", "ledger"} <= set(story)
    checks = {c["knob"]: c for c in story["knob_checks"]}
    assert set(checks) == {"mem_fraction_static", "cuda_graphs"}
    for c in checks.values():
        assert {"knob", "resource", "used_peak", "capacity", "exercised", "why"} <= set(c)
    mem = checks["mem_fraction_static"]
    assert mem["exercised"] is False and mem["capacity"] == 5498295
    assert mem["why"].startswith("not tested by this workload")
    assert checks["cuda_graphs"]["exercised"] is True and checks["cuda_graphs"]["used_peak"] == 1
    assert story["verdict"][0].startswith("mem_fraction_static 0.85→0.92:")
    row = next(
        r
        for r in story["card"]
        if r["arm"] == "graphs=on mem=0.85"
        and r["metric"] == "output_throughput"
        and r["concurrency"] == 64
    )
    assert row["low"] < row["change"] < row["high"] and row["verdict"] == "better"
    assert story["ledger"]["graphs=on mem=0.92"]["kv_cache_tokens"] == 5952378
    assert story["ledger"]["graphs=on mem=0.92"]["graph_gb"] == 0.4


def test_show_json_carries_the_runs_own_checks_server_view_and_ledger(tmp_path: Path) -> None:
    env = _demo_copy(tmp_path)
    run = _core_json(env, "show", "20261201-041412-a1cfea")  # graphs on, mem 0.92
    checks = {c["knob"]: c for c in run["knob_checks"]}
    assert checks["mem_fraction_static"]["exercised"] is False
    assert checks["mem_fraction_static"]["capacity"] == 5952378
    assert checks["cuda_graphs"]["used_peak"] == 1.0
    assert run["server_view"]["source"] == "metrics"
    assert run["server_view"]["kv_used_peak_tokens"] == checks["mem_fraction_static"]["used_peak"]
    assert run["ledger"]["weights_gb"] == run["facts"]["weight_mem_gb"]
    hf = _core_json(env, "show", "20261130-045815-c6a73d")  # transformers serve
    assert hf["knob_checks"] == [] and hf["server_view"] is None
    assert "reports no server-side view" in hf["server_view_note"]


def test_a_point_longer_than_the_models_context_is_refused_before_it_runs(
    tmp_path: Path,
) -> None:
    """SmolLM2 holds 8192 tokens: 9000 in + 8 out with over_context "error" (the default)
    is refused by `run` before any folder is made, naming the field and the fix."""
    from core.engines.model_setup import DEFAULT_MODEL_FOLDER
    from core.settings import load_settings

    model_dir = load_settings().models_dir / DEFAULT_MODEL_FOLDER
    if not (model_dir / "config.json").is_file():
        pytest.skip("the bundled model is not converted")
    data = tmp_path / "data"
    (data / "models").mkdir(parents=True)
    (data / "models" / DEFAULT_MODEL_FOLDER).symlink_to(model_dir)
    env = {**os.environ, "SERVELAB_DATA_DIR": str(data), "HF_HUB_OFFLINE": "1"}
    argv = ["run", "--engine", "transformers", "--input-len", "9000", "--output-len", "8"]
    out = subprocess.run(
        [sys.executable, "-m", "core", *argv],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if "transformers is not installed" in out.stderr:
        pytest.skip("transformers is not installed here")
    assert out.returncode == 2, out.stderr
    assert "error: plan.points.0.workload.over_context" in out.stderr
    assert "plan.points[0].workload.over_context is 'error'" in out.stderr
    assert "9000 + 8 tokens exceed the model's context of 8192" in out.stderr
    assert "set over_context to 'drop' or 'clip'" in out.stderr
    assert not (data / "runs").exists() or not any((data / "runs").iterdir())


def test_workload_and_kv_fill_flags_are_the_forms_fields(tmp_path: Path) -> None:
    """--workload/--kv-fill go into every point as the Launch form's fields do; kv_fill on
    transformers (no KV pool) is refused before anything is queued, naming the flag."""
    flags = "run --engine sglang --workload uniform --range-ratio 0.5 --kv-fill 1.2"
    parsed = cli._parser().parse_args(
        [*flags.split(), "--kv-fill-by", "lengths", "--concurrency", "1,4"]
    )
    spec = cli.spec_from_args(parsed)
    assert [p.concurrency for p in spec.plan.points] == [1, 4]
    for p in spec.plan.points:
        assert p.workload.kind == "uniform" and p.workload.range_ratio == 0.5
        assert p.kv_fill == 1.2 and p.kv_fill_by == "lengths"
    env = {**os.environ, "SERVELAB_DATA_DIR": str(tmp_path / "data")}
    out = subprocess.run(
        [sys.executable, "-m", "core", "run", "--engine", "transformers", "--kv-fill", "1.2"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 2, out.stderr
    assert "(--kv-fill): kv_fill sizes the load from the server's KV pool" in out.stderr
    assert not (tmp_path / "data" / "runs").exists() or not any(
        (tmp_path / "data" / "runs").iterdir()
    )
