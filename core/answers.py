"""THE rule for a sanity probe's answer: what it says about the server. The live probe
(core/run/probe.py) judges with it, and the Run page and the CLI read a stored
``probe.json`` with it, so a folder written before a check existed is read by today's rule.

Three verdicts: ``failed`` (empty, numerically broken, or not the expected pattern: the run
stops as invalid), ``warning`` (an answer, but a degenerate one: one short unit repeated,
``'messagemessagemessage…'``; the server runs, yet its output is no language, which a tiny
or mis-templated model gives: the run goes on and says so) and ``passed``."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

__all__ = ["ProbeVerdict", "degenerate_reason", "judge_answer", "probe_verdict"]

ProbeVerdict = Literal["passed", "warning", "failed"]

# Text that only a numerically broken model produces.
_GARBAGE = re.compile(r"(?i)\bnan\b|\ufffd|^[\W_]+$")
# A unit this long or shorter, repeated at least this often, is no answer.
_MAX_UNIT_CHARS = 16
_MIN_REPEATS = 3


def degenerate_reason(answer: str) -> str | None:
    """Why ``answer`` is degenerate (None when it is not): empty, only whitespace or
    punctuation, or one short unit over and over (``messagemessagemes``: the last repeat
    may be cut by max_tokens)."""
    text = answer.strip()
    if not text:
        return "empty answer"
    if re.fullmatch(r"[\W_]+", text):
        return f"only punctuation or symbols: {text[:40]!r}"
    squeezed = re.sub(r"\s+", " ", text)
    for size in range(1, _MAX_UNIT_CHARS + 1):
        # two whole units and part of a third at least ("Lyon Lyon Lyon" has no last space)
        if len(squeezed) <= (_MIN_REPEATS - 1) * size:
            break
        unit = squeezed[:size]
        if (unit * (len(squeezed) // size + 1))[: len(squeezed)] == squeezed:
            return (
                f"degenerate answer: {unit.strip()!r} repeated "
                f"{round(len(squeezed) / size)} times, not language"
            )
    return None


def judge_answer(
    answer: str, expect: str | None, output_tokens: int | None = None
) -> tuple[ProbeVerdict, str]:
    """(verdict, reason in words) of one probe answer; ``output_tokens`` is the server's own
    count of what it generated (None: not reported)."""
    text = answer.strip()
    if not text and expect is None and output_tokens:
        # The server decoded, but no token reads as text: special tokens, or ids beyond the
        # tokenizer's vocabulary (a dummy-weight shape served with a smaller tokenizer).
        return "warning", (
            f"no text, but the server generated {output_tokens} tokens (ids its tokenizer "
            "shows as nothing: special tokens, or ids beyond its vocabulary)"
        )
    if not text:
        return "failed", "empty answer"
    if expect is None:
        if _GARBAGE.search(text):
            return "failed", f"answer looks numerically broken: {text[:80]!r}"
        if why := degenerate_reason(text):
            return "warning", why
        return "passed", "non-empty answer (no pattern expected)"
    if re.search(expect, text):
        if why := degenerate_reason(text):
            return "warning", f"answer matches /{expect}/, but {why}"
        return "passed", f"answer matches /{expect}/"
    return "failed", f"answer {text[:80]!r} does not match /{expect}/"


def probe_verdict(probe: Mapping[str, Any]) -> tuple[ProbeVerdict, str]:
    """A stored probe (``probe.json``) by today's rule: a failed probe stays failed with its
    own reason (an HTTP error has no answer to judge); a passed one is judged again."""
    if not probe.get("passed"):
        return "failed", str(probe.get("reason") or "failed")
    return judge_answer(
        str(probe.get("answer") or ""), probe.get("expect"), probe.get("output_tokens")
    )
