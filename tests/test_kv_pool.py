"""An experiment with kv_fill: every arm sized from the smallest arm's KV pool. Queued, each
arm's pool comes from an earlier run of its server configuration or a pool run queued first;
run, every arm's point has the same load, sized from the smallest pool, and says whose."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from core.config import RunSpec
from core.experiments.design import Arm, ExperimentSpec, load_experiment
from core.launch.queue import queue_launch
from core.run_folder import RunFolder
from core.settings import Settings

REPO = Path(__file__).resolve().parent.parent


def _experiment(model: Path) -> ExperimentSpec:
    base = RunSpec.model_validate(
        {
            "server": {"engine": "sglang", "model": str(model)},
            "plan": {
                "points": [
                    {
                        "concurrency": 1,
                        "num_prompts": 2,
                        "input_len": 16,
                        "output_len": 12,
                        "kv_fill": 0.0005,
                    }
                ],
                "probe": None,
            },
        }
    )
    return ExperimentSpec(
        name="kv",
        base=base,
        trials=1,
        arms=(
            Arm(label="mfs=0.85", changes={"server.mem_fraction_static": 0.85}),
            Arm(label="mfs=0.7", changes={"server.mem_fraction_static": 0.7}),
        ),
    )


def _run(settings: Settings, run_id: str) -> None:
    env = {
        **os.environ,
        "SERVELAB_DATA_DIR": str(settings.data_dir),
        "SERVELAB_SGLANG_PYTHON": sys.executable,
    }
    out = subprocess.run(
        [sys.executable, "-m", "core", "run", "--run-id", run_id],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_pool_runs_go_first_and_every_arm_is_sized_from_the_smallest_pool(
    fake_sglang: Path, settings: Settings, tiny_tokenizer_dir: Path
) -> None:
    queued = queue_launch(settings, _experiment(tiny_tokenizer_dir))
    assert queued.experiment_id is not None
    record = load_experiment(settings, queued.experiment_id)
    assert record is not None
    arm_runs = {r.arm: r.run_id for r in record.runs}
    pool = record.spec["base"]["plan"]["kv_pool"]
    assert pool["arms"] == ["mfs=0.85", "mfs=0.7"]
    pool_runs = dict(zip(pool["arms"], pool["runs"], strict=True))
    assert not set(pool_runs.values()) & set(arm_runs.values())  # queued apart, first
    assert sorted(p.name for p in settings.runs_dir.iterdir())[:2] == sorted(pool_runs.values())
    for arm, rid in pool_runs.items():  # a pool run starts the arm's own server once
        spec = RunFolder(settings.runs_dir / rid).read("spec.json")
        assert spec["server"]["mem_fraction_static"] == float(arm.split("=")[1])
        assert f"kvpool-for:{queued.experiment_id}" in spec["tags"]
    for rid in arm_runs.values():  # every arm names the same pools
        assert RunFolder(settings.runs_dir / rid).read("spec.json")["plan"]["kv_pool"] == pool
    for rid in [*pool_runs.values(), *arm_runs.values()]:  # the queue's order
        _run(settings, rid)
    sized = {
        arm: RunFolder(settings.runs_dir / rid).read("points/000/summary.json")["kv_fill"]
        for arm, rid in arm_runs.items()
    }
    # the fake's pool is int(mfs x 400,000): the 0.7 arm's is the smaller
    for arm in sized.values():
        assert arm["pool_tokens"] == 280_000 and arm["pool_arm"] == "mfs=0.7"
        assert arm["pool_run_id"] == pool_runs["mfs=0.7"]
    assert sized["mfs=0.85"]["computed"] == sized["mfs=0.7"]["computed"]
    assert sized["mfs=0.85"]["own_pool_tokens"] == 340_000
    assert sized["mfs=0.85"]["fill_of_own_pool"] < sized["mfs=0.7"]["fill_of_own_pool"]

    # The next experiment of the same configurations reuses those pools: nothing extra queued.
    before = {p.name for p in settings.runs_dir.iterdir()}
    again = queue_launch(settings, _experiment(tiny_tokenizer_dir))
    added = {p.name for p in settings.runs_dir.iterdir()} - before
    assert added == set(again.run_ids)

    # Pools measured on other GPUs (an imported run, the shipped H200 demo on this host) are
    # no pools of this machine: the same configurations get pool runs of their own again.
    for folder in settings.runs_dir.iterdir():
        facts_path = folder / "facts.json"
        if facts_path.is_file():
            facts = json.loads(facts_path.read_text())
            facts_path.write_text(json.dumps({**facts, "gpus": [{"name": "NVIDIA H200"}]}))
    before = {p.name for p in settings.runs_dir.iterdir()}
    third = queue_launch(settings, _experiment(tiny_tokenizer_dir))
    added = {p.name for p in settings.runs_dir.iterdir()} - before
    assert len(added - set(third.run_ids)) == 2  # a pool run per arm, queued first
