"""Token log probabilities in the two shapes servers return them: SGLang's native
``/generate`` (``meta_info.output_token_logprobs``, ``output_top_logprobs``) and OpenAI's
legacy ``/v1/completions`` (``choices[0].logprobs``: ``tokens``, ``token_logprobs``,
``top_logprobs``). Pure functions: the adapters send, these read."""

from __future__ import annotations

from typing import Any

from core.engines.base import TokenLogprob

__all__ = [
    "COMPLETIONS_PATH",
    "GENERATE_PATH",
    "completions_logprobs_body",
    "generate_logprobs_body",
    "parse_completions_logprobs",
    "parse_generate_logprobs",
]

GENERATE_PATH = "/generate"
COMPLETIONS_PATH = "/v1/completions"


def generate_logprobs_body(prompt: str, max_tokens: int, top_n: int) -> dict[str, Any]:
    """SGLang's native request: greedy, the output tokens' logprobs only
    (``logprob_start_len`` -1), each token's text with them."""
    return {
        "text": prompt,
        "sampling_params": {"max_new_tokens": max_tokens, "temperature": 0.0},
        "return_logprob": True,
        "top_logprobs_num": top_n,
        "logprob_start_len": -1,
        "return_text_in_logprobs": True,
        "stream": False,
    }


def completions_logprobs_body(
    model: str, prompt: str, max_tokens: int, top_n: int
) -> dict[str, Any]:
    """OpenAI's legacy completions request: ``logprobs`` is the number of alternatives
    (0: the chosen token's only)."""
    return {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "logprobs": top_n,
        "stream": False,
    }


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"a logprob must be a number, got {value!r}")
    return float(value)


def _entry(item: Any) -> tuple[float, str]:
    """SGLang's ``[logprob, token_id, text]`` (text None without return_text_in_logprobs)."""
    if not isinstance(item, list) or len(item) < 2:
        raise ValueError(f"a token logprob is [logprob, token_id, text], got {item!r}")
    text = item[2] if len(item) > 2 and isinstance(item[2], str) else f"<id {item[1]}>"
    return _number(item[0]), text


def parse_generate_logprobs(body: dict[str, Any]) -> list[TokenLogprob]:
    """The tokens of a non-streamed ``/generate`` answer (a batch answer: its first)."""
    answer = body[0] if isinstance(body, list) and body else body
    meta = answer.get("meta_info") if isinstance(answer, dict) else None
    tokens = meta.get("output_token_logprobs") if isinstance(meta, dict) else None
    if not isinstance(tokens, list):
        raise ValueError("no meta_info.output_token_logprobs: was return_logprob sent?")
    tops = meta.get("output_top_logprobs") if isinstance(meta, dict) else None
    out = []
    for i, item in enumerate(tokens):
        logprob, text = _entry(item)
        top_items = tops[i] if isinstance(tops, list) and i < len(tops) and tops[i] else []
        top = {text: value for value, text in map(_entry, top_items)}
        out.append(TokenLogprob(text, logprob, top))
    return out


def parse_completions_logprobs(body: dict[str, Any]) -> list[TokenLogprob]:
    """The tokens of a non-streamed ``/v1/completions`` answer asked with ``logprobs``."""
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
        out.append(TokenLogprob(str(token), _number(value), top))
    return out
