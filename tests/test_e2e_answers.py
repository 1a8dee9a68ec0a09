"""The answers check with the real thing: `transformers serve` and the real
SmolLM2-135M-Instruct on CPU, bench/plans/answers_cpu.json's arms in one trial of three (float32
twice: an A/A; bfloat16: numerics changed). transformers serve returns no logprobs, so its
greedy text is compared. Three CPU runs of 32 questions each: minutes, not the default 600 s
on a busy host."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from core.engines.model_setup import ensure_default_model
from core.settings import load_settings

REPO = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]


def test_float32_twice_reads_same_and_bfloat16_differs_not_broken(tmp_path: Path) -> None:
    model_dir = ensure_default_model(load_settings().models_dir)
    data = tmp_path / "data"
    (data / "models").mkdir(parents=True)
    (data / "models" / model_dir.name).symlink_to(model_dir)
    env = {**os.environ, "SERVELAB_DATA_DIR": str(data), "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "core", "experiment"]
    spec = json.loads((REPO / "bench" / "plans" / "answers_cpu.json").read_text())
    spec["trials"] = 1  # float32 twice as two arms: the A/A in one trial
    spec["arms"].insert(1, {"label": "float32 again"})
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(spec))
    out = subprocess.run(
        [*cmd, str(plan)], cwd=REPO, env=env, capture_output=True, text=True, timeout=1500
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    exp_id = out.stdout.split()[1]
    show = subprocess.run(
        [*cmd, "--show", exp_id, "--json"], cwd=REPO, env=env, capture_output=True, text=True
    )
    answers = json.loads(show.stdout)["answers"]
    aa, arm = answers["float32 again"], answers["bfloat16"]
    assert aa["outcome"] == "same", aa["sentence"]
    assert arm["outcome"] == "differs", arm["sentence"]
    assert "no logprobs to compare (greedy text only)" in arm["sentence"]
    # the known-answer count, against the baseline's (a 135M model knows its capitals)
    assert aa["asked"] == arm["asked"] == 32
    assert aa["correct"] == aa["base_correct"] >= 8 and arm["correct"] > aa["correct"] // 2
    assert f"{arm['correct']}/32 correct" in arm["sentence"]
