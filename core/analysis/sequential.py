"""The stop rule of an adaptive experiment (``trials: auto``): a group-sequential design
over the headline contrasts.

A headline contrast is one arm against the baseline on one headline metric
(``core.metrics.VERDICT_METRICS``) at the headline point (``core.analysis.roles.
headline_point``), estimated by THE estimator of a difference between arms
(``core.analysis.stats.paired_log_ratio``). After each complete trial from min_trials on
(a look), each open contrast's interval at its look's nominal level decides it: **better /
worse** when it excludes 0, else **equivalent** when it lies inside ±margin (the plan's),
else it stays **undecided**. A decided contrast stays decided; the experiment stops when
every contrast is decided or at max_trials.

The error is controlled for the family, per experiment (docs/METRICS.md, "Adaptive
trials"):

* **over the looks**, an O'Brien–Fleming-type **error-spending** boundary (Lan & DeMets
  1983, Biometrika 70(3); the Kim–DeMets power family a·t^ρ, ρ = 6): a contrast holding
  level a may have spent a·t^6 by information fraction t = trials / max_trials; each
  look's nominal level is what the correlated looks leave to spend, calibrated on the
  paired t test itself (``nominal_levels``: 200,000 seeded no-effect paths, exact for
  normal log-ratios whatever their sd). Early looks decide only large effects; the last
  look keeps most of the fixed design's power;
* **over the contrasts**, a graphical weighted-Bonferroni procedure (Bretz et al. 2009,
  Stat Med 28(4); its group-sequential form: Maurer & Bretz 2013, Stat Biopharm Res 5(4)):
  the arms share α equally; within an arm the first headline metric (output throughput)
  holds ``PRIMARY_SHARE`` of it and the others the rest; a contrast found better/worse
  passes its level to its arm's open contrasts (then to the other arms'). The chance that
  any contrast of the experiment is called better/worse when nothing changed is at most α.

Pure: no I/O; the controller (``core.launch.adaptive``) reads and writes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from core.analysis.points import point_key
from core.analysis.roles import headline_point
from core.analysis.stats import RunOfArm, paired_log_ratio
from core.experiments.design import ExperimentSpec
from core.experiments.records import AdaptiveState, ContrastLook, Decision, ExperimentRecord
from core.metric_info import higher_is_better
from core.metrics import VERDICT_METRICS, as_number

__all__ = [
    "ALPHA",
    "PRIMARY_SHARE",
    "Contrast",
    "Decision",
    "decide",
    "headline_contrasts",
    "look_level",
    "margins_for",
    "nominal_levels",
    "open_text",
    "planned_looks",
    "progress_text",
    "shares",
    "undecided",
]

# The design's level per experiment: the chance that any headline contrast is called
# better/worse when nothing changed. 4.5 %, not 5 %: the boundary is calibrated by Monte
# Carlo and the three contrasts' shares add up, so the measured rate stays at most 5 %.
ALPHA = 0.045
# Within an arm, the share of its α the first headline metric (output throughput) holds;
# the other headline metrics share the rest until a contrast is decided and passes its own.
PRIMARY_SHARE = 0.95
_PATHS = 200_000  # Brownian paths behind the boundary (its level to about ±0.001)
_SEED = 35
SPENDING_RHO = 6  # the spending family's exponent (``_spent``)


def planned_looks(min_trials: int, max_trials: int) -> int:
    """K: one look per trial count from min_trials to max_trials."""
    return max(max_trials - min_trials + 1, 1)


def _spent(alpha: float, t: float) -> float:
    """The error a level-α contrast may have spent by information fraction t: the
    Kim–DeMets power family α·t^ρ (``SPENDING_RHO``), O'Brien–Fleming-like (ρ = 3 is close
    to it; a larger ρ keeps more for the last look)."""
    return alpha * min(t, 1.0) ** SPENDING_RHO


@lru_cache(maxsize=1)
def _null_p_values(min_trials: int, max_trials: int) -> np.ndarray:
    """Two-sided p values of the paired t test at every look of seeded no-effect paths
    (paths × looks). The t statistic is pivotal under normal per-trial log-ratios: its
    law does not depend on their sd, so one table calibrates every experiment."""
    from scipy import stats as sps

    rng = np.random.default_rng(_SEED)
    d = rng.standard_normal((_PATHS, max_trials))
    sums, squares = np.cumsum(d, axis=1), np.cumsum(d * d, axis=1)
    out = []
    for n in range(min_trials, max_trials + 1):
        mean = sums[:, n - 1] / n
        var = np.maximum((squares[:, n - 1] - n * mean * mean) / (n - 1), 1e-300)
        out.append(2 * sps.t.sf(np.abs(mean / np.sqrt(var / n)), n - 1))
    return np.array(out).T


@lru_cache(maxsize=256)
def _levels(alpha: float, min_trials: int, max_trials: int) -> tuple[float, ...]:
    p = _null_p_values(min_trials, max_trials)
    alive = np.ones(len(p), dtype=bool)
    crossed, out = 0, []
    for k, n in enumerate(range(min_trials, max_trials + 1)):
        room = round(_spent(alpha, n / max_trials) * len(p)) - crossed
        values = np.sort(p[alive, k])
        if room <= 0 or not len(values):
            out.append(0.0)
            continue
        level = float(values[min(room, len(values)) - 1])
        out.append(level)
        hit = alive & (p[:, k] <= level)
        crossed += int(hit.sum())
        alive &= ~hit
    return tuple(out)


def nominal_levels(alpha: float, min_trials: int, max_trials: int) -> tuple[float, ...]:
    """Per look (trials = min_trials … max_trials), the two-sided nominal level a contrast
    holding ``alpha`` is tested at: the error-spending boundary (module docstring),
    seeded, so the same on every machine. A look's interval is the paired t interval at
    1 − its level."""
    return _levels(round(alpha, 9), min_trials, max(max_trials, min_trials))


def look_level(min_trials: int, max_trials: int, alpha: float = ALPHA) -> float:
    """The interval level an adaptive experiment's card shows: the last look's, for a
    contrast holding the whole α (about 0.96 for 3…10)."""
    return 1 - nominal_levels(alpha, min_trials, max_trials)[-1]


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


def margins_for(given: Mapping[str, float], default: float) -> dict[str, float]:
    """Per headline metric, the equivalence margin: the plan's for that metric, else its
    ``default`` (never an A/A result: noise plans trials, it sets no margin)."""
    return {metric: given.get(metric) or default for metric in VERDICT_METRICS}


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


def shares(
    arms: Sequence[str], metrics: Sequence[str], alpha: float = ALPHA
) -> dict[tuple[str, str], float]:
    """The initial level of each (arm, metric) contrast: α shared equally by the arms;
    within one, ``PRIMARY_SHARE`` to the first metric, the rest shared by the others."""
    out: dict[tuple[str, str], float] = {}
    for arm in arms:
        each = alpha / len(arms)
        rest = metrics[1:]
        for i, m in enumerate(metrics):
            if not rest:
                out[(arm, m)] = each
            else:
                out[(arm, m)] = each * (
                    PRIMARY_SHARE if i == 0 else (1 - PRIMARY_SHARE) / len(rest)
                )
    return out


def _passed(
    initial: Mapping[tuple[str, str], float], rejected: Sequence[tuple[str, str]]
) -> dict[tuple[str, str], float]:
    """The levels once the ``rejected`` contrasts (in the order found) passed theirs on:
    equally to the open contrasts of the same arm, else to every open one."""
    level = dict(initial)
    for key in rejected:
        give = level.pop(key, 0.0)
        mine = [k for k in level if k[0] == key[0]] or list(level)
        for k in mine:
            level[k] += give / len(mine)
    return level


def headline_contrasts(
    runs: Sequence[RunOfArm],
    baseline: str,
    margins: Mapping[str, float],
    trials: int,
    *,
    min_trials: int,
    max_trials: int,
    previous: Sequence[ContrastLook] = (),
    names: Mapping[str, str] | None = None,
    alpha: float = ALPHA,
) -> list[ContrastLook]:
    """One look after ``trials`` complete trials: every headline contrast's estimate,
    interval at its nominal level and decision. A contrast ``previous`` (the last look)
    decided keeps its decision and interval. ``names``: metric → words ("median TTFT")
    for ``what``. Empty when the runs share no load point (nothing to decide)."""
    found = _contrasts(runs, baseline)
    if not found:
        return []
    done = {(c.arm, c.metric): c for c in previous if c.decision != "undecided"}
    arms = list(dict.fromkeys(c.arm for c in found))
    initial = shares(arms, list(dict.fromkeys(c.metric for c in found)), alpha)
    rejected = [k for k, c in done.items() if c.decision in ("better", "worse")]
    look = min(max(trials - min_trials, 0), planned_looks(min_trials, max_trials) - 1)
    out: dict[tuple[str, str], ContrastLook] = dict(done)
    while True:  # a rejection passes its level on: test the open ones again at theirs
        level = _passed(initial, rejected)
        new = False
        for c in found:
            key = (c.arm, c.metric)
            if key in done or key in rejected:
                continue
            nominal = nominal_levels(level.get(key, 0.0), min_trials, max_trials)[look]
            out[key] = _contrast_look(c, 1 - nominal, margins, names, len(arms) > 1)
            if out[key].decision in ("better", "worse"):
                rejected.append(key)
                new = True
        if not new:
            return [out[(c.arm, c.metric)] for c in found]


def _contrast_look(
    c: Contrast,
    level: float,
    margins: Mapping[str, float],
    names: Mapping[str, str] | None,
    several: bool,
) -> ContrastLook:
    rel, low, high = (
        paired_log_ratio(c.arm_values, c.base_values, level) if level < 1 else (None, None, None)
    )
    margin = margins.get(c.metric, 0.05)
    what = f"{(names or {}).get(c.metric, c.metric)} at {c.point}"
    return ContrastLook.model_validate(
        {
            "arm": c.arm,
            "metric": c.metric,
            "point": c.point,
            "rel": rel,
            "low": low,
            "high": high,
            "margin": margin,
            "decision": decide(c.metric, rel, low, high, margin),
            "what": f"{c.arm}: {what}" if several else what,
            "level": level,
        }
    )


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
