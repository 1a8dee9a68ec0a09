"""The answers check as tables (core/analysis/same_answers.py computes; this only words
it): one row per arm (outcome, identical prompts, |Δ logprob|, the known-answer count) for
the first screen and the exports, and one row per prompt (baseline vs arm tokens, the first
divergence marked) for the per-prompt view."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd

from core.analysis.same_answers import AnswersVerdict, PairDiff, correct_words, measured_pairs
from core.numbers import EMPTY, number_text, token_span_text

__all__ = ["OUTCOME_WORDS", "answers_frame", "mark_divergence", "prompt_frame"]

OUTCOME_WORDS = {
    "same": "same answers",
    "differs": "differs (numerics changed)",
    "broken": "broken",
    "unchecked": "not checked",
}
_SHOWN_TOKENS = 24  # tokens shown per answer in the per-prompt view


def _pair_cells(pair: PairDiff | None) -> dict[str, str]:
    if pair is None:
        keys = ("identical", "|Δ logprob| median", "|Δ logprob| max", "measured")
        return dict.fromkeys(keys, EMPTY)
    return {
        "identical": f"{pair.identical}/{len(pair.prompts)}",
        "|Δ logprob| median": number_text(pair.forced_median),
        "|Δ logprob| max": number_text(pair.forced_max),
        "measured": pair.forced_kind or EMPTY,
    }


def _thresholds(v: AnswersVerdict) -> str:
    t = v.thresholds
    if t is None:
        return EMPTY
    return f"median ≤ {number_text(t.median)}, max ≤ {number_text(t.max)} ({t.source})"


def _worst_pair(v: AnswersVerdict) -> PairDiff | None:
    """The run shown: of those whose |Δ| the verdict reads (teacher-forced first), the one
    with the fewest identical prompts."""
    shown = measured_pairs(v.pairs) or list(v.pairs)
    return min(shown, key=lambda p: p.identical) if shown else None


def answers_frame(answers: Mapping[str, AnswersVerdict]) -> pd.DataFrame:
    """One row per arm: its outcome and the numbers behind it (its least identical run)."""
    rows = []
    for v in answers.values():
        rows.append(
            {
                "arm": v.arm,
                "answers": OUTCOME_WORDS[v.outcome],
                **_pair_cells(_worst_pair(v)),
                "correct": correct_words(v.correct, v.asked, v.base_correct) or EMPTY,
                "thresholds": _thresholds(v),
            }
        )
    return pd.DataFrame(rows)


def mark_divergence(tokens: Sequence[str], at: int | None, limit: int = _SHOWN_TOKENS) -> str:
    """The tokens joined, the one at ``at`` (the first divergence) in ⟦ ⟧, cut at ``limit``."""
    shown = [f"⟦{t}⟧" if i == at else t for i, t in enumerate(tokens[:limit])]
    more = "…" if len(tokens) > limit else ""
    return "".join(shown).replace("\n", "⏎") + more


def _yes_no(value: bool | None) -> str:
    return EMPTY if value is None else ("yes" if value else "no")


def prompt_frame(verdict: AnswersVerdict) -> pd.DataFrame:
    """One row per prompt of the arm's least identical run: baseline vs arm tokens with the
    first divergence marked, whether the arm's token there was in the baseline's top-k, the
    teacher-forced |Δ| (median over the prompt's tokens) and anything wrong."""
    pair = _worst_pair(verdict)
    if pair is None:
        return pd.DataFrame()
    rows = []
    for p in pair.prompts:
        delta = sorted(p.forced_abs)[len(p.forced_abs) // 2] if p.forced_abs else None
        rows.append(
            {
                "prompt": p.index + 1,
                "first divergence": EMPTY
                if p.diverged_at is None
                else token_span_text(p.diverged_at),
                "in baseline top-k": _yes_no(p.in_top_k),
                "baseline": mark_divergence(p.base_tokens, p.diverged_at),
                verdict.arm: mark_divergence(p.arm_tokens, p.diverged_at),
                "|Δ logprob| median": number_text(delta),
                "correct (baseline / arm)": EMPTY
                if p.base_correct is None
                else f"{_yes_no(p.base_correct)} / {_yes_no(p.arm_correct)}",
                "problems": "; ".join(p.problems) or EMPTY,
            }
        )
    return pd.DataFrame(rows)
