"""Token log probabilities in the two shapes servers return them: SGLang's native
``/generate`` (``meta_info.output_token_logprobs``, ``output_top_logprobs``) and OpenAI's
legacy ``/v1/completions`` (``choices[0].logprobs``: ``tokens``, ``token_logprobs``,
``top_logprobs``). Pure functions: the adapters send, these read.

Teacher forcing (the answers check scores the baseline's tokens in every arm) asks for the
prompt's own logprobs: SGLang's ``logprob_start_len`` with ``input_token_logprobs``, and
OpenAI's ``echo`` with ``logprobs`` (vLLM and SGLang answer it; transformers serve does not)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from core.engines.base import TokenLogprob

__all__ = [
    "COMPLETIONS_PATH",
    "GENERATE_PATH",
    "completions_logprobs_body",
    "completions_score_body",
    "generate_logprobs_body",
    "generate_score_body",
    "parse_completions_logprobs",
    "parse_completions_score",
    "parse_generate_logprobs",
    "parse_generate_score",
]

GENERATE_PATH = "/generate"
COMPLETIONS_PATH = "/v1/completions"


def _prompt_field(prompt: str | Sequence[int]) -> dict[str, Any]:
    return {"text": prompt} if isinstance(prompt, str) else {"input_ids": list(prompt)}


def generate_logprobs_body(
    prompt: str | Sequence[int], max_tokens: int, top_n: int
) -> dict[str, Any]:
    """SGLang's native request: greedy, the output tokens' logprobs only
    (``logprob_start_len`` -1), each token's text with them. ``prompt``: text or token ids."""
    return {
        **_prompt_field(prompt),
        "sampling_params": {"max_new_tokens": max_tokens, "temperature": 0.0},
        "return_logprob": True,
        "top_logprobs_num": top_n,
        "logprob_start_len": -1,
        "return_text_in_logprobs": True,
        "stream": False,
    }


def generate_score_body(
    prompt_ids: Sequence[int], continuation_ids: Sequence[int], top_n: int
) -> dict[str, Any]:
    """SGLang's native request for teacher forcing: prompt + continuation as input, the
    input's logprobs from the prompt's last token on (``logprob_start_len``: one early, so
    the continuation is covered whether the first entry is that position's token or the
    next; ``parse_generate_score`` keeps the last ones), one new token (not read)."""
    return {
        "input_ids": [*prompt_ids, *continuation_ids],
        "sampling_params": {"max_new_tokens": 1, "temperature": 0.0},
        "return_logprob": True,
        "top_logprobs_num": top_n,
        "logprob_start_len": max(len(prompt_ids) - 1, 0),
        "return_text_in_logprobs": True,
        "stream": False,
    }


def completions_logprobs_body(
    model: str, prompt: str | Sequence[int], max_tokens: int, top_n: int
) -> dict[str, Any]:
    """OpenAI's legacy completions request: ``logprobs`` is the number of alternatives
    (0: the chosen token's only)."""
    return {
        "model": model,
        "prompt": prompt if isinstance(prompt, str) else list(prompt),
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "logprobs": top_n,
        "stream": False,
    }


def completions_score_body(
    model: str, prompt_ids: Sequence[int], continuation_ids: Sequence[int], top_n: int
) -> dict[str, Any]:
    """OpenAI's legacy completions request for teacher forcing: the prompt echoed with its
    logprobs (``echo``), one new token after it."""
    body = completions_logprobs_body(model, [*prompt_ids, *continuation_ids], 1, top_n)
    return {**body, "echo": True}


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"a logprob must be a number, got {value!r}")
    return float(value)


def _entry(item: Any) -> tuple[float, str, int | None]:
    """SGLang's ``[logprob, token_id, text]`` (text None without return_text_in_logprobs)."""
    if not isinstance(item, list) or len(item) < 2:
        raise ValueError(f"a token logprob is [logprob, token_id, text], got {item!r}")
    text = item[2] if len(item) > 2 and isinstance(item[2], str) else f"<id {item[1]}>"
    token_id = item[1] if isinstance(item[1], int) and not isinstance(item[1], bool) else None
    return _number(item[0]), text, token_id


def _generate_tokens(meta: dict[str, Any], kind: str) -> list[TokenLogprob]:
    """``meta_info.<kind>_token_logprobs`` with ``<kind>_top_logprobs`` (output or input)."""
    tokens = meta.get(f"{kind}_token_logprobs")
    if not isinstance(tokens, list):
        raise ValueError(f"no meta_info.{kind}_token_logprobs: was return_logprob sent?")
    tops = meta.get(f"{kind}_top_logprobs")
    out = []
    for i, item in enumerate(tokens):
        logprob, text, token_id = _entry(item)
        top_items = tops[i] if isinstance(tops, list) and i < len(tops) and tops[i] else []
        entries = [_entry(t) for t in top_items]
        top = {t: value for value, t, _ in entries}
        top_ids = {tid: value for value, _, tid in entries if tid is not None}
        out.append(TokenLogprob(text, logprob, top, token_id, top_ids))
    return out


def _meta(body: Any) -> dict[str, Any]:
    answer = body[0] if isinstance(body, list) and body else body
    meta = answer.get("meta_info") if isinstance(answer, dict) else None
    if not isinstance(meta, dict):
        raise ValueError("no meta_info in the /generate answer")
    return meta


def parse_generate_logprobs(body: dict[str, Any]) -> list[TokenLogprob]:
    """The tokens of a non-streamed ``/generate`` answer (a batch answer: its first)."""
    return _generate_tokens(_meta(body), "output")


def parse_generate_score(body: dict[str, Any], count: int) -> list[TokenLogprob]:
    """The last ``count`` input tokens' logprobs of a ``generate_score_body`` answer (an
    entry whose logprob is null, the very first token of an input, is left out)."""
    meta = dict(_meta(body))
    items = meta.get("input_token_logprobs")
    if isinstance(items, list):  # null logprob: nothing precedes that token
        keep = [i for i, it in enumerate(items) if not (isinstance(it, list) and it[0] is None)]
        tops = meta.get("input_top_logprobs")
        meta["input_token_logprobs"] = [items[i] for i in keep]
        if isinstance(tops, list):
            meta["input_top_logprobs"] = [tops[i] if i < len(tops) else None for i in keep]
    tokens = _generate_tokens(meta, "input")
    if len(tokens) < count:
        raise ValueError(f"{len(tokens)} input token logprobs, {count} asked for")
    return tokens[len(tokens) - count :]


def parse_completions_logprobs(
    body: dict[str, Any], allow_null: bool = False
) -> list[TokenLogprob]:
    """The tokens of a non-streamed ``/v1/completions`` answer asked with ``logprobs``
    (``allow_null``: an echoed prompt's first token has none; it reads as NaN)."""
    choices = body.get("choices") if isinstance(body, dict) else None
    first = choices[0] if isinstance(choices, list) and choices else None
    lp = first.get("logprobs") if isinstance(first, dict) else None
    if not isinstance(lp, dict) or not isinstance(lp.get("tokens"), list):
        raise ValueError("no choices[0].logprobs.tokens: the server returned no logprobs")
    values = lp.get("token_logprobs")
    tops = lp.get("top_logprobs")
    if not isinstance(values, list) or len(values) != len(lp["tokens"]):
        raise ValueError("choices[0].logprobs: token_logprobs does not match tokens")
    out = []
    for i, (token, value) in enumerate(zip(lp["tokens"], values, strict=True)):
        top_raw = tops[i] if isinstance(tops, list) and i < len(tops) else None
        top = {str(k): _number(v) for k, v in top_raw.items()} if isinstance(top_raw, dict) else {}
        value_f = math.nan if value is None and allow_null else _number(value)
        out.append(TokenLogprob(str(token), value_f, top))
    return out


def parse_completions_score(body: dict[str, Any], count: int) -> list[TokenLogprob]:
    """The ``count`` echoed prompt tokens before the one generated token, in the answer to
    ``completions_score_body``."""
    tokens = parse_completions_logprobs(body, allow_null=True)
    if len(tokens) < count + 1:
        raise ValueError(f"{len(tokens)} echoed token logprobs, {count} asked for")
    return tokens[len(tokens) - 1 - count : len(tokens) - 1]
