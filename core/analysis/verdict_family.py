"""The verdict's declared family over the card's rows (``core.analysis.card_row``): which
contrasts are confirmatory (each knob's own arm × each headline metric at the headline
point), the correction that decides which better / worse stand (Holm over the
confirmatory contrasts, Benjamini–Hochberg over the exploratory cells: the pure rules of
``core.analysis.family``; what the others read: ``core.analysis.words.demote``), and the
family and its regressions in words."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from core.analysis.card_row import CARD_METRICS, COST, MEMORY_METRICS, CardRow
from core.analysis.family import (
    ALPHA,
    benjamini_hochberg,
    bh_name,
    holm,
    holm_name,
    p_from_interval,
)
from core.analysis.knob_checks import single_knob_arms
from core.analysis.runs import RunView
from core.analysis.stats import MIN_TRIALS_FOR_CI, NOT_TESTED
from core.analysis.words import WORSE_ALONE, demote
from core.numbers import pct_text, signed_text

__all__ = [
    "confirmatory_arms",
    "declare_family",
    "family_line",
    "no_interval_text",
    "regression_lines",
    "regressions",
    "regressions_paragraph",
    "too_few_trials_text",
    "worse_alone_lines",
]


def confirmatory_arms(arms: Mapping[str, Sequence[RunView]], baseline: str) -> list[str]:
    """The arms whose contrasts with the baseline are confirmatory: each knob's own arm
    (the one differing from the baseline in that knob alone); where no arm does, every arm
    (an A/A, arms that differ in several fields)."""
    alone = single_knob_arms(arms, baseline)
    return list(alone) if alone else [a for a in arms if a != baseline]


def declare_family(rows: Sequence[CardRow]) -> list[CardRow]:
    """The family's correction: a confirmatory better / worse stands only where Holm over
    the confirmatory contrasts rejects "no change"; an exploratory one only where
    Benjamini–Hochberg over the exploratory cells does; the others read inconclusive,
    naming the rule. Costs and unconfirmed rows take no part."""
    out = list(rows)
    for family in ("confirmatory", "exploratory"):
        idx = [
            i
            for i, r in enumerate(out)
            if r.family == family and r.verdict != COST and r.verdict != NOT_TESTED
        ]
        tested = [i for i in idx if out[i].low is not None and out[i].high is not None]
        p = [_p_value(out[i]) for i in tested]
        if family == "confirmatory":
            keep, why = holm(p), f"the family ({holm_name(len(idx))})"
        else:
            keep, why = benjamini_hochberg(p), f"the exploratory cells ({bh_name(len(idx))})"
        need = 1 - ALPHA / max(len(idx), 1)  # Bonferroni: confirms it whatever the rest read
        for i, ok in zip(tested, keep, strict=True):
            if not ok and out[i].reading.coloured:
                r = out[i]
                assert r.change is not None and r.low is not None and r.high is not None
                interval = (r.change, r.low, r.high)
                reading = demote(r.reading, why, need, interval, min(r.n, r.n_base), r.level)
                out[i] = replace(r, reading=reading, verdict=reading.word)
    return out


def _p_value(row: CardRow) -> float:
    assert row.change is not None and row.low is not None and row.high is not None
    return p_from_interval(row.change, row.low, row.high, min(row.n, row.n_base), row.level)


def regressions(rows: Sequence[CardRow], confirmed_only: bool = True) -> list[CardRow]:
    """The confirmatory rows that read worse after the family's correction (Holm), by metric
    and then by the size of the change; never a cost, never an unconfirmed change.
    ``confirmed_only`` is kept for callers: an unconfirmed row never reads worse."""
    del confirmed_only
    return _by_metric([r for r in rows if r.verdict == "worse" and r.family == "confirmatory"])


def _by_metric(rows: Sequence[CardRow]) -> list[CardRow]:
    """In the card's metric order, then the largest change first."""
    return sorted(rows, key=lambda r: (list(CARD_METRICS).index(r.metric), -abs(r.change or 0.0)))


def worse_alone_lines(rows: Sequence[CardRow]) -> list[str]:
    """The confirmatory contrasts that read worse alone (their own interval excludes zero,
    Holm over the family does not confirm it), one sentence each with the trials that would
    confirm it: what a summary without Regressions must still name, so that "no regression"
    never reads as "nothing moved" (docs/METRICS.md gives the A/A rate of such a note)."""
    worse = [r for r in rows if r.verdict == WORSE_ALONE and r.family == "confirmatory"]
    return [r.sentence() for r in _by_metric(worse)]


def no_interval_text(rows: Sequence[CardRow]) -> str:
    """Why no cell of a card is confirmed, in the runs' own count: one run per arm, or
    trials fewer than an interval needs (two trials are not "one run")."""
    trials = max((min(r.n, r.n_base) for r in rows if r.change is not None), default=1)
    never = "every difference reads unconfirmed — never better or worse, never a regression."
    if trials <= 1:
        return (
            f"One run per arm: no interval, so {never} Run trials (an experiment) to confirm one."
        )
    more = MIN_TRIALS_FOR_CI - trials
    return (
        f"{too_few_trials_text(trials, ' per arm')}: {never}"
        f" {more} more trial{'s' if more > 1 else ''} would give one."
    )


def too_few_trials_text(trials: int, per: str = "") -> str:
    """ "2 trials, fewer than the 3 an interval needs" (``per``: " per arm" after "trials"):
    why a contrast has no interval."""
    return f"{trials} trials{per}, fewer than the {MIN_TRIALS_FOR_CI} an interval needs"


def regression_lines(rows: Sequence[CardRow]) -> list[str]:
    """The regressions in words (``regressions``: confirmatory, confirmed by Holm); one line
    per arm and metric (a metric worse at several concurrencies is one line naming them)."""
    groups: dict[tuple[str, str], list[CardRow]] = {}
    for r in regressions(rows):
        groups.setdefault((r.arm, r.metric), []).append(r)
    lines = []
    for (_, _), group in groups.items():
        if len(group) == 1:
            lines.append(group[0].sentence())
            continue
        first = group[0]
        group = sorted(group, key=lambda r: (r.concurrency is None, r.concurrency or 0))
        changes = sorted(r.change or 0.0 for r in group)
        low, high = pct_text(changes[0]), pct_text(changes[-1])
        span = low if low == high else f"{low} to {high}"
        if first.metric in MEMORY_METRICS:
            diffs = sorted((r.mean or 0.0) - (r.base_mean or 0.0) for r in group)
            span = f"{signed_text(diffs[0])} to {signed_text(diffs[-1], first.unit)} ({span})"
        where = ", ".join(str(r.concurrency) for r in group)
        lines.append(
            f"{first.name} at c={where}: {span} with {first.arm} vs {first.baseline}, worse"
        )
    return lines


def regressions_paragraph(card: Sequence[CardRow]) -> list[str]:
    """The verdict's regressions paragraph (none without a regression), naming its family
    (``Regressions (Holm over 6 comparisons): …``): a paragraph of its own before the
    contrasts, on Compare and on the Experiment page alike."""
    regs = regression_lines(card)
    m = sum(r.family == "confirmatory" for r in card)
    return [f"Regressions ({holm_name(m)}): " + "; ".join(regs) + "."] if regs else []


def family_line(card: Sequence[CardRow]) -> str | None:
    """The declared family in words: ``Confirmatory: output throughput, median TTFT, median
    ITL at c=64 for graphs on — Holm over 3 comparisons; the other 40 cells are exploratory,
    coloured only where Benjamini–Hochberg confirms them.`` None without one."""
    conf = [r for r in card if r.family == "confirmatory"]
    if not any(r.confirmed for r in conf):  # one run per arm: nothing to control
        return None
    names = ", ".join(dict.fromkeys(r.name for r in conf))
    arms = ", ".join(dict.fromkeys(r.arm for r in conf))
    rest = sum(r.family == "exploratory" and r.verdict != COST for r in card)
    costs = sum(r.verdict == COST for r in card)
    are = "cells are" if costs != 1 else "cell is"
    tail = f"; {costs} {are} a knob's intended cost, never a regression" if costs else ""
    return (
        f"Confirmatory: {names} at {conf[0].point} for {arms} — {holm_name(len(conf))}; the "
        f"other {rest} cells are exploratory, coloured only where Benjamini–Hochberg confirms "
        f"them{tail}."
    )
