"""core/launch/queue.py: the one way a launch is queued (runs, or an experiment's runs
recorded in its experiment.json), and where the runs are placed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.config import BenchmarkPlan, Placement, Point, RunSpec, ServerConfig, Workload
from core.errors import ConfigError
from core.executors.queue import run_ids
from core.experiments.design import ExperimentSpec, experiment_from_preset, load_experiment
from core.launch.queue import Queued, queue_experiment, queue_launch
from core.run_folder import RunFolder
from core.settings import Settings


def spec(executor: str | None = None) -> RunSpec:
    return RunSpec(
        server=ServerConfig(engine="sglang", model="/models/m"),
        placement=Placement(executor=executor),
    )


def placed(settings: Settings, rid: str) -> str | None:
    return RunFolder(settings.runs_dir / rid).spec().placement.executor


def ab(base: RunSpec, trials: int = 2) -> ExperimentSpec:
    return experiment_from_preset(
        "graphs A/B", base, [("on", {"cuda_graphs": True}), ("off", {"cuda_graphs": False})], trials
    )


def test_runs_are_queued_in_order_and_placed_where_asked(settings: Settings) -> None:
    queued = queue_launch(settings, [spec(), spec("ray")])
    assert isinstance(queued, Queued) and queued.experiment_id is None
    assert list(queued.run_ids) == run_ids(settings) == sorted(queued.run_ids)
    # No executor given: each spec keeps its own placement.
    assert [placed(settings, r) for r in queued.run_ids] == [None, "ray"]
    again = queue_launch(settings, [spec(), spec("ray")], executor="local")
    assert [placed(settings, r) for r in again.run_ids] == ["local", "local"]
    assert queue_launch(settings, []) == Queued(())


def test_an_experiment_is_queued_with_its_record(settings: Settings) -> None:
    queued = queue_launch(settings, ab(spec()), executor="ray")
    assert queued.experiment_id is not None and len(queued.run_ids) == 4
    record = load_experiment(settings, queued.experiment_id)
    assert record is not None
    # The record names every queued run, in queue order, with its arm and trial.
    assert [r.run_id for r in record.runs] == list(queued.run_ids) == run_ids(settings)
    assert sorted((r.arm, r.trial) for r in record.runs) == [
        ("off", 0),
        ("off", 1),
        ("on", 0),
        ("on", 1),
    ]
    assert record.spec["base"]["placement"]["executor"] == "ray"
    for r in record.runs:
        folder = RunFolder(settings.runs_dir / r.run_id)
        assert folder.read_status().state == "queued"
        run = folder.spec()
        assert run.placement.executor == "ray"
        assert run.server.cuda_graphs is (r.arm == "on")
        assert f"exp:{queued.experiment_id}" in run.tags


def test_queue_experiment_returns_the_id_and_keeps_the_placement(settings: Settings) -> None:
    exp_id = queue_experiment(settings, ab(spec("ray"), trials=1))
    record = load_experiment(settings, exp_id)
    assert record is not None and len(record.runs) == 2
    assert {placed(settings, r.run_id) for r in record.runs} == {"ray"}


def test_a_point_over_its_models_context_is_refused_when_queued(
    settings: Settings, tmp_path: Path
) -> None:
    """The context check at queue time (runs and experiments alike): over_context "error"
    names the point's field and the fix; "drop" or "clip" is a choice, and is queued."""
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"max_position_embeddings": 64}))
    long = RunSpec(
        server=ServerConfig(engine="sglang", model=str(model)),
        plan=BenchmarkPlan(points=(Point(input_len=8), Point(input_len=60, output_len=8))),
    )
    for launch in ([long], ab(long)):
        with pytest.raises(ConfigError) as err:
            queue_launch(settings, launch)
        assert err.value.field == "plan.points.1.workload.over_context"
        assert "plan.points[1].workload.over_context is 'error'" in err.value.message
        assert "60 + 8 tokens exceed the model's context of 64" in err.value.message
        assert "'drop' or 'clip'" in err.value.message
    assert run_ids(settings) == []  # nothing was queued
    clip = Workload(over_context="clip")
    chosen = long.model_copy(
        update={"plan": BenchmarkPlan(points=(Point(input_len=60, output_len=8, workload=clip),))}
    )
    assert len(queue_launch(settings, [chosen]).run_ids) == 1


def test_an_unreadable_trace_is_refused_when_queued(settings: Settings, tmp_path: Path) -> None:
    bad = tmp_path / "t.jsonl"
    bad.write_text('{"timestamp": 0}\n')
    s = RunSpec(
        server=ServerConfig(engine="sglang", model="/models/m"),
        plan=BenchmarkPlan(points=(Point(workload=Workload(kind="trace", trace=str(bad))),)),
    )
    with pytest.raises(ConfigError) as err:
        queue_launch(settings, [s])
    assert err.value.field == "plan.points.0.workload.trace"
    assert "t.jsonl line 1: no 'input_length'" in err.value.message
