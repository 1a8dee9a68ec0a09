"""The sanity probe: one question before any load, so a broken server (wrong
weights, NaN logits, a chat template gone wrong) is caught before it is measured."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import httpx

from core.config import ProbeSpec
from core.errors import RunCancelled

__all__ = ["ProbeResult", "judge_answer", "run_probe"]

# Text that only a numerically broken model produces.
_GARBAGE = re.compile(r"(?i)\bnan\b|\ufffd|^[\W_]+$")


@dataclass(frozen=True)
class ProbeResult:
    prompt: str
    expect: str | None
    answer: str
    passed: bool
    reason: str
    latency_s: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def judge_answer(answer: str, expect: str | None) -> tuple[bool, str]:
    """(passed, reason in words)."""
    text = answer.strip()
    if not text:
        return False, "empty answer"
    if expect is None:
        if _GARBAGE.search(text):
            return False, f"answer looks numerically broken: {text[:80]!r}"
        return True, "non-empty answer (no pattern expected)"
    if re.search(expect, text):
        return True, f"answer matches /{expect}/"
    return False, f"answer {text[:80]!r} does not match /{expect}/"


_MAX_ANSWER_CHARS = 4000  # a probe answer is a few words; more is not read


def _content(message: Any) -> str:
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, str) else ""


def _read_stream(resp: httpx.Response, expect: str | None) -> tuple[str, bool]:
    """(answer, stopped early): the streamed text, read until the expected pattern shows
    (nothing after it can change the verdict) or the stream ends."""
    answer = ""
    for line in resp.iter_lines():
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            break
        try:
            choices = json.loads(data).get("choices") or [{}]
            answer += _content(choices[0].get("delta"))
        except (ValueError, AttributeError, TypeError, LookupError, RecursionError):
            continue  # one odd event does not end the answer
        if expect is not None and re.search(expect, answer):
            return answer, True
        if len(answer) > _MAX_ANSWER_CHARS:
            break
    return answer, False


def _ask(
    base_url: str, model: str, spec: ProbeSpec, timeout_s: float, headers: dict[str, str] | None
) -> ProbeResult:
    """One streamed question. The answer is bounded by ``max_tokens`` and read only until
    it matches ``expect``: on a slow engine (a CPU decodes a token in tenths of a second
    to seconds) the probe costs the tokens up to the answer, not the whole reply."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": spec.prompt}],
        "max_tokens": spec.max_tokens,
        "temperature": 0.0,
        "stream": True,
    }
    t = time.perf_counter()
    try:
        with httpx.stream(
            "POST", f"{base_url}/v1/chat/completions", json=body, timeout=timeout_s, headers=headers
        ) as resp:
            if resp.status_code != 200:
                resp.read()
                return ProbeResult(
                    spec.prompt,
                    spec.expect,
                    "",
                    False,
                    f"HTTP {resp.status_code}: {resp.text[:200]}",
                    time.perf_counter() - t,
                )
            if "text/event-stream" in resp.headers.get("content-type", ""):
                answer, _early = _read_stream(resp, spec.expect)
                latency_s = time.perf_counter() - t
            else:  # a server that answers in one piece although asked to stream
                resp.read()
                latency_s = time.perf_counter() - t
                choices = resp.json().get("choices") or [{}]
                answer = _content(choices[0].get("message"))
    except (httpx.HTTPError, ValueError) as exc:
        return ProbeResult(
            spec.prompt,
            spec.expect,
            "",
            False,
            f"no answer: {type(exc).__name__}: {exc}"[:300],
            time.perf_counter() - t,
        )
    except (AttributeError, TypeError, LookupError, RecursionError):
        return ProbeResult(
            spec.prompt,
            spec.expect,
            "",
            False,
            f"not a chat completion: {resp.text[:200]!r}",
            latency_s,
        )
    passed, reason = judge_answer(answer, spec.expect)
    return ProbeResult(spec.prompt, spec.expect, answer, passed, reason, latency_s)


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
