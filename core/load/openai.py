"""The OpenAI-compatible HTTP API as ServeLab speaks it, in one place: the chat request, a
streamed chat chunk read into a RequestRecord, a whole chat completion, and the ``/v1/models``
list. The load generator (core/load/requests.py), the sanity probe (core/run/probe.py), the
run's model discovery (core/run/pipeline.py) and the engines (endpoint, transformers serve)
all read the server through it, so they agree on what a chunk, an answer and a model are.

``read_chat_event`` is on the load generator's timing path: one JSON parse and a few dict
reads per SSE event, nothing else (the JSON parser is chosen once per process: ``json_loads``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import httpx

if TYPE_CHECKING:  # only attributes are set: the engines that use this never import pyarrow
    from core.records import RequestRecord

__all__ = [
    "CHAT_PATH",
    "JSON_PARSERS",
    "MODELS_PATH",
    "Loads",
    "chat_request",
    "finish_stream",
    "json_loads",
    "loads_std",
    "model_ids",
    "read_chat_event",
    "read_completion",
    "served_models",
    "sse_payloads",
    "token_count",
]

CHAT_PATH = "/v1/chat/completions"
MODELS_PATH = "/v1/models"

Loads = Callable[[bytes], Any]  # one SSE data payload -> its JSON value
# SERVELAB_JSON (core/settings.py): "auto" = orjson where installed, "json" = the stdlib's
JSON_PARSERS = ("auto", "json")


def chat_request(
    model: str,
    text: str,
    max_tokens: int,
    *,
    stream: bool = True,
    usage: bool = False,
    extra: Mapping[str, Any] | None = None,
    history: Sequence[tuple[str, str]] = (),
) -> dict[str, Any]:
    """The body of one greedy chat completion of ``text`` as the user message, after
    ``history`` ((role, content) messages: a multi-turn session so far). ``usage`` asks a
    stream for the server's own token counts (bench_serving's oai-chat backend falls back
    to the requested length without them); ``extra`` is merged last (an engine's
    exact-length fields)."""
    body: dict[str, Any] = {
        "model": model,
        "messages": [
            *({"role": role, "content": content} for role, content in history),
            {"role": "user", "content": text},
        ],
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "stream": stream,
    }
    if usage:
        body["stream_options"] = {"include_usage": True}
    if extra:
        body.update(extra)
    return body


_scan = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def loads_std(data: bytes) -> Any:
    """``json.loads`` for one chunk payload at 60 % of its cost: the C scanner straight on the
    text, without json.loads's encoding sniffing and wrapper calls (a chunk's JSON is most
    of the client's CPU per chunk). Anything unusual takes the full ``json.loads``."""
    text = data.decode()
    try:
        msg, end = _scan(text, 0)
    except (StopIteration, ValueError):
        return json.loads(text)  # raises with the usual message
    return msg if end == len(text) else json.loads(text)


def json_loads(parser: str = "auto") -> tuple[Loads, str]:
    """(parse, its name) for ``parser`` (one of JSON_PARSERS): orjson where it is installed
    (a third of the stdlib's cost per chunk; docs/BENCHMARKS.md part 2) unless ``"json"``
    asks for the stdlib (to compare the two)."""
    if parser != "json":
        try:
            import orjson
        except ImportError:
            pass
        else:
            return orjson.loads, "orjson"
    return loads_std, "json"


def token_count(value: Any) -> int | None:
    """A token count from the server, or None when it is not a non-negative integer."""
    return (
        value
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**53
        else None
    )


def sse_payloads(buf: bytes) -> tuple[list[bytes], bytes]:
    """The ``data:`` payloads of the complete lines in ``buf`` (as read so far from an SSE
    stream), and the incomplete last line to keep for the next read."""
    *lines, rest = buf.split(b"\n")
    return [line[5:].strip() for line in lines if line.startswith(b"data:")], rest


def read_chat_event(
    rec: RequestRecord, data: bytes, now: float, parts: list[str], loads: Loads
) -> bool:
    """One SSE ``data:`` payload of a chat stream into ``rec`` (its text into ``parts``,
    stamped ``now``); True when the request is over ([DONE], or an error recorded in
    ``rec.error``)."""
    if data == b"[DONE]":
        rec.end_s = now
        return True
    try:
        msg = loads(data)
    except (ValueError, RecursionError):  # RecursionError: a deeply nested JSON bomb
        rec.error = f"unparseable SSE data: {data[:200]!r}"
        return True
    try:
        if "error" in msg:
            rec.error = f"server error in stream: {json.dumps(msg['error'])[:300]}"
            return True
        usage = msg.get("usage")
        if usage:
            rec.prompt_tokens_server = token_count(usage.get("prompt_tokens"))
            rec.output_tokens_server = token_count(usage.get("completion_tokens"))
        for choice in msg.get("choices") or ():
            delta = choice.get("delta") or {}
            text = (delta.get("content") or "") + (delta.get("reasoning_content") or "")
            if text:
                rec.chunk_s.append(now)
                parts.append(text)
            if choice.get("finish_reason"):
                rec.finish_reason = str(choice["finish_reason"])
    except (AttributeError, TypeError, KeyError, IndexError):
        # Valid JSON but not an OpenAI stream event (a list, a number, content that is
        # not text...): a failed request, not a crash.
        rec.error = f"malformed SSE event: {data[:200]!r}"
        return True
    return False


def finish_stream(rec: RequestRecord, parts: list[str]) -> None:
    """A stream that ended without an error: complete, truncated or empty."""
    rec.generated_text = "".join(parts)
    # transformers serve ends its streams without [DONE]; a stream that ended after a
    # finish_reason is complete, one that ended without either was cut.
    if rec.end_s is None and rec.finish_reason is None:
        rec.error = "stream ended before [DONE] or a finish_reason (truncated)"
        return
    if not rec.chunk_s:
        rec.error = "no content in the stream"
        return
    rec.ok = True


def read_completion(body: Any) -> tuple[str, str | None, int | None]:
    """(text, finish_reason, completion tokens) of a chat completion answered in one piece
    (``stream`` false, or a server that ignored it); ValueError when ``body`` is not one."""
    try:
        choice = (body.get("choices") or [{}])[0]
        message = choice.get("message")
        finish = choice.get("finish_reason")
        tokens = (body.get("usage") or {}).get("completion_tokens")
    except (AttributeError, TypeError, LookupError) as exc:
        raise ValueError(f"not a chat completion: {str(body)[:200]!r}") from exc
    content = message.get("content") if isinstance(message, dict) else None
    return (
        content if isinstance(content, str) else "",
        str(finish) if finish else None,
        token_count(tokens),
    )


def model_ids(body: Any) -> list[str] | None:
    """The model ids of a ``/v1/models`` answer, in its order (entries without a string id
    left out); None when ``body`` is not a models list."""
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        return None
    return [m["id"] for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]


def served_models(client: httpx.Client, base_url: str) -> tuple[list[str] | None, str]:
    """(ids, what the server answered in words) from ``GET /v1/models``: ids None when it
    answered no models list, or nothing at all."""
    try:
        resp = client.get(base_url.rstrip("/") + MODELS_PATH)
    except httpx.HTTPError as exc:
        return None, f"no answer: {type(exc).__name__}: {exc}"[:300]
    answer = f"HTTP {resp.status_code}: {resp.text[:200]!r}"
    if resp.status_code != 200:
        return None, answer
    try:
        return model_ids(resp.json()), answer
    except (ValueError, RecursionError):
        return None, answer
