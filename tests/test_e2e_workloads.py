"""The workloads end to end with the real engine: `transformers serve` with SmolLM2 on CPU runs
a trace point (sent by its timestamps, compressed), a shared-prefix point and a multi-turn
point through the real pipeline, and what each point sent (records.parquet) is what
`python -m core workload preview` said it would send, request by request."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from core.engines.model_setup import ensure_default_model
from core.run_folder import RunFolder
from core.settings import load_settings

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.e2e

# Four requests, 50 ms apart once scaled: requests 0, 1 and 3 open with block 1 (so they share
# its tokens), request 2 with its own block; each shorter than one 512-token block. A fifth is
# longer than SmolLM2's 8192-token context: the point drops it and says so.
TRACE = [
    {"timestamp": 0, "input_length": 40, "output_length": 6, "hash_ids": [1, 2]},
    {"timestamp": 500, "input_length": 60, "output_length": 6, "hash_ids": [1, 3]},
    {"timestamp": 1000, "input_length": 30, "output_length": 6, "hash_ids": [4]},
    {"timestamp": 1500, "input_length": 50, "output_length": 6, "hash_ids": [1, 2]},
]
TOO_LONG = {"timestamp": 1800, "input_length": 9000, "output_length": 6, "hash_ids": [5]}
TURN_OUT = 16  # more than the chat template adds per message pair, so the answer shows


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunFolder, Path, dict[str, str]]:
    """One run, one server: the three points one after another."""
    model_dir = ensure_default_model(load_settings().models_dir)
    tmp = tmp_path_factory.mktemp("workloads")
    data = tmp / "data"
    (data / "models").mkdir(parents=True)
    (data / "models" / model_dir.name).symlink_to(model_dir)
    trace = tmp / "trace.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in [*TRACE, TOO_LONG]))
    spec = {
        "server": {"engine": "transformers"},
        "plan": {
            "seed": 7,
            "warmup_requests": 1,
            "probe": None,
            "points": [
                {
                    "num_prompts": 5,
                    "workload": {
                        "kind": "trace",
                        "trace": str(trace),
                        "time_scale": 0.1,
                        "over_context": "drop",
                    },
                },
                {
                    "concurrency": 2,
                    "output_len": 6,
                    "workload": {
                        "kind": "shared_prefix",
                        "groups": 2,
                        "prompts_per_group": 2,
                        "system_prompt_len": 48,
                        "question_len": 8,
                    },
                },
                {
                    "concurrency": 2,
                    "output_len": TURN_OUT,
                    "workload": {
                        "kind": "multi_turn",
                        "sessions": 2,
                        "turns": 2,
                        "first_turn_len": 24,
                        "turn_len": 8,
                    },
                },
            ],
        },
    }
    spec_path = tmp / "spec.json"
    spec_path.write_text(json.dumps(spec))
    env = {**os.environ, "SERVELAB_DATA_DIR": str(data), "HF_HUB_OFFLINE": "1"}
    out = subprocess.run(
        [sys.executable, "-m", "core", "run", "--plan", str(spec_path)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    (folder,) = (RunFolder(p) for p in (data / "runs").iterdir())
    return folder, spec_path, env


def _preview(spec: Path, point: int, env: dict[str, str]) -> list[dict[str, Any]]:
    argv = ["workload", "preview", str(spec), "--point", str(point), "--json"]
    out = subprocess.run(
        [sys.executable, "-m", "core", *argv],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return [json.loads(line) for line in out.stdout.splitlines()]


def _records(folder: RunFolder, point: int) -> list[dict[str, Any]]:
    rows = pq.read_table(folder.path / f"points/{point:03d}/records.parquet").to_pylist()
    return sorted(rows, key=lambda r: r["index"])


def test_a_trace_point_sends_its_lengths_at_its_scaled_timestamps(
    run: tuple[RunFolder, Path, dict[str, str]],
) -> None:
    folder, spec, env = run
    preview, records = _preview(spec, 0, env), _records(folder, 0)
    assert [r["input_tokens"] for r in preview] == [t["input_length"] for t in TRACE]
    assert [r["prompt_tokens"] for r in records] == [p["input_tokens"] for p in preview]
    assert all(r["ok"] for r in records)
    assert [r["output_tokens_server"] for r in records] == [t["output_length"] for t in TRACE]
    # due at the trace's arrivals x time_scale, as the preview says; sent no earlier
    assert [r["scheduled_s"] for r in records] == pytest.approx([0.0, 0.05, 0.1, 0.15])
    assert [r["scheduled_s"] for r in records] == pytest.approx([p["arrival_s"] for p in preview])
    assert all(r["dispatch_s"] >= r["scheduled_s"] - 1e-6 for r in records)
    assert [p["shared_prefix_tokens"] for p in preview] == [0, 40, 0, 50]
    summary = folder.read("points/000/summary.json")
    assert summary["workload"]["trace_arrivals"] is True
    assert summary["workload"]["dropped_over_context"] == 1
    assert summary["label"].endswith("(1 dropped over the 8192-token context)")
    assert summary["point"]["concurrency"] is None  # open loop: no cap was set
    assert "scheduled_sends" in summary["client"] and summary["client"]["scheduled_sends"] == 4


def test_a_shared_prefix_point_sends_what_the_preview_says(
    run: tuple[RunFolder, Path, dict[str, str]],
) -> None:
    folder, spec, env = run
    preview, records = _preview(spec, 1, env), _records(folder, 1)
    assert len(records) == 4 and all(r["ok"] for r in records)
    assert [r["prompt_tokens"] for r in records] == [p["input_tokens"] for p in preview]
    assert {p["input_tokens"] for p in preview} == {48 + 8}
    # each group's second request shares its 48-token system prompt with the first
    assert sorted(p["shared_prefix_tokens"] >= 48 for p in preview) == [False, False, True, True]
    # and the server saw prompts of one length (same template around each)
    assert len({r["prompt_tokens_server"] for r in records}) == 1


def test_a_multi_turn_point_carries_the_real_answers_into_the_next_turn(
    run: tuple[RunFolder, Path, dict[str, str]],
) -> None:
    folder, spec, env = run
    preview, records = _preview(spec, 2, env), _records(folder, 2)
    assert len(records) == 4 and all(r["ok"] for r in records)
    assert [(r["session"], r["turn"]) for r in records] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert [(p["session"], p["turn"]) for p in preview] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    # turn 0 exactly; turn 1 = both user turns + the answer, generated at its asked length
    assert [p["input_tokens"] for p in preview] == [24, 24 + TURN_OUT + 8] * 2
    assert [r["prompt_tokens"] for r in records] == [p["input_tokens"] for p in preview]
    for first, second in (records[0:2], records[2:4]):
        assert first["output_tokens_server"] == TURN_OUT
        # the server's own count grew by the answer and the new user turn (and the
        # template's few tokens per message): the real answer was sent back to it
        grew = second["prompt_tokens_server"] - first["prompt_tokens_server"]
        assert grew >= TURN_OUT + 8
        assert first["end_s"] <= second["dispatch_s"]  # the turns of a session in order
    summary = folder.read("points/002/summary.json")
    assert summary["workload"]["sessions"] == 2
