"""THE sanity-answer rule (core/answers.py): a degenerate answer never passes green, and a
stored probe is read by today's rule."""

from __future__ import annotations

import pytest

from core.answers import degenerate_reason, judge_answer, probe_verdict


@pytest.mark.parametrize(
    "answer, why",
    [
        ("messagemessagemessagemessagemes", "'message' repeated 4 times"),  # cut by max_tokens
        ("Lyon Lyon Lyon", "'Lyon' repeated 3 times"),
        ("ha ha ha ha", "'ha' repeated 4 times"),
        ("   \n ", "empty answer"),
        ("?!...", "only punctuation"),
    ],
)
def test_repetition_whitespace_and_punctuation_are_degenerate(answer: str, why: str) -> None:
    assert why in (degenerate_reason(answer) or "")


@pytest.mark.parametrize("answer", ["Paris", "Paris Paris", "The capital of France is Paris.", "2"])
def test_a_short_or_repeated_once_answer_is_language(answer: str) -> None:
    assert degenerate_reason(answer) is None
    assert judge_answer(answer, None)[0] == "passed"


def test_verdicts_fail_warn_and_pass() -> None:
    assert judge_answer("", None) == ("failed", "empty answer")
    assert judge_answer("", None, 0) == ("failed", "empty answer")
    assert judge_answer("", "(?i)paris", 16)[0] == "failed"  # a pattern needs text
    assert judge_answer("", None, 16)[0] == "warning"  # tokens that read as no text
    assert judge_answer("nan nan", None)[0] == "failed"  # numerically broken stays a failure
    assert judge_answer("Berlin", "(?i)paris")[0] == "failed"
    verdict, why = judge_answer("Paris Paris Paris Paris", "(?i)paris")
    assert verdict == "warning" and why.startswith("answer matches /(?i)paris/, but degenerate")


def test_a_stored_probe_that_passed_before_the_rule_is_read_by_it() -> None:
    """The shipped CPU demo's probe.json says passed; today it reads as a warning."""
    old = {
        "prompt": "What is the capital of France? Answer in one word.",
        "expect": None,
        "answer": "message" * 16,
        "passed": True,
        "reason": "non-empty answer (no pattern expected)",
    }
    verdict, why = probe_verdict(old)
    assert verdict == "warning" and "'message' repeated 16 times" in why
    failed = {**old, "passed": False, "answer": "", "reason": "HTTP 500: boom"}
    assert probe_verdict(failed) == ("failed", "HTTP 500: boom")
