"""The sanity probe: one question before any load, so a broken server (wrong
weights, NaN logits, a chat template gone wrong) is caught before it is measured."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import httpx

from core.answers import ProbeVerdict, judge_answer
from core.config import ProbeSpec
from core.errors import RunCancelled
from core.load.openai import (
    CHAT_PATH,
    chat_request,
    json_loads,
    read_chat_event,
    read_completion,
    sse_payloads,
)
from core.records import RequestRecord

__all__ = ["ProbeResult", "judge_answer", "run_probe"]


@dataclass(frozen=True)
class ProbeResult:
    prompt: str
    expect: str | None
    answer: str
    passed: bool  # False: the run stops as invalid
    reason: str
    latency_s: float
    # core.answers: "warning" is a degenerate answer that passed (the run goes on, amber)
    verdict: ProbeVerdict = "failed"
    output_tokens: int | None = None  # the server's own count (stream usage), if it gave one

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


_MAX_ANSWER_CHARS = 4000  # a probe answer is a few words; more is not read


def _read_stream(resp: httpx.Response, expect: str | None) -> tuple[str, RequestRecord]:
    """(answer, record): the streamed text, read event by event (core.load.openai, as the
    load generator reads it) until the expected pattern shows (nothing after it can change
    the verdict) or the stream ends; the record's ``error`` when the stream carried one or
    broke mid-way, its ``output_tokens_server`` from the usage event."""
    rec = RequestRecord(index=0, send_s=0.0, prompt_tokens=0, output_tokens_requested=0)
    parts: list[str] = []
    buf = b""
    loads, _name = json_loads()
    for raw in resp.iter_bytes():
        events, buf = sse_payloads(buf + raw)
        for data in events:
            over = read_chat_event(rec, data, 0.0, parts, loads)
            answer = "".join(parts)
            if expect is not None and re.search(expect, answer):
                rec.error = None  # the answer is in: nothing later can fail the probe
                return answer, rec
            if over or len(answer) > _MAX_ANSWER_CHARS:
                return answer, rec
    return "".join(parts), rec


def _ask(
    base_url: str, model: str, spec: ProbeSpec, timeout_s: float, headers: dict[str, str] | None
) -> ProbeResult:
    """One streamed question. The answer is bounded by ``max_tokens`` and read only until
    it matches ``expect``: on a slow engine (a CPU decodes a token in tenths of a second
    to seconds) the probe costs the tokens up to the answer, not the whole reply."""
    # usage: the server's own token count tells "generated nothing" from "generated tokens
    # that read as no text" (core.answers.judge_answer)
    body = chat_request(model, spec.prompt, spec.max_tokens, usage=True)
    t = time.perf_counter()

    def failed(reason: str) -> ProbeResult:
        return ProbeResult(spec.prompt, spec.expect, "", False, reason, time.perf_counter() - t)

    try:
        with httpx.stream(
            "POST", base_url + CHAT_PATH, json=body, timeout=timeout_s, headers=headers
        ) as resp:
            if resp.status_code != 200:
                resp.read()
                return failed(f"HTTP {resp.status_code}: {resp.text[:200]}")
            tokens: int | None = None
            if "text/event-stream" in resp.headers.get("content-type", ""):
                answer, rec = _read_stream(resp, spec.expect)
                error, tokens = rec.error, rec.output_tokens_server
                latency_s = time.perf_counter() - t
            else:  # a server that answers in one piece although asked to stream
                resp.read()
                latency_s = time.perf_counter() - t
                try:
                    answer, error = read_completion(resp.json())[0], None
                except (ValueError, RecursionError):  # RecursionError: a JSON bomb
                    return failed(f"not a chat completion: {resp.text[:200]!r}")
    except httpx.HTTPError as exc:
        return failed(f"no answer: {type(exc).__name__}: {exc}"[:300])
    if error is not None:
        return ProbeResult(spec.prompt, spec.expect, answer, False, error, latency_s)
    verdict, reason = judge_answer(answer, spec.expect, tokens)
    return ProbeResult(
        spec.prompt, spec.expect, answer, verdict != "failed", reason, latency_s, verdict, tokens
    )


def run_probe(
    base_url: str,
    model: str,
    spec: ProbeSpec,
    timeout_s: float = 120.0,
    headers: dict[str, str] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> ProbeResult:
    """Ask the probe question; raise RunCancelled as soon as ``should_stop`` says so, even
    while the server has not answered (a hung server must not hold a cancel up)."""
    if should_stop is None:
        return _ask(base_url, model, spec, timeout_s, headers)
    result: list[ProbeResult] = []
    # A daemon thread: on cancel it is left behind, and ends with the server it waits on.
    worker = threading.Thread(
        target=lambda: result.append(_ask(base_url, model, spec, timeout_s, headers)),
        name="servelab-probe",
        daemon=True,
    )
    worker.start()
    while worker.is_alive():
        worker.join(0.1)
        if worker.is_alive() and should_stop():
            raise RunCancelled("cancelled during the sanity probe")
    if not result:  # the thread died of a bug: say so rather than hang or crash
        return ProbeResult(spec.prompt, spec.expect, "", False, "the probe did not complete", 0.0)
    return result[0]
