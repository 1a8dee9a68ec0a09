"""THE four words (better / worse with its "alone" form) a difference between two arms is
read with: the Experiment card, its arm table and attribution, Compare (single runs too),
History, the CLI (``--json`` too), the HTML report and the exports all word a difference
through ``read_difference`` (and a family's ``demote``) only.

* **better / worse**: the interval lies beyond zero (the direction: ``core.metric_info``),
  and the contrast survives its family's correction (``core.analysis.family``);
  **better alone / worse alone** where the interval alone excludes zero but the family does
  not confirm it: never coloured, never in Regressions, with how many trials would confirm
  it at this noise at the level the family asks of each comparison (``demote``);
* **equivalent within ±M**: the whole interval lies inside ±M, the plan's
  ``equivalence_margin_pct`` (default 5 %) — never an A/A bound;
* **inconclusive**: an interval too wide for either (it holds zero and reaches past ±M),
  with how many trials would resolve ±X at this noise
  (``core.analysis.power.resolvable_effect`` at the per-trial spread the interval implies;
  X is the margin, or the change where that is larger);
* **unconfirmed**: no interval (one run per arm, fewer than 3 trials): never coloured,
  never in Regressions, whatever the size of the change.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Final, Literal

from core.analysis.power import resolvable_effect
from core.analysis.stats import MIN_TRIALS_FOR_CI, t_quantile
from core.experiments.design import DEFAULT_MARGIN, MAX_TRIALS
from core.metric_info import higher_is_better
from core.numbers import as_number, share_text

__all__ = [
    "BETTER",
    "BETTER_ALONE",
    "EQUIVALENT",
    "INCONCLUSIVE",
    "UNCONFIRMED",
    "WORDS",
    "WORSE",
    "WORSE_ALONE",
    "Reading",
    "Word",
    "demote",
    "margin_of",
    "margin_text",
    "read_difference",
    "trials_to_resolve",
]

BETTER: Final = "better"
WORSE: Final = "worse"
EQUIVALENT: Final = "equivalent"
INCONCLUSIVE: Final = "inconclusive"
UNCONFIRMED: Final = "unconfirmed"
BETTER_ALONE: Final = "better alone"
WORSE_ALONE: Final = "worse alone"
Word = Literal[
    "better", "worse", "equivalent", "inconclusive", "unconfirmed", "better alone", "worse alone"
]
WORDS: tuple[Word, ...] = (
    BETTER,
    WORSE,
    EQUIVALENT,
    INCONCLUSIVE,
    UNCONFIRMED,
    BETTER_ALONE,
    WORSE_ALONE,
)


@dataclass(frozen=True)
class Reading:
    """A difference read: its word, the margin it was read against and, when inconclusive,
    the trials that would resolve ±``resolve`` (None: more than ``MAX_TRIALS``); when better
    / worse alone, the family that did not confirm it (``why``), the per-comparison level
    that would (``need``) and the trials that would reach it at this noise (``trials``)."""

    word: Word
    margin: float = DEFAULT_MARGIN
    trials: int | None = None
    resolve: float | None = None
    why: str = ""  # better / worse alone: ``the family (Holm over 6 comparisons)``
    need: float | None = None  # better / worse alone: the level that confirms it

    @property
    def coloured(self) -> bool:
        """Only a confirmed better / worse is painted green / red."""
        return self.word in (BETTER, WORSE)

    def text(self) -> str:
        """``equivalent within ±5%``; ``inconclusive; about 12 trials would resolve ±12% at
        this noise``; ``better``."""
        if self.word == EQUIVALENT:
            return f"equivalent within ±{margin_text(self.margin)}"
        if self.word in (BETTER_ALONE, WORSE_ALONE):
            return self._alone_text()
        if self.word != INCONCLUSIVE:
            return self.word
        if self.resolve is None:
            return INCONCLUSIVE
        x = margin_text(self.resolve)
        if self.trials is None:
            return f"{INCONCLUSIVE}; more than {MAX_TRIALS} trials would be needed to resolve ±{x}"
        return f"{INCONCLUSIVE}; about {self.trials} trials would resolve ±{x} at this noise"

    def _alone_text(self) -> str:
        """``worse alone, not confirmed over the family (Holm over 6 comparisons); about 4
        trials would confirm it at this noise (at 99.2%, the per-comparison level that
        confirms it)``."""
        head = f"{self.word}, not confirmed over {self.why}"
        if self.need is None:
            return head
        level = f"at {share_text(self.need, 1)}, the per-comparison level that confirms it"
        if self.trials is None:
            return f"{head}; more than {MAX_TRIALS} trials would be needed to confirm it ({level})"
        return f"{head}; about {self.trials} trials would confirm it at this noise ({level})"


def margin_text(fraction: float) -> str:
    """``5%``, ``2.5%``: a margin as a reader sees it."""
    whole = abs(fraction * 100 - round(fraction * 100)) < 1e-9
    return share_text(fraction, 0 if whole else 1)


def margin_of(spec: Mapping[str, Any] | None) -> float:
    """The equivalence margin (a fraction) of an experiment's plan (``experiment.json``'s
    spec as a dict): its ``equivalence_margin_pct``, else the default ±5 %."""
    pct = as_number((spec or {}).get("equivalence_margin_pct"))
    return pct / 100 if pct is not None and 0 < pct < 100 else DEFAULT_MARGIN


def trials_to_resolve(
    sd_log: float, target: float, at_least: int = MIN_TRIALS_FOR_CI, level: float = 0.95
) -> int | None:
    """The fewest trials (from ``at_least``) whose paired ``level`` interval has a half-width
    of at most ``target`` at a per-trial log-ratio sd of ``sd_log``; None beyond MAX_TRIALS."""
    for n in range(max(at_least, MIN_TRIALS_FOR_CI), MAX_TRIALS + 1):
        effect = resolvable_effect(sd_log, n, level)
        if effect is not None and effect <= target:
            return n
    return None


def read_difference(
    metric: str,
    change: float | None,
    low: float | None,
    high: float | None,
    pairs: int,
    *,
    margin: float = DEFAULT_MARGIN,
    level: float = 0.95,
) -> Reading:
    """THE reading of a relative difference ``change`` of ``metric`` with its interval
    [``low``, ``high``] over ``pairs`` paired trials (``paired_log_ratio``) against the
    equivalence ``margin``. No interval: unconfirmed."""
    if change is None or low is None or high is None:
        return Reading(UNCONFIRMED, margin)
    if low > 0 or high < 0:
        up = low > 0
        return Reading(BETTER if up == higher_is_better(metric) else WORSE, margin)
    if -margin <= low and high <= margin:
        return Reading(EQUIVALENT, margin)
    resolve = max(margin, abs(change))
    sd_log = _sd_log(low, high, pairs, level)
    trials = None if sd_log is None else trials_to_resolve(sd_log, resolve, pairs + 1)
    return Reading(INCONCLUSIVE, margin, trials, resolve if sd_log is not None else None)


def demote(
    reading: Reading,
    family: str,
    need: float,
    interval: tuple[float, float, float],
    pairs: int,
    level: float = 0.95,
) -> Reading:
    """A better / worse its ``family`` (``the family (Holm over 6 comparisons)``) does not
    confirm reads better / worse alone: its interval (``interval``: change, low, high over
    ``pairs`` trials at ``level``) excludes zero, the family's correction does not. With it,
    the trials whose interval at ``need`` (the per-comparison level that confirms it whatever
    the rest of the family reads: 1 − α/m) would exclude zero at this noise, were the change
    what it is now. Any other reading is kept."""
    if not reading.coloured:
        return reading
    change, low, high = interval
    word: Word = BETTER_ALONE if reading.word == BETTER else WORSE_ALONE
    sd_log = _sd_log(low, high, pairs, level)
    if sd_log is None:
        return replace(reading, word=word, why=family)
    target = math.expm1(abs(math.log1p(change)))  # the change's size on the log scale
    trials = trials_to_resolve(sd_log, target, pairs + 1, need)
    return replace(reading, word=word, why=family, need=need, trials=trials)


def _sd_log(low: float, high: float, pairs: int, level: float) -> float | None:
    """The per-trial log-ratio sd an interval over ``pairs`` trials implies."""
    if pairs < MIN_TRIALS_FOR_CI or low <= -1:
        return None
    half = (math.log1p(high) - math.log1p(low)) / 2
    return half / t_quantile(1 - (1 - level) / 2, float(pairs - 1)) * math.sqrt(pairs)
