"""A point's requests from its workload: fixed or uniform lengths, lengths drawn from a trace,
trace replay (Mooncake JSONL), shared prefixes.

Every prompt is seeded token ids of the served model's tokenizer (core/load/prompts.py's plain
" word" ids, which decode to a text of exactly that many tokens), so the same (workload, seed,
tokenizer) gives the same prompts in every arm. Trace replay makes each hash id one fixed block
of ``BLOCK_TOKENS`` seeded tokens (the id alone picks them: the same id is the same tokens in
every request, point and arm) and cuts a request's blocks to exactly its ``input_length``:
unlike bench_serving's mooncake replay, which sends 128 words "hi" per block and ignores the
length. Everything here runs before a point starts: nothing is on the timing path.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import random
from dataclasses import dataclass, field
from pathlib import Path

from core.config import Point, Workload
from core.errors import ConfigError
from core.load.prompts import Prompt, Tokenizer, load_tokenizer, prompt_of_length, word_ids

__all__ = [
    "BLOCK_TOKENS",
    "BuiltWorkload",
    "TraceRequest",
    "build_workload",
    "context_refusal",
    "model_context_tokens",
    "prefix_reuse_share",
    "preview_point",
    "preview_rows",
    "read_trace",
    "request_lengths",
    "shared_prefix_tokens",
    "workload_digest",
]

BLOCK_TOKENS = 512  # Mooncake's prefix-block size (its README)
_FIELD = "plan.points.workload"


@dataclass(frozen=True)
class TraceRequest:
    timestamp_ms: float
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]


@dataclass
class BuiltWorkload:
    """The prompts of a point and when each goes out (None: the point's cap and rate)."""

    prompts: list[Prompt]
    arrivals_s: list[float] | None = None
    token_ids: list[list[int]] = field(default_factory=list)
    dropped: int = 0  # over the context, over_context="drop" (multi_turn: "clip" too)
    clipped: int = 0  # over the context, over_context="clip"
    context_tokens: int | None = None
    # multi_turn: each session's prompt indices (its user turns, in order); the answers
    # between them are the server's, known only as the point runs.
    sessions: list[list[int]] | None = None
    think_time_s: float = 0.0

    def summary(self) -> dict[str, object]:
        """What the point records about its workload beside the prompts' digest."""
        return {
            "requests": len(self.prompts),
            "dropped_over_context": self.dropped,
            "clipped_over_context": self.clipped,
            "context_tokens": self.context_tokens,
            "trace_arrivals": self.arrivals_s is not None,
            **({} if self.sessions is None else {"sessions": len(self.sessions)}),
        }

    @property
    def over_context_note(self) -> str:
        """How many requests the context check dropped or clipped, in words ("" for none):
        said beside the point's name (its stored label)."""
        parts = [
            f"{n} {what} over the {self.context_tokens}-token context"
            for n, what in ((self.dropped, "dropped"), (self.clipped, "clipped"))
            if n
        ]
        return "; ".join(parts)


_SHAPE = (
    'each line must be {"timestamp": ms, "input_length": n, "output_length": n,'
    ' "hash_ids": [ids]} (Mooncake\'s JSONL)'
)


def _trace_row(row: object) -> TraceRequest:
    """One parsed line as a request; ValueError naming the field that is wrong."""
    if not isinstance(row, dict):
        raise ValueError(f"a JSON {type(row).__name__}, not an object")
    missing = [
        k for k in ("timestamp", "input_length", "output_length", "hash_ids") if k not in row
    ]
    if missing:
        raise ValueError(f"no {', '.join(repr(k) for k in missing)}")
    ts = row["timestamp"]
    if isinstance(ts, bool) or not isinstance(ts, int | float) or ts < 0:
        raise ValueError(f"'timestamp' must be milliseconds >= 0, not {ts!r}")
    lengths = []
    for key in ("input_length", "output_length"):
        v = row[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{key!r} must be a whole number of tokens >= 1, not {v!r}")
        lengths.append(v)
    ids = row["hash_ids"]
    if not isinstance(ids, list) or any(isinstance(i, bool) or not isinstance(i, int) for i in ids):
        raise ValueError(f"'hash_ids' must be a list of whole numbers, not {ids!r:.60}")
    return TraceRequest(float(ts), lengths[0], lengths[1], tuple(ids))


def read_trace(path: str | Path) -> list[TraceRequest]:
    """A Mooncake-shape JSONL trace; a line of another shape is a ConfigError naming its
    line number and the field that is wrong."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{_FIELD}.trace", f"no trace file at {str(path)!r}: give a JSONL file")
    out = []
    with p.open(encoding="utf-8", errors="replace") as fh:
        for n, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as exc:
                raise ConfigError(
                    f"{_FIELD}.trace", f"{p.name} line {n} is not JSON ({exc}); {_SHAPE}"
                ) from exc
            try:
                out.append(_trace_row(row))
            except ValueError as exc:
                raise ConfigError(f"{_FIELD}.trace", f"{p.name} line {n}: {exc}; {_SHAPE}") from exc
    if not out:
        raise ConfigError(f"{_FIELD}.trace", f"{p.name} holds no request; {_SHAPE}")
    return out


def model_context_tokens(model_dir: str | Path) -> int | None:
    """The model's context length from its config.json (None when not known)."""
    cfg = Path(model_dir) / "config.json"
    try:
        data = json.loads(cfg.read_text())
    except (OSError, ValueError):
        return None
    for key in ("max_position_embeddings", "n_positions", "max_seq_len"):
        if isinstance(data.get(key), int):
            return int(data[key])
    return None


def _block(tok: Tokenizer, seed: int, hash_id: int) -> list[int]:
    # The id and the seed alone pick the block: no state shared between requests.
    rng = random.Random(f"{seed}:{hash_id}")
    pool = word_ids(tok)
    # The first token is the id's own (distinct for ids below the pool size, 18,731 words
    # for SmolLM2): two different blocks then never share a chance first token, so a prefix
    # shared in tokens is the blocks shared, as the trace says.
    return [pool[hash_id % len(pool)], *(rng.choice(pool) for _ in range(BLOCK_TOKENS - 1))]


def _from_ids(tok: Tokenizer, ids: list[int], output_len: int) -> Prompt:
    text = tok.decode(ids)
    got = len(tok.encode(text))
    if got != len(ids):  # plain word ids never merge; a tokenizer where they do is refused
        raise ConfigError(
            "server.tokenizer", f"a {len(ids)}-token prompt re-encodes to {got} tokens"
        )
    return Prompt(text=text, prompt_tokens=len(ids), output_len=output_len)


def _fit(
    w: Workload, context: int | None, input_len: int, output_len: int, where: str
) -> int | None:
    """The input length to send (None = drop): the context check of one request."""
    if context is None or input_len + output_len <= context:
        return input_len
    if w.over_context == "error":
        raise ConfigError(
            f"{_FIELD}.over_context",
            f"{where}: {input_len} + {output_len} tokens exceed the model's context of "
            f"{context}; set over_context to 'drop' or 'clip', or shorten the request",
        )
    if w.over_context == "drop" or context - output_len < 1:
        return None
    return context - output_len


def build_workload(
    tok: Tokenizer, point: Point, n: int, seed: int, context_tokens: int | None = None
) -> BuiltWorkload:
    """The point's requests: ``n`` for the length kinds (the point's budget); for trace and
    shared_prefix the workload's own count (trace: at most num_prompts in its window)."""
    w = point.workload
    rng = random.Random(seed)
    built = BuiltWorkload(prompts=[], context_tokens=context_tokens)
    if w.kind in ("fixed", "uniform", "trace_lengths"):
        return _length_kinds(tok, point, n, rng, built, context_tokens)
    if w.kind == "shared_prefix":
        return _shared_prefix(tok, point, rng, built, context_tokens)
    if w.kind == "multi_turn":
        return _multi_turn(tok, point, rng, built, context_tokens)
    return _trace_replay(tok, point, seed, rng, built, context_tokens)


def _add(built: BuiltWorkload, prompt: Prompt | None, ids: list[int] | None = None) -> None:
    if prompt is not None:
        built.prompts.append(prompt)
        if ids is not None:
            built.token_ids.append(ids)


def _length_kinds(
    tok: Tokenizer,
    point: Point,
    n: int,
    rng: random.Random,
    built: BuiltWorkload,
    context_tokens: int | None,
) -> BuiltWorkload:
    """fixed, uniform and trace_lengths: ``n`` prompts of random words, lengths as asked."""
    w = point.workload
    rows = read_trace(w.trace or "") if w.kind == "trace_lengths" else []
    for i in range(n):
        if w.kind == "fixed":
            lin, lout = point.input_len, point.output_len
        elif w.kind == "uniform":  # bench_serving --random-range-ratio
            lin = rng.randint(max(1, int(point.input_len * w.range_ratio)), point.input_len)
            lout = rng.randint(max(1, int(point.output_len * w.range_ratio)), point.output_len)
        else:
            row = rng.choice(rows)
            lin, lout = row.input_length, row.output_length
        fit = _fit(w, context_tokens, lin, lout, f"request {i}")
        if fit is None:
            built.dropped += 1
            continue
        built.clipped += fit < lin
        _add(built, prompt_of_length(tok, rng, fit, lout))
    return built


def _shared_prefix(
    tok: Tokenizer,
    point: Point,
    rng: random.Random,
    built: BuiltWorkload,
    context_tokens: int | None,
) -> BuiltWorkload:
    w = point.workload
    pool = word_ids(tok)
    systems = [[rng.choice(pool) for _ in range(w.system_prompt_len)] for _ in range(w.groups)]
    order = [(g, k) for g in range(w.groups) for k in range(w.prompts_per_group)]
    rng.shuffle(order)  # like bench_serving: the groups' requests interleave
    for i, (g, _k) in enumerate(order):
        question = [rng.choice(pool) for _ in range(w.question_len)]
        ids = systems[g] + question
        fit = _fit(w, context_tokens, len(ids), point.output_len, f"request {i}")
        if fit is None:
            built.dropped += 1
            continue
        built.clipped += fit < len(ids)
        _add(built, _from_ids(tok, ids[:fit], point.output_len), ids[:fit])
    return built


def _trace_replay(
    tok: Tokenizer,
    point: Point,
    seed: int,
    rng: random.Random,
    built: BuiltWorkload,
    context_tokens: int | None,
) -> BuiltWorkload:
    """The trace's window, each request's prompt built from its hash ids' shared blocks."""
    w = point.workload
    rows = read_trace(w.trace or "")
    start_ms = w.start_s * 1000.0
    end_ms = None if w.duration_s is None else start_ms + w.duration_s * 1000.0
    window = [
        (i, r)
        for i, r in enumerate(rows)
        if r.timestamp_ms >= start_ms and (end_ms is None or r.timestamp_ms < end_ms)
    ][: point.num_prompts]
    blocks: dict[int, list[int]] = {}
    arrivals = []
    for line_index, r in window:
        fit = _fit(
            w, context_tokens, r.input_length, r.output_length, f"trace request {line_index}"
        )
        if fit is None:
            built.dropped += 1
            continue
        built.clipped += fit < r.input_length
        ids: list[int] = []
        for h in r.hash_ids:
            if len(ids) >= fit:
                break
            if h not in blocks:
                blocks[h] = _block(tok, seed, h)
            ids.extend(blocks[h])
        if len(ids) < fit:  # a trace whose blocks do not cover its length: seeded filler
            ids.extend(rng.choice(word_ids(tok)) for _ in range(fit - len(ids)))
        ids = ids[:fit]
        _add(built, _from_ids(tok, ids, r.output_length), ids)
        arrivals.append((r.timestamp_ms - start_ms) / 1000.0 * w.time_scale)
    if w.arrivals == "timestamps" and arrivals:
        first = arrivals[0]
        built.arrivals_s = [a - first for a in arrivals]
    return built


def _turn_input_tokens(w: Workload, output_len: int, turn: int) -> int:
    """Turn ``turn``'s prompt in tokens (no chat template) when every answer before it is
    ``output_len`` tokens long: the preview's assumption (the real answers are the server's)."""
    return w.first_turn_len + turn * (w.turn_len + output_len)


def _multi_turn(
    tok: Tokenizer,
    point: Point,
    rng: random.Random,
    built: BuiltWorkload,
    context_tokens: int | None,
) -> BuiltWorkload:
    """Seeded user turns, session by session (the same in every arm); a session ends before
    its first turn over the context (a conversation cannot be clipped in the middle, so
    "clip" drops those turns too)."""
    w = point.workload
    built.sessions, built.think_time_s = [], w.think_time_s
    for k in range(w.sessions):
        turns: list[int] = []
        for t in range(w.turns):
            lin = _turn_input_tokens(w, point.output_len, t)
            fit = _fit(w, context_tokens, lin, point.output_len, f"session {k} turn {t}")
            if fit is None or fit < lin:
                built.dropped += w.turns - t
                break
            user_len = w.first_turn_len if t == 0 else w.turn_len
            turns.append(len(built.prompts))
            built.prompts.append(prompt_of_length(tok, rng, user_len, point.output_len))
        built.sessions.append(turns)
    return built


def request_lengths(point: Point, n: int | None = None) -> list[tuple[str, int, int]]:
    """(which request, input tokens, output tokens) of the point's longest requests, known
    without a tokenizer: for the context check when a point is queued (the same ``_fit`` as
    building it). ``n``: the requests of a length kind (default num_prompts)."""
    w = point.workload
    if w.kind in ("fixed", "uniform"):  # uniform's longest draw is the point's lengths
        return [("every request", point.input_len, point.output_len)]
    if w.kind == "trace_lengths":  # any row may be drawn
        return [
            (f"trace request {i}", r.input_length, r.output_length)
            for i, r in enumerate(read_trace(w.trace or ""))
        ]
    if w.kind == "shared_prefix":
        return [("every request", w.system_prompt_len + w.question_len, point.output_len)]
    if w.kind == "multi_turn":
        return [
            (
                f"turn {t} of every session",
                _turn_input_tokens(w, point.output_len, t),
                point.output_len,
            )
            for t in range(w.turns)
        ]
    start_ms = w.start_s * 1000.0
    end_ms = None if w.duration_s is None else start_ms + w.duration_s * 1000.0
    return [
        (f"trace request {i}", r.input_length, r.output_length)
        for i, r in enumerate(read_trace(w.trace or ""))
        if r.timestamp_ms >= start_ms and (end_ms is None or r.timestamp_ms < end_ms)
    ][: point.num_prompts]


def context_refusal(point: Point, context_tokens: int | None) -> ConfigError | None:
    """The error the point's requests get at run time for exceeding the model's context
    with over_context="error" (None when they fit, or drop/clip was chosen). Reads the
    point's trace whatever the context: an unreadable trace raises its ConfigError now."""
    lengths = request_lengths(point)
    if context_tokens is None or point.workload.over_context != "error":
        return None
    for where, lin, lout in lengths:
        try:
            _fit(point.workload, context_tokens, lin, lout, where)
        except ConfigError as exc:
            return exc
    return None


def shared_prefix_tokens(token_ids: list[list[int]]) -> list[int]:
    """Per request, the longest prefix in tokens it shares with any earlier request. The
    longest common prefix with a set of sequences is reached at a neighbour in sorted order,
    so one sorted list of the earlier requests answers it exactly."""
    seen: list[tuple[int, ...]] = []
    out = []
    for ids in token_ids:
        key = tuple(ids)
        pos = bisect.bisect_left(seen, key)
        best = 0
        for j in (pos - 1, pos):
            if 0 <= j < len(seen):
                other = seen[j]
                k, m = 0, min(len(other), len(key))
                while k < m and other[k] == key[k]:
                    k += 1
                best = max(best, k)
        out.append(best)
        seen.insert(pos, key)
    return out


def workload_digest(w: Workload) -> str:
    """The workload's fields, short: two points with the same digest asked for the same load."""
    return hashlib.sha256(w.model_dump_json().encode()).hexdigest()[:12]


def preview_rows(built: BuiltWorkload, tok: Tokenizer) -> list[dict[str, object]]:
    """Per request what will be sent: `python -m core workload preview` and the Launch form.
    ``input_tokens`` is re-measured from the text (served tokenizer, no chat template).
    Multi-turn: turn 0 exactly; a later turn's ``input_tokens`` counts the answers before it
    at their requested length (``answer_tokens``: to be generated by the server)."""
    ids = [tok.encode(p.text) for p in built.prompts]
    if built.sessions is not None:
        return _session_rows(built, ids)
    shared = shared_prefix_tokens(ids)
    return [
        {
            "index": i,
            "arrival_s": None if built.arrivals_s is None else built.arrivals_s[i],
            "input_tokens": len(ids[i]),
            "output_tokens": p.output_len,
            "shared_prefix_tokens": shared[i],
        }
        for i, p in enumerate(built.prompts)
    ]


def _session_rows(built: BuiltWorkload, ids: list[list[int]]) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for k, turns in enumerate(built.sessions or []):
        before = 0  # the conversation before this turn's user text
        previous = 0  # the previous turn's prompt: the longest earlier prefix it extends
        for t, i in enumerate(turns):
            user = len(ids[i])
            answers = sum(built.prompts[j].output_len for j in turns[:t])
            rows.append(
                {
                    "index": i,
                    "arrival_s": None,
                    "input_tokens": before + user,
                    "output_tokens": built.prompts[i].output_len,
                    "shared_prefix_tokens": previous,
                    "session": k,
                    "turn": t,
                    "user_tokens": user,
                    "answer_tokens": answers,  # to be generated: assumed output_len each
                }
            )
            previous = before + user
            before += user + built.prompts[i].output_len
    return rows  # in index order: the prompts are made session by session


def preview_point(
    point: Point, seed: int, model_folder: str | Path, limit: int | None = None
) -> tuple[list[dict[str, object]], dict[str, object]]:
    """(rows, summary) of what a point will send with the tokenizer and context length of
    ``model_folder``: `python -m core workload preview` and the Launch form's preview. ``seed``
    is the pipeline's per-point seed (plan seed x 1000 + the point's index)."""
    tok = load_tokenizer(str(model_folder))
    n = limit or point.num_prompts
    built = build_workload(tok, point, n, seed, model_context_tokens(model_folder))
    return preview_rows(built, tok)[:limit], built.summary()


def prefix_reuse_share(rows: list[dict[str, object]]) -> float | None:
    """The share of the preview's input tokens that an earlier request already sent as a
    prefix (what a prefix cache could reuse at best); None for no tokens."""
    total = sum(int(str(r["input_tokens"])) for r in rows)
    shared = sum(int(str(r["shared_prefix_tokens"])) for r in rows)
    return None if not total else shared / total
