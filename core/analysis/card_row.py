"""One row of the summary card (``core.analysis.card``): one metric at one concurrency for
one arm against the baseline, its change, interval, word (``core.analysis.words``) and
family, and how a reader sees it (a sentence, a grid cell). The card builds the rows, the
family (``core.analysis.verdict_family``) corrects their words."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from core.analysis.stats import MIN_TRIALS_FOR_CI, NOT_TESTED
from core.analysis.words import (
    BETTER_ALONE,
    EQUIVALENT,
    INCONCLUSIVE,
    UNCONFIRMED,
    WORSE_ALONE,
    Reading,
)
from core.metric_info import metrics_for
from core.metrics import metric_name, metric_unit
from core.numbers import pct_interval_text, pct_number, pct_text, share_text, signed_text

__all__ = ["CARD_METRICS", "COST", "MEMORY_METRICS", "CardRow", "CardVerdict", "Family"]

# The words of core.analysis.words; besides them "not tested by this workload": the arm
# differs from the baseline only in a knob whose resource the workload never reached
# (core.analysis.knob_checks), so its change is no finding; and "cost": what a knob under
# test is meant to consume (KnobSpec.meant_cost), its price, not a regression.
CardVerdict = Literal[
    "better",
    "worse",
    "equivalent",
    "inconclusive",
    "unconfirmed",
    "better alone",
    "worse alone",
    "not tested by this workload",
    "cost",
]
COST: Literal["cost"] = "cost"
Family = Literal["confirmatory", "exploratory"]

# The card's metrics, in order (core.metric_info: their words, units and directions)
CARD_METRICS = metrics_for("card")
MEMORY_METRICS = ("peak_gpu_mib", "headroom_gb", "kv_cache_tokens")


_MARK = {
    "better": "▲",
    "worse": "▼",
    EQUIVALENT: "≈",
    INCONCLUSIVE: "?",
    UNCONFIRMED: "·",
    BETTER_ALONE: "△",
    WORSE_ALONE: "▽",
    NOT_TESTED: "n/t",
    COST: "cost",
}


@dataclass(frozen=True)
class CardRow:
    """One metric at one concurrency (None: a whole-run fact such as the KV pool) for one
    arm against the baseline."""

    metric: str
    concurrency: int | None
    point: str
    arm: str
    baseline: str
    base_mean: float | None
    mean: float | None
    change: float | None  # relative, paired by trial (core.analysis.stats.paired_log_ratio)
    low: float | None
    high: float | None
    n: int
    n_base: int
    verdict: CardVerdict
    confirmed: bool  # an interval backs the reading
    level: float = 0.95  # the interval's coverage (trials: auto: the adjusted level)
    reading: Reading = field(default_factory=lambda: Reading(UNCONFIRMED))
    family: Family = "exploratory"  # confirmatory: a knob × headline metric at the headline

    @property
    def name(self) -> str:
        return metric_name(self.metric)

    @property
    def unit(self) -> str:
        return metric_unit(self.metric)

    @property
    def where(self) -> str:
        return "at start-up" if self.concurrency is None else f"at c={self.concurrency}"

    def change_text(self) -> str:
        """``+44% (95% CI +3…+84%)``; memory also in its own unit (``+306 MiB``)."""
        if self.change is None:
            return "n/a"
        text = pct_text(self.change)
        if self.metric in MEMORY_METRICS and self.mean is not None and self.base_mean is not None:
            text = f"{signed_text(self.mean - self.base_mean, self.unit)} ({text})"
        if self.low is not None and self.high is not None:
            ci = "95% CI" if self.level == 0.95 else f"{share_text(self.level, 1)} CI"
            text += f" ({ci} {pct_interval_text(self.low, self.high)})"
        elif self.n < MIN_TRIALS_FOR_CI or self.n_base < MIN_TRIALS_FOR_CI:
            text += f" (no interval: {min(self.n, self.n_base)} run(s) per arm)"
        return text

    def cell_text(self) -> str:
        """The change for a grid cell, short: ``+44% [+1, +105] ▼``."""
        if self.change is None:
            return "n/a"
        text = pct_text(self.change, decimals=None)
        if self.metric in MEMORY_METRICS and self.mean is not None and self.base_mean is not None:
            text = f"{signed_text(self.mean - self.base_mean, self.unit)} ({text})"
        if self.low is not None and self.high is not None:
            low, high = (pct_number(x, decimals=None) for x in (self.low, self.high))
            text += f" [{low}, {high}]"
        return f"{text} {_MARK[self.verdict]}"

    def word_text(self) -> str:
        """The row's word in full: ``inconclusive; about 6 trials would resolve ±5% at this
        noise``, ``equivalent within ±5%``, ``cost``."""
        if self.verdict in (NOT_TESTED, COST):
            return self.verdict
        return self.reading.text()

    def sentence(self) -> str:
        """A regression or gain in words, e.g. ``median TTFT at c=64 is 44% worse with
        graphs on than graphs off (95% CI +3.5…+84%)``."""
        if self.change is None:
            return f"{self.name} {self.where}: unknown"
        return (
            f"{self.name} {self.where}: {self.change_text()} with {self.arm} vs "
            f"{self.baseline}, {self.word_text()}"
        )
