"""The engine as an arm: an experiment whose arms differ by engine (same model, workload and
prompts), run through the real pipeline on CPU: the real ``transformers serve`` with the
real SmolLM2-135M-Instruct against the fake vLLM 0.26 server (tests/fakes/vllm_pkg, the
fake only at the process boundary). Then the verdict, the flags that mean the same thing
side by side, each arm's engine configuration (no confounder), and a CSV + HTML export.
Plus the cheap parts: plan parsing and preflight of engine arms."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from core.analysis.card import experiment_story
from core.analysis.diff import confounders
from core.analysis.engines import arm_engines, engine_arm_fields, same_meaning_flags
from core.analysis.roles import knob_fields
from core.analysis.stats import first_per_arm
from core.analysis.trials import experiment_runs
from core.engines.base import EngineInfo
from core.engines.model_setup import ensure_default_model
from core.experiments.design import expand, list_experiments, parse_experiment
from core.interop.export import select, write_export
from core.launch.host import HostInfo
from core.launch.preflight import preflight
from core.settings import REPO_ROOT, Settings, load_settings

FAKE_VLLM = REPO_ROOT / "tests" / "fakes" / "vllm_pkg"


def _plan(model: str, trials: int = 2) -> dict[str, object]:
    return {
        "name": "transformers vs vLLM (fake) on CPU",
        "trials": trials,
        "baseline": "transformers",
        "arms": [
            {"label": "transformers", "changes": {"server.engine": "transformers"}},
            {
                "label": "vllm",
                "changes": {"server.engine": "vllm", "server.mem_fraction_static": 0.8},
            },
        ],
        "base": {
            "server": {"model": model, "startup_timeout_s": 300},
            "plan": {
                "points": [{"concurrency": 2, "num_prompts": 4, "input_len": 16, "output_len": 8}],
                "metrics_interval_s": 0.2,
            },
            "tags": ["engine-ab"],
        },
    }


def test_flags_that_mean_the_same_come_from_each_engines_declarations() -> None:
    rows = {r["field"]: r for r in same_meaning_flags(["sglang", "vllm"])}
    assert rows["mem_fraction_static"]["SGLang"] == "--mem-fraction-static"
    assert rows["mem_fraction_static"]["vLLM"] == "--gpu-memory-utilization"
    assert rows["tp_size"]["vLLM"] == "--tensor-parallel-size"
    assert rows["device"]["vLLM"] == "—"  # SGLang's only
    assert same_meaning_flags(["sglang", "no-such-engine"])[0].keys() == {
        "field",
        "acts on",
        "SGLang",
    }


def test_engine_is_the_knob_and_its_companions_are_configuration() -> None:
    fields = ["server.attention_backend", "server.engine", "server.extra_args", "plan.seed"]
    assert engine_arm_fields(fields) == (
        ["server.engine", "plan.seed"],
        ["server.attention_backend", "server.extra_args"],
    )
    assert engine_arm_fields(["server.cuda_graphs"]) == (["server.cuda_graphs"], [])


def test_plan_parsing_and_preflight_of_engine_arms(settings: Settings) -> None:
    exp = parse_experiment(_plan("/models/m"))
    specs = {label: spec for label, trial, spec in expand(exp, "x") if trial == 0}
    assert specs["vllm"].server.engine == "vllm"
    assert specs["vllm"].server.mem_fraction_static == 0.8
    assert specs["transformers"].server.mem_fraction_static is None
    host = HostInfo(
        gpus=(),
        engines={
            "transformers": EngineInfo("transformers", True, "5.24.0"),
            "vllm": EngineInfo("vllm", False, reason="vLLM is not installed for python3"),
        },
    )
    problems = preflight(exp, host, settings, local=False)
    assert [p.field for p in problems] == ["server.engine"]
    assert "vLLM is not installed" in problems[0].text


@pytest.mark.e2e
def test_an_engine_ab_through_the_real_pipeline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = ensure_default_model(load_settings().models_dir)
    data = tmp_path / "data"
    data.mkdir()
    (data / ".demo-installed").write_text("")  # an empty data folder: no demo runs
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(_plan(str(model))))
    env = {
        **os.environ,
        "SERVELAB_DATA_DIR": str(data),
        "SERVELAB_VLLM_PYTHON": sys.executable,
        "SERVELAB_MODEL_ROOTS": str(model.parent),
        "PYTHONPATH": os.pathsep.join([str(FAKE_VLLM), str(REPO_ROOT)]),
        "HF_HUB_OFFLINE": "1",
    }
    out = subprocess.run(
        [sys.executable, "-m", "core", "experiment", str(plan)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    settings = Settings(
        data_dir=data, sglang_python=sys.executable, transformers_python=sys.executable
    )
    (record,) = list_experiments(settings)
    runs = experiment_runs(settings, record)
    assert len(runs) == 4 and all(r.view.status.state == "succeeded" for r in runs)

    story = experiment_story(settings, record, runs)
    assert story.baseline == "transformers" and sorted(story.arms) == ["transformers", "vllm"]
    assert story.verdict, story.verdict
    # the engine's version and vLLM's own memory fraction are each arm's configuration
    assert not any("engine_version" in line for line in story.verdict), story.verdict
    assert not any(line.startswith("mem_fraction_static") for line in story.verdict)
    assert story.knob_checks == []
    views = [r.view for r in runs]
    assert knob_fields(views) == ["server.engine"]  # mem_fraction_static: vLLM's configuration
    assert confounders(views) == []
    first = first_per_arm(runs)
    by_arm = {e.arm: e for e in arm_engines({a: [v] for a, v in first.items()})}
    assert by_arm["vllm"].version == "0.26.0" and by_arm["vllm"].title == "vLLM"
    assert by_arm["vllm"].settings == {"mem_fraction_static": 0.8}
    assert by_arm["vllm"].defaults["prefix_caching"] == "on"
    assert story.ledger["vllm"].kv_cache_tokens and story.ledger["vllm"].graph_gb == 0.5

    sel = select(settings, [record.experiment_id])
    files, _ = write_export(sel, "csv", tmp_path / "out")
    assert any(f.name.endswith("summary_card.csv") for f in files)
    html, _ = write_export(sel, "html", tmp_path / "out")
    text = html[0].read_text()
    assert "vllm" in text and "transformers" in text
    print("\n".join(["VERDICT:", *story.verdict]))  # quoted in docs/BENCHMARKS.md (-s)

    # the Experiment page: each arm's engine configuration and the flags side by side
    monkeypatch.setenv("SERVELAB_DATA_DIR", str(data))
    monkeypatch.setenv("SERVELAB_WORKER", "off")
    st.cache_resource.clear()
    app = AppTest.from_file(str(REPO_ROOT / "app.py"), default_timeout=120)
    app.query_params["experiment"] = record.experiment_id
    app.run()
    app.switch_page("pages/experiment.py").run()
    assert not app.exception, app.exception
    assert "Engines: each arm's configuration" in [h.value for h in app.subheader]
    cells = " ".join(str(t.value.to_dict()) for t in app.table)
    assert "--gpu-memory-utilization" in cells and "mem_fraction_static=0.8" in cells
