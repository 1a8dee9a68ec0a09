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
    """The first 150 requests: each prompt is exactly the trace's input_length tokens (clipped
    to the context minus the output, as asked), and shares with earlier requests exactly the
    512-token blocks of the leading hash ids they share (clipped to both lengths)."""
    path = ROOT / "data" / "workloads" / trace
    rows = _preview(str(path), "--limit", "150", "--over-context", "clip", "--model", str(MODEL))
    reqs = read_trace(path)[:150]
    assert len(rows) == 150
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


GOOD_LINE = '{"timestamp": 0, "input_length": 5, "output_length": 2, "hash_ids": [0]}'


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ('{"timestamp": 1, "input_length": 5, "hash_ids": [0]}', "no 'output_length'"),
        ("{}", "no 'timestamp', 'input_length', 'output_length', 'hash_ids'"),
        (
            '{"timestamp": 1, "input_length": "5", "output_length": 2, "hash_ids": [0]}',
            "'input_length' must be a whole number of tokens >= 1, not '5'",
        ),
        (
            '{"timestamp": 1, "input_length": 5, "output_length": 0, "hash_ids": [0]}',
            "'output_length' must be a whole number of tokens >= 1, not 0",
        ),
        (
            '{"timestamp": "soon", "input_length": 5, "output_length": 2, "hash_ids": [0]}',
            "'timestamp' must be milliseconds >= 0",
        ),
        (
            '{"timestamp": 1, "input_length": 5, "output_length": 2, "hash_ids": "12"}',
            "'hash_ids' must be a list of whole numbers",
        ),
        ("[1, 2, 3]", "a JSON list, not an object"),
        ("timestamp,input_length,output_length", "is not JSON"),
    ],
)
def test_a_bad_trace_line_is_named_with_its_line_number_and_field(
    tmp_path: Path, line: str, says: str
) -> None:
    bad = tmp_path / "t.jsonl"
    bad.write_text(GOOD_LINE + "\n\n" + line + "\n")
    with pytest.raises(ConfigError) as err:
        read_trace(bad)
    assert err.value.field == "plan.points.workload.trace"
    assert "t.jsonl line 3" in err.value.message and says in err.value.message
    assert '"hash_ids": [ids]' in err.value.message  # the shape it should have


def test_an_empty_or_missing_trace_is_refused(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    with pytest.raises(ConfigError, match="holds no request"):
        read_trace(empty)
    with pytest.raises(ConfigError, match="no trace file"):
        read_trace(tmp_path / "absent.jsonl")


def test_a_trace_sent_by_its_timestamps_is_open_loop_unless_capped(tmp_path: Path) -> None:
    trace = str(tmp_path / "t.jsonl")
    point = Point.model_validate({"workload": {"kind": "trace", "trace": trace}})
    assert point.concurrency is None and point.trace_timestamps
    capped = Point.model_validate({"concurrency": 4, "workload": {"kind": "trace", "trace": trace}})
    assert capped.concurrency == 4
    closed = Point.model_validate(
        {"workload": {"kind": "trace", "trace": trace, "arrivals": "closed_loop"}}
    )
    assert closed.concurrency == 1 and not closed.trace_timestamps
    # stored and read back: the same point
    assert Point.model_validate_json(point.model_dump_json()) == point


def _multi_turn(**kw: object) -> Point:
    fields = {"kind": "multi_turn", "sessions": 2, "turns": 3, "first_turn_len": 20}
    return Point(concurrency=2, output_len=10, workload=Workload(**{**fields, "turn_len": 5, **kw}))


@needs_model
def test_multi_turn_user_turns_are_seeded_and_the_preview_assumes_the_answers() -> None:
    from core.load.prompts import load_tokenizer
    from core.load.workloads import preview_rows

    tok = load_tokenizer(str(MODEL))
    point = _multi_turn()
    built = build_workload(tok, point, 99, seed=3)
    assert built.sessions == [[0, 1, 2], [3, 4, 5]]
    assert [p.prompt_tokens for p in built.prompts] == [20, 5, 5] * 2
    again = build_workload(tok, point, 99, seed=3)
    assert [p.text for p in again.prompts] == [p.text for p in built.prompts]  # every arm
    rows = preview_rows(built, tok)
    # turn 0 exactly; later turns: the user turns so far plus the answers at output_len
    assert [r["input_tokens"] for r in rows] == [20, 35, 50] * 2
    assert [r["answer_tokens"] for r in rows] == [0, 10, 20] * 2
    assert [r["shared_prefix_tokens"] for r in rows] == [0, 20, 35] * 2
    assert [(r["session"], r["turn"]) for r in rows[:3]] == [(0, 0), (0, 1), (0, 2)]
    assert point.label.endswith("sessions 2x3 first=20 turn=5")


@needs_model
def test_multi_turn_turns_over_the_context_end_their_session() -> None:
    from core.load.prompts import load_tokenizer
    from core.load.workloads import context_refusal

    tok = load_tokenizer(str(MODEL))
    point = _multi_turn()  # turns of 20+10, 35+10, 50+10 tokens
    refusal = context_refusal(point, 50)
    assert refusal is not None and refusal.field == "plan.points.workload.over_context"
    assert "turn 2 of every session: 50 + 10 tokens exceed the model's context of 50" in str(
        refusal
    )
    assert context_refusal(point, 60) is None
    drop = _multi_turn(over_context="drop")
    assert context_refusal(drop, 50) is None  # a choice was made: the point says how many
    built = build_workload(tok, drop, 99, seed=3, context_tokens=50)
    assert built.sessions == [[0, 1], [2, 3]] and built.dropped == 2
    assert built.over_context_note == "2 dropped over the 50-token context"
