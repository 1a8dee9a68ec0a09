"""The answers step: a fixed prompt set decoded greedily with top-k logprobs, and the
baseline arm's tokens scored (teacher forcing), stored as ``answers.json``, so every arm's
outputs can be compared with the baseline's (core/analysis/same_answers.py) rather than
trusted because one question came back "Paris".

Which set: token-id prompts for random or dummy weights (their text means nothing), the
known-answer questions otherwise (core/load/answer_sets.py). Which route: the engine's
declared logprob support (``ENGINE.logprobs``): SGLang's /generate or an OpenAI-compatible
/v1/completions with token ids, top-k and teacher forcing; an engine with none (transformers
serve) is asked the questions through chat and compared on its greedy text only.

The teacher-forcing reference is the baseline arm's first run of the experiment that stored
its answers (the earliest trial; it scores its own tokens). Every later run, the baseline's
own included (its A/A), scores that run's tokens; a run that comes before any baseline run
(an arm ahead of the baseline in the first trial's shuffled order) scores nothing and says so.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from core.config import AnswersSpec, ServerConfig
from core.engines.base import EngineAdapter, TokenLogprob
from core.engines.declare import LogprobSupport
from core.errors import RunCancelled
from core.load.answer_sets import AnswerPrompt, AnswerSet, answer_set, is_correct
from core.load.openai import CHAT_PATH, chat_request, read_completion
from core.load.prompts import Tokenizer
from core.run_folder import RunFolder, read_json

__all__ = [
    "ANSWERS_FILE",
    "ANSWERS_SCHEMA",
    "AnswersTarget",
    "answers_enabled",
    "answers_step_words",
    "choose_set",
    "collect_answers",
    "find_reference",
    "weights_kind",
]

ANSWERS_FILE = "answers.json"
ANSWERS_SCHEMA = 1
# bench/gpu_make_model.py writes this beside random weights (and what made them)
RANDOM_WEIGHTS_MARKER = "servelab_random_weights.json"
COMPLETION_FORMAT = "Question: {q}\nAnswer:"


@dataclass(frozen=True)
class AnswersTarget:
    """The running server the step asks, and how."""

    base_url: str
    model: str
    adapter: EngineAdapter
    support: LogprobSupport
    tok: Tokenizer
    headers: dict[str, str]
    timeout_s: float
    should_stop: Callable[[], bool]


def answers_enabled(spec: AnswersSpec, tags: Sequence[str], weights: str = "real") -> bool:
    """On when the plan says so; by default on in an experiment's runs only, and never by
    default on dummy weights (their near-uniform logits make the check mean nothing, and on
    a slow arm it costs a minute of GPU time)."""
    if spec.enabled is not None:
        return spec.enabled
    return weights != "dummy" and any(t.startswith("exp:") for t in tags)


def weights_kind(server: ServerConfig, models_dir: Path | None = None) -> str:
    """``dummy`` (``--load-format dummy``: ±1e-3 uniform weights, near-uniform logits),
    ``random`` (a model built with random weights: bench/gpu_make_model.py's marker) or
    ``real``. A model shape (``server.shape``) always runs with dummy weights."""
    if server.shape:
        return "dummy"
    args = list(server.extra_args)
    for i, arg in enumerate(args):
        if arg == "--load-format=dummy" or (
            arg == "--load-format" and i + 1 < len(args) and args[i + 1] == "dummy"
        ):
            return "dummy"
    model = Path(server.model).expanduser()
    candidates = [model] + ([models_dir / server.model] if models_dir else [])
    if any((c / RANDOM_WEIGHTS_MARKER).is_file() for c in candidates):
        return "random"
    return "real"


def choose_set(spec: AnswersSpec, weights: str, support: LogprobSupport) -> tuple[AnswerSet, str]:
    """(the prompt set, why it was chosen, in words)."""
    if spec.prompts != "auto":
        return answer_set(spec.prompts), f"the plan asked for {spec.prompts}"
    if weights != "real" and support.token_ids:
        return answer_set("token_ids"), f"{weights} weights: their text means nothing"
    if weights != "real":
        return answer_set("questions"), f"{weights} weights, but the engine takes no token ids"
    return answer_set("questions"), "real weights: known-answer questions"


def _post(target: AnswersTarget, path: str, body: dict[str, Any]) -> Any:
    resp = httpx.post(
        target.base_url + path, json=body, timeout=target.timeout_s, headers=target.headers
    )
    if resp.status_code != 200:
        raise ValueError(f"HTTP {resp.status_code}: {resp.text[:200]}")
    return resp.json()


def _prompt_ids(target: AnswersTarget, prompt: AnswerPrompt) -> list[int]:
    if prompt.text is None:
        vocab = target.tok.vocab_size()
        return [i % vocab for i in prompt.token_ids]
    return target.tok.encode(COMPLETION_FORMAT.format(q=prompt.text))


def _token_rows(tokens: list[TokenLogprob]) -> dict[str, Any]:
    return {
        "tokens": [t.token for t in tokens],
        "token_ids": [t.token_id for t in tokens],
        "logprobs": [t.logprob for t in tokens],
        # an alternative by id where the server gave ids, else by its text
        "top": [
            [[k, v] for k, v in (t.top_ids.items() if t.top_ids else t.top.items())] for t in tokens
        ],
    }


def _token_id(tok: Tokenizer, token: TokenLogprob) -> int | None:
    """A token's id: the server's, else its text encoded where that is one token (an
    OpenAI-compatible server names tokens by text only)."""
    if token.token_id is not None:
        return token.token_id
    ids = tok.encode(token.token)
    return ids[0] if len(ids) == 1 else None


def _decode_logprobs(
    target: AnswersTarget, ids: list[int], aset: AnswerSet, top_k: int
) -> dict[str, Any]:
    path, body = target.adapter.logprobs_request(target.model, ids, aset.max_tokens, top_k)
    tokens = target.adapter.parse_logprobs(_post(target, path, body))
    rows = _token_rows(tokens)
    rows["token_ids"] = [_token_id(target.tok, t) for t in tokens]
    return {**rows, "text": "".join(t.token for t in tokens)}


def _decode_text(target: AnswersTarget, prompt: AnswerPrompt, aset: AnswerSet) -> dict[str, Any]:
    """The greedy text through chat (an engine with no logprobs), its tokens re-encoded."""
    question = prompt.text or target.tok.decode(list(prompt.token_ids))
    body = chat_request(target.model, question, aset.max_tokens, stream=False)
    text = read_completion(_post(target, CHAT_PATH, body))[0]
    ids = target.tok.encode(text) if text else []
    return {
        "tokens": [target.tok.decode([i]) for i in ids],
        "token_ids": ids,
        "logprobs": None,
        "top": None,
        "text": text,
    }


def _ask(target: AnswersTarget, aset: AnswerSet, top_k: int) -> list[dict[str, Any]]:
    rows = []
    for index, prompt in enumerate(aset.prompts):
        if target.should_stop():
            raise RunCancelled("cancelled during the answers check")
        ids = _prompt_ids(target, prompt) if target.support.path else []
        row: dict[str, Any] = {"index": index, "prompt": prompt.text, "prompt_ids": ids}
        row["expect"] = prompt.expect
        t = time.perf_counter()
        try:
            if target.support.path:
                row.update(_decode_logprobs(target, ids, aset, top_k))
            else:
                row.update(_decode_text(target, prompt, aset))
            row["error"] = None
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            row.update(tokens=[], token_ids=[], logprobs=None, top=None, text="")
            row["error"] = f"{type(exc).__name__}: {exc}"[:300]
        row["latency_s"] = round(time.perf_counter() - t, 4)
        row["correct"] = None if prompt.expect is None else is_correct(row["text"], prompt.expect)
        rows.append(row)
    return rows


def _score(
    target: AnswersTarget, reference: list[dict[str, Any]], top_k: int
) -> list[dict[str, Any]]:
    """Teacher forcing: each reference prompt's greedy token ids scored after its prompt."""
    out = []
    for ref in reference:
        if target.should_stop():
            raise RunCancelled("cancelled during the answers check")
        cont = [i for i in ref.get("token_ids") or [] if isinstance(i, int)]
        row: dict[str, Any] = {"index": ref["index"], "count": len(cont)}
        if not cont or len(cont) != len(ref.get("token_ids") or []):
            row.update(logprobs=[], top=[], error="the reference has no token ids to score")
            out.append(row)
            continue
        try:
            path, body = target.adapter.score_request(target.model, ref["prompt_ids"], cont, top_k)
            tokens = target.adapter.parse_score(_post(target, path, body), len(cont))
            rows = _token_rows(tokens)
            row.update(logprobs=rows["logprobs"], top=rows["top"], error=None)
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            row.update(logprobs=[], top=[], error=f"{type(exc).__name__}: {exc}"[:300])
        out.append(row)
    return out


def _run_trial(tags: Sequence[str]) -> int:
    for t in tags:
        if t.startswith("trial:") and t[6:].isdigit():
            return int(t[6:])
    return 0


def find_reference(
    runs_dir: Path, tags: Sequence[str], baseline_tag: str | None, own_id: str
) -> RunFolder | None:
    """The experiment's teacher-forcing reference: the earliest-trial run of the baseline
    arm whose answers are its own reference (it scored its own tokens). None: no baseline
    run has answered yet, or the run is in no experiment."""
    exp = next((t for t in tags if t.startswith("exp:")), None)
    if exp is None or baseline_tag is None or not runs_dir.is_dir():
        return None
    found: list[tuple[int, str, RunFolder]] = []
    for path in runs_dir.iterdir():
        if path.name == own_id or not (path / ANSWERS_FILE).is_file():
            continue
        spec = read_json(path / "spec.json") or {}
        run_tags = spec.get("tags") or []
        if exp not in run_tags or baseline_tag not in run_tags:
            continue
        answers = read_json(path / ANSWERS_FILE) or {}
        if (answers.get("reference") or {}).get("self"):
            found.append((_run_trial(run_tags), path.name, RunFolder(path)))
    return min(found, key=lambda f: (f[0], f[1]))[2] if found else None


def _forcing(
    target: AnswersTarget,
    rows: list[dict[str, Any]],
    reference: RunFolder | None,
    is_baseline: bool,
    aset: AnswerSet,
    top_k: int,
) -> dict[str, Any]:
    """The answers.json fields of teacher forcing: what was scored, against which run."""
    if not target.support.scores:
        why = f"the engine scores no given tokens: {target.support.why or 'no prompt logprobs'}"
        return {"reference": None, "forced": None, "forced_note": why}
    ref_data = None if reference is None else reference.read(ANSWERS_FILE)
    if ref_data is not None and ref_data.get("set") != aset.version:
        ref_data = None
    if ref_data is None and not is_baseline:
        note = "no baseline run had answered yet (the baseline ran later in this trial)"
        return {"reference": None, "forced": None, "forced_note": note}
    if ref_data is None:  # the first baseline run: it scores its own tokens
        forced = _score(target, rows, top_k)
        return {"reference": {"run_id": None, "self": True}, "forced": forced, "forced_note": ""}
    forced = _score(target, ref_data.get("prompts") or [], top_k)
    assert reference is not None
    ref = {"run_id": reference.run_id, "self": False}
    return {"reference": ref, "forced": forced, "forced_note": ""}


def collect_answers(
    target: AnswersTarget,
    spec: AnswersSpec,
    weights: str,
    reference: RunFolder | None,
    is_baseline: bool,
) -> dict[str, Any]:
    """answers.json: the set, its version, each prompt's greedy tokens with their top-k
    logprobs (or text only), the known-answer count, and the teacher-forced scores."""
    aset, why = choose_set(spec, weights, target.support)
    if spec.max_tokens is not None:
        aset = AnswerSet(aset.name, aset.version, aset.prompts, spec.max_tokens)
    rows = _ask(target, aset, spec.top_k)
    asked = [r for r in rows if r["correct"] is not None]
    data: dict[str, Any] = {
        "schema": ANSWERS_SCHEMA,
        "set": aset.version,
        "kind": aset.name,
        "why_set": why,
        "weights": weights,
        "route": "logprobs" if target.support.path else "text",
        "route_note": "" if target.support.path else target.support.why,
        "top_k": spec.top_k,
        "max_tokens": aset.max_tokens,
        "correct": sum(bool(r["correct"]) for r in asked) if asked else None,
        "asked": len(asked) if asked else None,
        "prompts": rows,
    }
    data.update(_forcing(target, rows, reference, is_baseline, aset, spec.top_k))
    return data


def answers_step_words(data: dict[str, Any]) -> tuple[str, str]:
    """(detail, outcome) of the answers step: what was asked and scored; ``warning`` when
    some prompts got no answer (the comparison, not the run, judges what the answers say)."""
    rows = data.get("prompts") or []
    failed = sum(1 for r in rows if r.get("error"))
    parts = [f"{len(rows)} prompts ({data.get('set')}, {data.get('weights')} weights)"]
    if data.get("weights") == "dummy":
        parts.append("dummy weights give near-uniform logits: the check means nothing here")
    if data.get("asked"):
        parts.append(f"{data.get('correct')}/{data.get('asked')} correct")
    ref = data.get("reference") or {}
    if ref.get("self"):
        parts.append("the reference: scored its own tokens")
    elif ref.get("run_id"):
        parts.append(f"scored the tokens of {ref['run_id']}")
    elif data.get("forced_note"):
        parts.append(f"no teacher forcing: {data['forced_note']}")
    if failed:
        parts.append(f"{failed} without an answer")
    return "; ".join(parts)[:500], "warning" if failed else "ok"
