"""An engine added from outside core/: the toy engine (tests/toy_engine.py, its server
tests/fakes/toy_server.py) and one registration (SERVELAB_ENGINES), run end to end: the
Launch form's check and an A/B experiment from it, queued; each run by its own
``python -m core run --run-id`` process (the argv and environment the worker gives it); the
experiment's story with its verdict; a CSV and an HTML export. No file under core/ knows
the toy engine."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from core.analysis.card import experiment_story
from core.analysis.runs import load_run
from core.analysis.server_view import server_view
from core.analysis.timelines import run_timeline
from core.config import ServerConfig
from core.engines import engine_names, get_adapter
from core.engines.registry import get_engine
from core.errors import ConfigError
from core.executors.base import run_argv, run_env
from core.experiments.design import load_experiment
from core.interop.export import select, write_export
from core.launch.forms import FORM_DEFAULTS, experiment_from_form
from core.launch.host import host_for
from core.launch.queue import queue_launch
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
    with pytest.raises(ValueError, match="mem_fraction_static applies to the sglang engine"):
        ServerConfig(engine="toy", mem_fraction_static=0.8)


def test_the_toy_engine_through_form_run_experiment_verdict_and_export(
    toy: None, tmp_path: Path, tiny_tokenizer_dir: Path
) -> None:
    settings = Settings(
        data_dir=tmp_path / "data",
        sglang_python="/nonexistent/python",
        transformers_python="/nonexistent/python",
        model_roots=(tiny_tokenizer_dir.parent,),
    )
    host = host_for(settings, "local", ["toy"])
    assert host.engines["toy"].installed and "--batching" in host.engines["toy"].options
    form = {
        **FORM_DEFAULTS,
        "preset": "Continuous batching A/B",  # offered: the toy declares the knob
        "engine": "toy",
        "model": str(tiny_tokenizer_dir),
        "device": "cpu",
        "concurrency": "4",
        "num_prompts": 8,
        "input_len": 8,
        "output_len": 8,
        "probe": False,
        "trials": 2,
    }
    exp, errors = experiment_from_form(form, host, settings=settings)
    assert errors == {} and exp is not None
    queued = queue_launch(settings, exp, executor="local", host=host)
    assert len(queued.run_ids) == 4 and queued.experiment_id

    env = {**os.environ, **run_env(settings)}
    assert env[ENGINES_VAR] == REGISTRATION  # what lets each run process find the engine
    for run_id in queued.run_ids:
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
    view = load_run(RunFolder(settings.runs_dir / queued.run_ids[0]))
    timeline = run_timeline(view)
    assert timeline.source == "metrics"
    assert "running_reqs" in set(timeline.frame["series"])
    assert server_view(view).running_peak is not None

    record = load_experiment(settings, queued.experiment_id)
    assert record is not None
    story = experiment_story(settings, record)
    assert sorted(story.arms) == ["batching off", "batching on"]
    assert story.verdict and any("batching" in line for line in story.verdict)

    sel = select(settings, [queued.experiment_id])
    files, _ = write_export(sel, "csv", tmp_path / "out")
    assert any(f.name.endswith("summary_card.csv") for f in files)
    html, _ = write_export(sel, "html", tmp_path / "out")
    text = html[0].read_text()
    assert "batching on" in text and "toy" in text


def test_the_toy_adapter_is_built_by_the_registry_and_asks_for_logprobs(
    toy: None, settings: Settings
) -> None:
    adapter = get_adapter("toy", settings)
    path, body = adapter.logprobs_request("m", "hello", 3, 1)
    assert path == "/v1/completions" and body["logprobs"] == 1
