"""An engine added from outside core/: the toy engine (tests/toy_engine.py, its server
tests/fakes/toy_server.py) and one registration (SERVELAB_ENGINES), run end to end: the
Launch page (AppTest) offering it and queueing an A/B experiment of it; each run by its own
``python -m core run --run-id`` process (the argv and environment the worker gives it); the
experiment's story with its verdict; a CSV and an HTML export. No file under core/ knows
the toy engine."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from core.analysis.card import experiment_story
from core.analysis.runs import load_run
from core.analysis.server_view import server_view
from core.analysis.timelines import run_timeline
from core.config import ServerConfig
from core.engines import engine_names, get_adapter
from core.engines.registry import get_engine
from core.errors import ConfigError
from core.executors.base import run_argv, run_env
from core.experiments.design import list_experiments
from core.interop.export import select, write_export
from core.run_folder import RunFolder
from core.settings import ENGINES_VAR, REPO_ROOT, Settings

REGISTRATION = "toy=tests.toy_engine"


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENGINES_VAR, REGISTRATION)


def test_an_unregistered_engine_is_an_error_naming_the_known_ones() -> None:
    with pytest.raises(ConfigError) as info:
        get_engine("toy")
    assert info.value.field == "server.engine"
    assert "transformers, sglang, endpoint" in info.value.message


def test_the_registration_adds_the_engine_with_its_declarations(toy: None) -> None:
    assert engine_names()[-1] == "toy"
    spec = get_engine("toy")
    assert spec.knob("continuous_batching") is not None
    # its declarations are the config's rules: a knob it does not declare is refused
    with pytest.raises(
        ValueError, match="mem_fraction_static applies to the sglang, vllm engines only"
    ):
        ServerConfig(engine="toy", mem_fraction_static=0.8)


def _queue_on_the_launch_page(
    data: Path, models: Path, model: Path, monkeypatch: pytest.MonkeyPatch
) -> list[str]:
    """The Launch page (Streamlit's AppTest) offers the toy engine and its A/B preset, and
    queues its experiment; the worker is off, so the runs are only queued."""
    monkeypatch.setenv("SERVELAB_DATA_DIR", str(data))
    monkeypatch.setenv("SERVELAB_MODEL_ROOTS", str(models))
    monkeypatch.setenv("SERVELAB_WORKER", "off")
    st.cache_resource.clear()
    app = AppTest.from_file(str(REPO_ROOT / "app.py"), default_timeout=120)
    app.run()
    app.switch_page("pages/launch.py").run()
    assert not app.exception, app.exception
    assert "toy" in app.selectbox(key="engine").options
    # (one run at the end: a form's values count when it is submitted)
    app.selectbox(key="engine").set_value("toy")
    # offered: the toy declares continuous_batching
    app.selectbox(key="preset").set_value("Continuous batching A/B")
    app.text_input(key="model").set_value(str(model))
    app.selectbox(key="device").set_value("cpu")
    app.text_input(key="concurrency").set_value("4")
    app.text_input(key="num_prompts").set_value("8")
    app.text_input(key="input_len").set_value("8")
    app.text_input(key="output_len").set_value("8")
    app.text_input(key="trials").set_value("2")
    app.checkbox(key="probe").uncheck()
    app.button(key="submit_launch").click().run()
    assert not app.exception, app.exception
    assert not app.error, [e.value for e in app.error]
    runs = sorted(p.name for p in (data / "runs").iterdir())
    assert len(runs) == 4
    return runs


def test_the_toy_engine_through_form_run_experiment_verdict_and_export(
    toy: None, tmp_path: Path, tiny_tokenizer_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / ".demo-installed").write_text("")  # an empty data folder: no demo runs
    run_ids = _queue_on_the_launch_page(
        data, tiny_tokenizer_dir.parent, tiny_tokenizer_dir, monkeypatch
    )
    settings = Settings(
        data_dir=data,
        sglang_python="/nonexistent/python",
        transformers_python="/nonexistent/python",
        model_roots=(tiny_tokenizer_dir.parent,),
    )
    experiments = list_experiments(settings)
    assert len(experiments) == 1
    record = experiments[0]
    assert sorted(r.run_id for r in record.runs) == run_ids

    env = {**os.environ, **run_env(settings)}
    assert env[ENGINES_VAR] == REGISTRATION  # what lets each run process find the engine
    for run_id in run_ids:
        out = subprocess.run(
            run_argv(run_id), cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=240
        )
        folder = RunFolder(settings.runs_dir / run_id)
        status = folder.read_status()
        assert status.state == "succeeded", (status.reason, out.stderr[-2000:])
        argv = folder.read("launch.json")["argv"]
        assert argv[1].endswith("toy_server.py")
        batching = folder.read("spec.json")["server"]["continuous_batching"]
        assert ("--batching" in argv) == batching

    # the server view reads the /metrics name the toy declares (server_metrics)
    view = load_run(RunFolder(settings.runs_dir / run_ids[0]))
    timeline = run_timeline(view)
    assert timeline.source == "metrics"
    assert "running_reqs" in set(timeline.frame["series"])
    assert server_view(view).running_peak is not None

    story = experiment_story(settings, record)
    assert sorted(story.arms) == ["batching off", "batching on"]
    assert story.verdict and any("batching" in line for line in story.verdict)

    sel = select(settings, [record.experiment_id])
    files, _ = write_export(sel, "csv", tmp_path / "out")
    assert any(f.name.endswith("summary_card.csv") for f in files)
    html, _ = write_export(sel, "html", tmp_path / "out")
    text = html[0].read_text()
    assert "batching on" in text and "toy" in text


def test_no_file_of_the_product_knows_the_toy_engine() -> None:
    """Its module, its server and the registration are all it took."""
    files = [*REPO_ROOT.glob("core/**/*.py"), *REPO_ROOT.glob("pages/*.py"), REPO_ROOT / "app.py"]
    assert [p.name for p in files if re.search(r"\btoy\b", p.read_text())] == []


def test_the_toy_adapter_is_built_by_the_registry_and_asks_for_logprobs(
    toy: None, settings: Settings
) -> None:
    adapter = get_adapter("toy", settings)
    path, body = adapter.logprobs_request("m", "hello", 3, 1)
    assert path == "/v1/completions" and body["logprobs"] == 1
