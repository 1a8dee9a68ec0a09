"""The stop rule of an adaptive experiment (``trials: auto``): after each complete trial,
is every headline contrast decided?

A headline contrast is one arm against the baseline on one headline metric
(``core.metrics.VERDICT_METRICS``) at the headline point (``core.analysis.roles.
headline_point``), estimated by THE estimator of a difference between arms
(``core.analysis.stats.paired_log_ratio``). Its interval decides it: **better / worse**
when it excludes 0, else **equivalent** when it lies inside ±margin, else **undecided**.

Looking after every trial and stopping when the interval looks good would make an
ordinary 95% interval miss far more than 5% of the time. The intervals here are valid under
the repeated looks by **Bonferroni alpha spending**: an experiment looks at most
K = max_trials − min_trials + 1 times (once per trial count from min_trials to
max_trials), and each look's interval is the paired t interval at level 1 − α/K. By the
union bound, the chance that ANY look's interval misses the true change is at most α,
whatever the stopping time (Bonferroni; the simplest alpha-spending function, cf. Lan &
DeMets 1983, "Discrete sequential boundaries for clinical trials", Biometrika 70(3)). It is
conservative (the looks are correlated), and valid for every contrast on its own; over m
contrasts a "better/worse" error on any of them is at most m·α. docs/METRICS.md says
the same. Pure: no I/O; the controller (``core.launch.adaptive``) reads and writes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from core.analysis.points import point_key
from core.analysis.roles import headline_point
from core.analysis.stats import RunOfArm, paired_log_ratio
from core.experiments.design import ExperimentSpec
from core.experiments.records import AdaptiveState, ContrastLook, Decision, ExperimentRecord
from core.metric_info import higher_is_better
from core.metrics import VERDICT_METRICS, as_number

__all__ = [
    "ALPHA",
    "Contrast",
    "Decision",
    "decide",
    "headline_contrasts",
    "look_level",
    "margins_for",
    "open_text",
    "planned_looks",
    "progress_text",
    "undecided",
]

ALPHA = 0.05


def planned_looks(min_trials: int, max_trials: int) -> int:
    """K: one look per trial count from min_trials to max_trials."""
    return max(max_trials - min_trials + 1, 1)


def look_level(min_trials: int, max_trials: int, alpha: float = ALPHA) -> float:
    """Each look's interval level, 1 − α/K (K = ``planned_looks``): 0.99375 for 3…10."""
    return 1 - alpha / planned_looks(min_trials, max_trials)


def decide(
    metric: str, rel: float | None, low: float | None, high: float | None, margin: float
) -> Decision:
    """better / worse (the interval excludes 0, by the metric's direction), equivalent
    (inside ±margin), else undecided. An interval that excludes 0 is a difference even when
    it is inside the margin: calling it "equivalent" would hide a detected change."""
    if rel is None or low is None or high is None:
        return "undecided"
    if low > 0 or high < 0:
        return "better" if (low > 0) == higher_is_better(metric) else "worse"
    if -margin < low and high < margin:
        return "equivalent"
    return "undecided"


def margins_for(
    given: Mapping[str, float], floor: Mapping[str, object] | None, default: float
) -> dict[str, float]:
    """Per headline metric, the equivalence margin: the spec's, else the host's A/A noise
    floor for that metric (``core.analysis.trials.noise_floor``), else ``default``."""
    out = {}
    for metric in VERDICT_METRICS:
        noise = as_number((floor or {}).get(metric))
        out[metric] = given.get(metric) or (noise if noise else default)
    return out


@dataclass(frozen=True)
class Contrast:
    """A headline contrast's trial → value of both sides, at the headline point."""

    arm: str
    metric: str
    point: str
    arm_values: dict[int, float]
    base_values: dict[int, float]


def _contrasts(runs: Sequence[RunOfArm], baseline: str) -> list[Contrast]:
    ok = [r for r in runs if r.view.status.state == "succeeded"]
    head = headline_point([r.view for r in ok]) if ok else None
    if head is None:
        return []
    values: dict[tuple[str, str], dict[int, float]] = {}
    for r in ok:
        summary = next((s for s in r.view.points if point_key(s) == head.key), None)
        for m in VERDICT_METRICS:
            v = as_number(((summary or {}).get("metrics") or {}).get(m))
            if v is not None:  # a trial's first value (a re-queued arm: the one that ran)
                values.setdefault((r.arm, m), {}).setdefault(r.trial, v)
    arms = list(dict.fromkeys(r.arm for r in runs))
    return [
        Contrast(arm, m, head.label, values.get((arm, m), {}), values.get((baseline, m), {}))
        for arm in arms
        if arm != baseline
        for m in VERDICT_METRICS
    ]


def headline_contrasts(
    runs: Sequence[RunOfArm],
    baseline: str,
    margins: Mapping[str, float],
    level: float,
    names: Mapping[str, str] | None = None,
) -> list[ContrastLook]:
    """One look: every headline contrast's estimate, interval at ``level`` and decision.
    ``names``: metric → words ("median TTFT") for ``what``. Empty when the runs share no
    load point (nothing to decide)."""
    found = _contrasts(runs, baseline)
    several = len({c.arm for c in found}) > 1
    out = []
    for c in found:
        rel, low, high = paired_log_ratio(c.arm_values, c.base_values, level)
        margin = margins.get(c.metric, 0.05)
        what = f"{(names or {}).get(c.metric, c.metric)} at {c.point}"
        out.append(
            ContrastLook(
                arm=c.arm,
                metric=c.metric,
                point=c.point,
                rel=rel,
                low=low,
                high=high,
                margin=margin,
                decision=decide(c.metric, rel, low, high, margin),
                what=f"{c.arm}: {what}" if several else what,
            )
        )
    return out


def undecided(contrasts: Sequence[ContrastLook]) -> list[ContrastLook]:
    return [c for c in contrasts if c.decision == "undecided"]


def open_text(contrasts: Sequence[ContrastLook]) -> str:
    """The open contrasts in words, one group per arm and point: "output throughput, median
    TTFT at c=640 …" rather than the point's label once per metric."""
    groups: dict[str, list[str]] = {}
    for c in contrasts:
        head, _, point = c.what.partition(" at ")
        arm, sep, name = head.rpartition(": ")
        groups.setdefault(f"{arm}{sep}\0{point}", []).append(name)
    parts = []
    for key, names in groups.items():
        prefix, _, point = key.partition("\0")
        parts.append(f"{prefix}{', '.join(names)} at {point}")
    return "; ".join(parts)


def progress_text(record: ExperimentRecord) -> str | None:
    """What the pages and the CLI say about an adaptive experiment: why it stopped, or
    while it runs "trial k of at most N; undecided: …" (the last look's open contrasts).
    None for a fixed number of trials."""
    if not record.is_adaptive:
        return None
    state = record.adaptive or AdaptiveState()
    if state.stop is not None:
        return state.stop.text
    spec, defaults = record.spec, ExperimentSpec.model_fields
    most = spec.get("max_trials", defaults["max_trials"].default)
    trial = 1 + max((r.trial for r in record.runs), default=0)
    text = f"trial {trial} of at most {most}"
    if state.looks:
        open_ = undecided(state.looks[-1].contrasts)
        text += "; undecided: " + (open_text(open_) if open_ else "none")
    else:
        first = spec.get("min_trials", defaults["min_trials"].default)
        text += f"; the first look after {first} complete trials"
    return text
