"""Multiplicity: which of many intervals may be called a finding.

A card holds dozens of contrasts (arms × metrics × concurrencies); at 95 % each, an
experiment where nothing changes still reads better or worse somewhere most of the time.
The verdict therefore declares a family: the confirmatory contrasts (each knob × each
headline metric at the headline point) keep the family-wise error at ``ALPHA`` by Holm's
step-down rule; every other cell is exploratory and is called better / worse only where it
survives Benjamini–Hochberg at ``ALPHA`` (a false-discovery rate). Pure functions: the card
(``core.analysis.card``) and the simulation (bench/sim_verdicts.py) call the same ones.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from core.analysis.stats import t_quantile

__all__ = [
    "ALPHA",
    "benjamini_hochberg",
    "bh_name",
    "holm",
    "holm_name",
    "p_from_interval",
]

ALPHA = 0.05  # the family-wise error (Holm) and the false-discovery rate (BH)


def holm(p_values: Sequence[float], alpha: float = ALPHA) -> list[bool]:
    """Holm's step-down rule: which hypotheses are rejected with the family-wise error
    kept at ``alpha`` (sorted p-values, the k-th from 0 against alpha / (m − k), stopping
    at the first that fails). A NaN p-value is never rejected."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: _sortable(p_values[i]))
    out = [False] * m
    for k, i in enumerate(order):
        if not p_values[i] <= alpha / (m - k):  # NaN fails too
            break
        out[i] = True
    return out


def benjamini_hochberg(p_values: Sequence[float], q: float = ALPHA) -> list[bool]:
    """Benjamini–Hochberg: reject the k smallest p-values, k the largest with
    p_(k) ≤ k·q/m (the false-discovery rate kept at ``q``). A NaN is never rejected."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: _sortable(p_values[i]))
    cut = 0
    for k, i in enumerate(order, start=1):
        if p_values[i] <= k * q / m:
            cut = k
    out = [False] * m
    for i in order[:cut]:
        out[i] = True
    return out


def holm_name(m: int) -> str:
    """How the verdict names its family: ``Holm over 6 comparisons``."""
    return f"Holm over {m} comparison{'s' if m != 1 else ''}"


def bh_name(m: int) -> str:
    """How the verdict names the exploratory cells' rule: ``Benjamini–Hochberg over 22 cells``."""
    return f"Benjamini–Hochberg over {m} cell{'s' if m != 1 else ''}"


def p_from_interval(
    change: float, low: float, high: float, pairs: int, level: float = 0.95
) -> float:
    """The two-sided p-value of "no change" behind a paired log-ratio interval
    (``core.analysis.stats.paired_log_ratio``: mean log-ratio ± t(level, pairs − 1) · se,
    mapped back): se recovered from the interval's half-width on the log scale. 1.0 when the
    interval has no width and covers 0; 0.0 when it has no width and excludes it."""
    d = math.log1p(change)
    half = (math.log1p(high) - math.log1p(low)) / 2
    if half <= 0:
        return 1.0 if d == 0 else 0.0
    df = float(max(pairs - 1, 1))
    se = half / t_quantile(1 - (1 - level) / 2, df)
    return 2 * _t_sf(abs(d) / se, df)


def _t_sf(t: float, df: float) -> float:
    # scipy.stats is imported here only: it takes seconds on a 2-core host
    from scipy import stats as sps

    return float(sps.t.sf(t, df))


def _sortable(p: float) -> float:
    return math.inf if math.isnan(p) else p
