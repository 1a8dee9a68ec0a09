"""The real thing: `transformers serve` with the real SmolLM2-135M-Instruct on CPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from core.engines.model_setup import CONVERSION_STEPS, MARKER_NAME, ensure_default_model
from core.engines.transformers_serve import NOTE_CB_CPU_BOUNDED
from core.run_folder import RunFolder
from core.settings import load_settings
from core.store import Catalog

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def model_dir() -> Path:
    # The converted model is reused from data/models (the README's set-up makes it).
    return ensure_default_model(load_settings().models_dir)


def test_default_run_answers_paris_and_lands_in_the_catalog(
    model_dir: Path, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    (data / "models").mkdir(parents=True)
    (data / "models" / model_dir.name).symlink_to(model_dir)
    env = {**os.environ, "SERVELAB_DATA_DIR": str(data), "HF_HUB_OFFLINE": "1"}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "core",
            "run",
            "--engine",
            "transformers",
            "--concurrency",
            "1,2",
            "--num-prompts",
            "2",
            "--output-len",
            "8",
            "--input-len",
            "16",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    runs = sorted((data / "runs").iterdir())
    folder = RunFolder(runs[-1])
    probe = folder.read("probe.json")
    assert probe["passed"] and "paris" in probe["answer"].lower()
    for summary in folder.point_summaries():
        m = summary["metrics"]
        assert m["completed"] == m["num_requests"] == 2
        # exact output lengths even though transformers serve rejects ignore_eos
        assert m["total_output_tokens_server"] == 2 * 8
        assert m["median_ttft_ms"] > 0 and m["output_throughput"] > 0
    launch = folder.read("launch.json")
    assert "CUDA graphs do not apply on CPU" in launch["notes"]
    # the default continuous-batching cache is bounded on CPU (not ~14 GB from host memory)
    assert NOTE_CB_CPU_BOUNDED in launch["notes"]
    assert "--cb-max-memory-percent" in launch["argv"]
    row = Catalog(data / "servelab.duckdb", data / "runs").get_run(folder.run_id)
    assert row is not None and row["state"] == "succeeded" and row["engine"] == "transformers"


def test_a_conversion_reports_each_step_as_it_starts(tmp_path: Path) -> None:
    """What ./servelab prints during the first start's minute: every step, in order."""
    said: list[str] = []
    target = ensure_default_model(tmp_path, progress=said.append)
    steps = CONVERSION_STEPS
    assert [line.split("] ", 1)[1].split(" (")[0] for line in said] == list(steps)
    assert said[0].startswith(f"[1/{len(steps)}]") and "s so far)" in said[-1]
    assert (target / MARKER_NAME).is_file()
    said.clear()
    ensure_default_model(tmp_path, progress=said.append)
    assert said == []  # converted once: a later start says nothing
