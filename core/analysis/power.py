"""Power before launch: the smallest effect N trials can resolve on this host.

The paired estimator (``core.analysis.stats.paired_log_ratio``) gives the 95% interval
mean d ± t(0.975, n − 1) · sd(d)/√n over the per-trial log-ratios d. Before launching, sd(d)
is the noise this machine has shown (``host_noise``, keyed by the fingerprint of
``core.analysis.noise``: GPUs, CPU, engine installation): the per-trial log-ratios of its
newest finished A/A experiment (two identical arms: every d is noise), else of an earlier
experiment's trials of the same engine and model (each contrast's spread around its own
mean). ``resolvable_effect`` is the half-width that follows for N trials, mapped back
(exp(·) − 1): an effect that size is resolved (its interval excludes 0) about half the
time, one twice that size nearly always (docs/METRICS.md, "Power before launch").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from core.analysis.noise import Fingerprint, runs_fingerprint
from core.analysis.points import PointKey, first_points
from core.analysis.stats import MIN_TRIALS_FOR_CI, RunOfArm, t_quantile, trial_log_ratios
from core.analysis.trials import experiment_runs
from core.experiments.design import baseline_arm, list_experiments
from core.experiments.records import ExperimentRecord
from core.metrics import as_number
from core.settings import Settings
from core.shapes import model_label

__all__ = [
    "ALTERNATIVE_TRIALS",
    "HostNoise",
    "contrast_log_sd",
    "host_noise",
    "noise_text",
    "power_lines",
    "resolvable_effect",
]

# The trial counts a power statement shows besides the plan's own.
ALTERNATIVE_TRIALS = (3, 5, 8, 12)


@dataclass(frozen=True)
class HostNoise:
    """The sd of the per-trial log-ratio of ``metric`` on a host, pooled over the
    contrasts and points of ``experiment_id`` (``df``: its degrees of freedom)."""

    sd_log: float
    df: int
    metric: str
    experiment_id: str
    source: str  # "A/A" or "trials"
    host: str  # the fingerprint's words (``core.analysis.noise.Fingerprint.text``)


def resolvable_effect(sd_log: float, trials: int, level: float = 0.95) -> float | None:
    """The half-width of the paired ``level`` interval (95 %), mapped back (exp(h) − 1), for
    ``trials`` trials at a per-trial log-ratio sd of ``sd_log``: the smallest effect those
    trials can tell from noise. None below ``MIN_TRIALS_FOR_CI`` trials (the estimator gives
    no interval there). Pure: usable by any trial-count rule (``trials: auto``) and by a
    family's stricter per-comparison level (``core.analysis.words.demote``)."""
    if trials < MIN_TRIALS_FOR_CI or not math.isfinite(sd_log) or sd_log < 0:
        return None
    t = t_quantile(1 - (1 - level) / 2, float(trials - 1))
    return math.expm1(t * sd_log / math.sqrt(trials))


def contrast_log_sd(
    runs: Sequence[RunOfArm], baseline: str, metric: str = "output_throughput"
) -> tuple[float, int] | None:
    """(pooled sd, degrees of freedom) of the per-trial log-ratios of every arm against
    ``baseline`` at every point (each contrast's spread around its own mean, so an effect
    does not count as noise); None with no contrast of at least 3 trials."""
    values: dict[tuple[PointKey, str], dict[int, float]] = {}
    for r in runs:
        if r.view.status.state != "succeeded":
            continue
        for key, s in first_points(r.view):
            v = as_number((s.get("metrics") or {}).get(metric))
            if v is not None:
                values.setdefault((key, r.arm), {}).setdefault(r.trial, v)
    ss, df = 0.0, 0
    for (key, arm), vals in values.items():
        if arm == baseline:
            continue
        d = trial_log_ratios(vals, values.get((key, baseline), {}))
        if len(d) >= MIN_TRIALS_FOR_CI:
            ss += float(np.var(d, ddof=1)) * (len(d) - 1)
            df += len(d) - 1
    return (math.sqrt(ss / df), df) if df else None


def _finished(runs: Sequence[RunOfArm]) -> bool:
    return bool(runs) and not any(r.view.status.state in ("queued", "running") for r in runs)


def _same_setup(record: ExperimentRecord, engine: str | None, model: str | None) -> bool:
    server = (record.spec.get("base") or {}).get("server") or {}
    return (engine is None or server.get("engine") == engine) and (
        model is None or model_label(server) == model
    )


def host_noise(
    settings: Settings,
    machine: Fingerprint | None,
    *,
    engine: str | None = None,
    model: str | None = None,
    metric: str = "output_throughput",
) -> HostNoise | None:
    """The noise runs on ``machine`` have shown (``core.analysis.noise``: GPUs, CPU,
    engine installation; never a host name): its newest finished A/A experiment of the
    same engine and model (when given), else the newest finished experiment of them with 3
    trials or more. None when that machine has shown none (run an A/A there), or with no
    machine to key by. Plans trials and is shown; never a verdict threshold."""
    if machine is None:
        return None
    records = list_experiments(settings)
    ordered = [r for r in records if r.kind == "aa"] + [r for r in records if r.kind != "aa"]
    for record in ordered:
        if not _same_setup(record, engine, model):
            continue
        runs = experiment_runs(settings, record)
        made = runs_fingerprint([r.view for r in runs])
        if not _finished(runs) or made is None or not made.plans_for(machine):
            continue
        # an A/A's arms are alike: its first arm is the one the other is set against
        aa = record.kind == "aa" and record.arm_labels
        base = record.arm_labels[0] if aa else baseline_arm(record.spec)
        found = contrast_log_sd(runs, base, metric)
        if found is not None:
            return HostNoise(
                found[0],
                found[1],
                metric,
                record.experiment_id,
                "A/A" if record.kind == "aa" else "trials",
                made.text,
            )
    return None


def noise_text(noise: HostNoise) -> str:
    """ "this host's run-to-run noise ±x %": the typical relative difference between two
    runs of one configuration in one trial (exp(sd) − 1 of the per-trial log-ratio), with
    where it was measured. What a page shows beside a plan; never a threshold."""
    where = (
        f"A/A {noise.experiment_id}"
        if noise.source == "A/A"
        else f"the trials of {noise.experiment_id}"
    )
    return (
        f"this host's run-to-run noise ±{math.expm1(noise.sd_log) * 100:.1f}% on "
        f"{noise.metric} (sd of the per-trial log-ratio {noise.sd_log:.3f} over {noise.df} "
        f"df, from {where} on {noise.host})"
    )


def power_lines(
    noise: HostNoise | None, trials: int, alternatives: Sequence[int] = ALTERNATIVE_TRIALS
) -> list[str]:
    """The power statement in words: "with 3 trials: about +30% / −23%" for the plan's trials and
    a few alternatives, from where the noise came; or that no noise is known and how to
    measure it."""
    if noise is None:
        return [
            "Resolvable effect: unknown — this host has shown no noise yet (no finished A/A "
            "experiment or earlier trials here). Run the 'A/A noise check' preset (or a plan "
            "with kind: aa) to measure it."
        ]
    head = (
        f"Resolvable effect on {noise.metric} (half-width of the paired 95% interval; "
        f"{noise_text(noise)}):"
    )
    lines = [head]
    for n in sorted({trials, *alternatives}):
        effect = resolvable_effect(noise.sd_log, n)
        # on the log scale the interval is symmetric: +h up is 1 - exp(-h) down
        text = (
            f"about +{effect * 100:.0f}% / −{effect / (1 + effect) * 100:.0f}%"
            if effect is not None
            else f"no interval (fewer than {MIN_TRIALS_FOR_CI} trials)"
        )
        lines.append(
            f"  with {n} trial{'s' if n != 1 else ''}: {text}"
            + ("  ← this plan" if n == trials else "")
        )
    return lines
