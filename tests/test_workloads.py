"""Workloads: what `python -m core workload preview` says will be sent, checked against the
shipped traces themselves, and the errors a bad workload gets before anything is queued."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from core.config import Point, Workload
from core.errors import ConfigError
from core.load.workloads import BLOCK_TOKENS, build_workload, read_trace

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "data" / "models" / "SmolLM2-135M-Instruct"
CONTEXT = 8192  # SmolLM2's max_position_embeddings
needs_model = pytest.mark.skipif(not MODEL.is_dir(), reason="the bundled model is not converted")


def _preview(*args: str) -> list[dict[str, object]]:
    out = subprocess.run(
        [sys.executable, "-m", "core", "workload", "preview", *args, "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return [json.loads(line) for line in out.stdout.splitlines()]


@needs_model
@pytest.mark.parametrize("trace", ["mooncake-conversation.jsonl", "mooncake-synthetic.jsonl"])
def test_preview_matches_the_trace_lengths_and_shared_blocks(trace: str) -> None:
    """The first 500 requests: each prompt is exactly the trace's input_length tokens (clipped
    to the context minus the output, as asked), and shares with earlier requests exactly the
    512-token blocks of the leading hash ids they share (clipped to both lengths)."""
    path = ROOT / "data" / "workloads" / trace
    rows = _preview(str(path), "--limit", "500", "--over-context", "clip", "--model", str(MODEL))
    reqs = read_trace(path)[:500]
    assert len(rows) == 500
    lengths = [min(r.input_length, CONTEXT - r.output_length) for r in reqs]
    for i, (row, req) in enumerate(zip(rows, reqs, strict=True)):
        assert row["input_tokens"] == lengths[i]
        assert row["output_tokens"] == req.output_length
        expected = 0
        for j in range(i):
            k = 0
            ids_i, ids_j = req.hash_ids, reqs[j].hash_ids
            while k < min(len(ids_i), len(ids_j)) and ids_i[k] == ids_j[k]:
                k += 1
            expected = max(expected, min(BLOCK_TOKENS * k, lengths[i], lengths[j]))
        assert row["shared_prefix_tokens"] == expected, i
    assert any(r["shared_prefix_tokens"] for r in rows)  # the traces do reuse prefixes


def test_a_trace_line_of_another_shape_is_refused_with_its_line_number(tmp_path: Path) -> None:
    bad = tmp_path / "t.jsonl"
    good = '{"timestamp": 0, "input_length": 5, "output_length": 2, "hash_ids": [0]}'
    bad.write_text(good + "\n" + '{"timestamp": 1, "input_length": 5}\n')
    with pytest.raises(ConfigError) as err:
        read_trace(bad)
    assert err.value.field == "plan.points.workload.trace"
    assert "line 2" in err.value.message


@needs_model
def test_lengths_over_the_context_need_an_explicit_choice(tmp_path: Path) -> None:
    from core.load.prompts import load_tokenizer

    trace = tmp_path / "t.jsonl"
    trace.write_text(
        '{"timestamp": 0, "input_length": 9000, "output_length": 8, "hash_ids": [0]}\n'
        '{"timestamp": 5, "input_length": 40, "output_length": 8, "hash_ids": [0]}\n'
    )
    tok = load_tokenizer(str(MODEL))
    point = Point(workload=Workload(kind="trace", trace=str(trace)))
    with pytest.raises(ConfigError) as err:
        build_workload(tok, point, 2, seed=1, context_tokens=CONTEXT)
    assert err.value.field == "plan.points.workload.over_context"
    assert "'drop' or 'clip'" in err.value.message
    dropped = point.workload.model_copy(update={"over_context": "drop"})
    built = build_workload(tok, point.model_copy(update={"workload": dropped}), 2, 1, CONTEXT)
    assert [p.prompt_tokens for p in built.prompts] == [40]
    assert built.dropped == 1
    assert built.arrivals_s == [0.0]


def test_a_trace_workload_needs_its_file() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="needs trace"):
        Workload(kind="trace")


def test_old_points_without_a_workload_load_as_fixed_lengths() -> None:
    old = {"concurrency": 2, "num_prompts": 4, "input_len": 16, "output_len": 8}
    point = Point.model_validate(old)
    assert point.workload.kind == "fixed"
    assert point.label == "c=2 rate=inf in=16 out=8"
