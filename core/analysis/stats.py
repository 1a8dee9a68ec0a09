"""Experiment statistics: per-arm means with 95% intervals over trials, the relative
difference to the baseline arm with its interval, a label, SLO views, and a verdict
sentence generated from the numbers.

Intervals are Student-t over trials (each trial is one fresh server, so trials, not
requests, are the independent samples). With fewer than 3 trials an interval would be
mostly guesswork, so it is reported as unknown. A mean's interval never goes below 0 when
every value is non-negative (a latency or a throughput cannot). The relative difference is
the mean of the per-trial log-ratios, mapped back (``paired_log_ratio``, the one estimator
of every delta between arms: t over n_pairs - 1 df), so it can never cross -100% and a
ratio of 2 and of 1/2 are equally far from "no change" (docs/METRICS.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Final

import numpy as np
import pandas as pd

from core.analysis.diff import confounders, environment_differences, version_change
from core.analysis.points import point_key
from core.analysis.runs import RunView
from core.metric_info import higher_is_better, metrics_for
from core.metrics import latency_values
from core.numbers import as_number, is_number, pct_interval_text, pct_text, share_text
from core.records import records_from_table

__all__ = [
    "ARM_STATS_COLUMNS",
    "EXPERIMENT_METRICS",
    "MIN_TRIALS_FOR_CI",
    "NOT_TESTED",
    "arm_stats",
    "first_per_arm",
    "frontier",
    "level_text",
    "mean_ci",
    "paired_log_ratio",
    "slo_table",
    "t975",
    "t_quantile",
    "trial_log_ratios",
    "verdict",
]

MIN_TRIALS_FOR_CI = 3
# The word a verdict uses where a change is no finding because the workload never reached
# the resource the knob acts on (core.analysis.knob_checks), so no interval speaks for the
# knob; every other difference is read by core.analysis.words.
NOT_TESTED: Final = "not tested by this workload"
ARM_STATS_COLUMNS = (
    "point",
    "concurrency",
    "metric",
    "arm",
    "n",
    "mean",
    "ci_low",
    "ci_high",
    "rel",
    "rel_low",
    "rel_high",
    "label",
)
EXPERIMENT_METRICS = metrics_for("experiment")  # core.metric_info: the one table


def mean_ci(values: list[float]) -> tuple[float | None, float | None, float | None]:
    """(mean, low, high); low/high None with fewer than 3 values."""
    vals = [v for v in values if v is not None and not math.isnan(v)]
    if not vals:
        return None, None, None
    mean = float(np.mean(vals))
    if len(vals) < MIN_TRIALS_FOR_CI:
        return mean, None, None
    sem = float(np.std(vals, ddof=1)) / math.sqrt(len(vals))
    if sem == 0:
        return mean, mean, mean
    half = t975(float(len(vals) - 1)) * sem
    low, high = mean - half, mean + half
    if min(vals) >= 0:  # a latency or a rate is never negative; nor is its interval
        low = max(low, 0.0)
    return mean, low, high


@lru_cache(maxsize=1024)
def t975(df: float) -> float:
    """Student-t 97.5% quantile (scipy's ppf costs ~1 ms a call; a page asks hundreds)."""
    return _t_quantile(0.975, df)


@lru_cache(maxsize=1024)
def _t_quantile(q: float, df: float) -> float:
    # imported here: scipy.stats takes seconds to import on a 2-core host, and every run
    # process imports this module (its report) without needing a quantile
    from scipy import stats as sps

    return float(sps.t.ppf(q, df))


def t_quantile(q: float, df: float) -> float:
    """Student-t ``q`` quantile with ``df`` degrees of freedom (cached)."""
    return _t_quantile(q, df)


def paired_log_ratio(
    arm: Mapping[int, float], base: Mapping[int, float], level: float = 0.95
) -> tuple[float | None, float | None, float | None]:
    """THE estimator of a difference between two arms of an experiment: (relative
    difference, low, high) of ``arm`` vs ``base``, each given as trial → value.

    Each trial both arms completed gives one log(arm / base); the estimate is their mean,
    its 95% interval Student-t with n_pairs − 1 degrees of freedom, mapped back with
    exp(·) − 1 (so it never crosses −100%). Pairing by trial removes what a trial shares
    between its arms (the host's state at that time: drift, a noisy neighbour); the log
    makes a ratio of 2 and of 1/2 equally far from "no change" (docs/METRICS.md). The
    attribution's OLS with trial blocks gives the same interval for the same contrast in
    a balanced 2×2 (``core.analysis.attribution``). ``level``: the interval's coverage; an
    adaptive experiment asks for its stop rule's adjusted level
    (``core.analysis.sequential.look_level``), so its card, verdict and stop decision show
    one interval. Interval None with fewer than 3 pairs;
    a value ≤ 0 (an error rate of 0) has no log: all zero on both sides reads as no
    change, otherwise the ratio of the means without an interval."""
    pairs = _pairs(arm, base)
    if not pairs:
        return None, None, None
    enough = len(pairs) >= MIN_TRIALS_FOR_CI
    if any(a <= 0 or b <= 0 for a, b in pairs):
        ma, mb = float(np.mean([a for a, _ in pairs])), float(np.mean([b for _, b in pairs]))
        if mb == 0:
            if ma != 0:
                return None, None, None  # no relative change from zero
            return (0.0, 0.0, 0.0) if enough else (0.0, None, None)
        return ma / mb - 1, None, None
    logs = np.log([a / b for a, b in pairs])
    d = float(np.mean(logs))
    rel = math.expm1(d)
    if not enough:
        return rel, None, None
    sem = float(np.std(logs, ddof=1)) / math.sqrt(len(logs))
    if sem == 0:
        return rel, rel, rel
    half = _t_quantile(1 - (1 - level) / 2, float(len(logs) - 1)) * sem
    return rel, math.expm1(d - half), math.expm1(d + half)


def _pairs(arm: Mapping[int, float], base: Mapping[int, float]) -> list[tuple[float, float]]:
    """(arm, base) of each trial both arms completed: what pairs the estimator."""
    return [
        (float(a), float(base[t]))
        for t, a in arm.items()
        if t in base and is_number(a) and is_number(base[t])
    ]


def trial_log_ratios(arm: Mapping[int, float], base: Mapping[int, float]) -> list[float]:
    """The per-trial log(arm / base) that ``paired_log_ratio`` averages ([] when a value is
    ≤ 0: no log): their spread is the noise a paired interval is made of
    (``core.analysis.power``)."""
    pairs = _pairs(arm, base)
    if any(a <= 0 or b <= 0 for a, b in pairs):
        return []
    return [math.log(a / b) for a, b in pairs]


def level_text(level: float) -> str:
    """``95% CI``; another level says why it is not 95%: ``99.4% CI (adjusted for repeated
    looks)``, the interval an adaptive experiment decided on."""
    if abs(level - 0.95) < 1e-9:
        return "95% CI"
    return f"{share_text(level, 1)} CI (adjusted for repeated looks)"


def _counts(summary: Mapping[str, Any], metric: str) -> tuple[int, int] | None:
    """(count, total) behind a rate metric (``core.analysis.rates.RATE_COUNTS``)."""
    from core.analysis.rates import RATE_COUNTS

    names = RATE_COUNTS.get(metric)
    m = summary.get("metrics") or {}
    k, n = (as_number(m.get(x)) for x in names) if names else (None, None)
    return (int(k), int(n)) if k is not None and n is not None and n > 0 else None


def _difference(
    metric: str,
    arm: Mapping[int, float],
    base: Mapping[int, float],
    arm_counts: Mapping[int, tuple[int, int]] | None,
    base_counts: Mapping[int, tuple[int, int]] | None,
    level: float,
) -> tuple[float | None, float | None, float | None]:
    """A rate with its counts on both sides (an error rate): the difference of proportions
    with Newcombe's interval (``core.analysis.rates``), defined at 0 errors; any other
    metric: THE paired log-ratio."""
    if arm_counts and base_counts:
        from core.analysis.rates import rate_difference

        found = rate_difference(arm_counts, base_counts, level)
        if found is not None:
            return found
    return paired_log_ratio(arm, base, level)


def _label(
    metric: str, low: float | None, high: float | None, rel: float | None, pairs: int = 0
) -> str:
    """The raw word of one difference, in core.analysis.words' vocabulary (this module sits
    below it): unconfirmed without an interval, better / worse beyond zero, else
    inconclusive. ``core.analysis.card.arm_table`` rewords every label with the plan's
    margin and the family's correction; what a reader sees comes from there."""
    # ``pairs`` is kept for the callers; a rate at 0 gets its interval from core.analysis.rates.
    if rel is None or low is None or high is None:
        return "unconfirmed"
    if low <= 0 <= high:
        return "inconclusive"
    up = low > 0
    return "better" if up == higher_is_better(metric) else "worse"


@dataclass(frozen=True)
class RunOfArm:
    arm: str
    trial: int
    view: RunView


def arm_stats(
    runs: list[RunOfArm],
    baseline_arm: str,
    metrics: tuple[str, ...] = EXPERIMENT_METRICS,
    level: float = 0.95,
) -> pd.DataFrame:
    """One row per (point, metric, arm): n, mean, CI, relative diff to the baseline arm
    with its CI (at ``level``: see ``paired_log_ratio``), and the label. Only succeeded
    runs count."""
    values: dict[tuple[Any, str, str], dict[int, float]] = {}
    counts: dict[tuple[Any, str, str], dict[int, tuple[int, int]]] = {}
    labels: dict[Any, str] = {}
    for r in runs:
        if r.view.status.state != "succeeded":
            continue
        for s in r.view.points:
            key = point_key(s)
            labels.setdefault(key, s.get("label", str(key)))
            for m in metrics:
                v = as_number((s.get("metrics") or {}).get(m))
                if v is not None:
                    # a trial's first value at a point (a repeated point counts once)
                    values.setdefault((key, m, r.arm), {}).setdefault(r.trial, v)
                    if (c := _counts(s, m)) is not None:
                        counts.setdefault((key, m, r.arm), {}).setdefault(r.trial, c)
    arms = list(dict.fromkeys(r.arm for r in runs))
    rows: list[dict[str, Any]] = []
    for key, label in labels.items():
        for m in metrics:
            if not any(values.get((key, m, arm)) for arm in arms):
                continue  # a metric no run reported (e.g. an import without it)
            base_vals = values.get((key, m, baseline_arm), {})
            for arm in arms:
                vals = values.get((key, m, arm), {})
                mean, low, high = mean_ci(list(vals.values()))
                row: dict[str, Any] = {
                    "point": label,
                    "concurrency": key[0],
                    "metric": m,
                    "arm": arm,
                    "n": len(vals),
                    "mean": mean,
                    "ci_low": low,
                    "ci_high": high,
                }
                if arm != baseline_arm:
                    rel, rlow, rhigh = _difference(
                        m,
                        vals,
                        base_vals,
                        counts.get((key, m, arm)),
                        counts.get((key, m, baseline_arm)),
                        level,
                    )
                    row.update(
                        rel=rel,
                        rel_low=rlow,
                        rel_high=rhigh,
                        label=_label(m, rlow, rhigh, rel, len(_pairs(vals, base_vals))),
                    )
                rows.append(row)
    # The columns exist with no row too: a queued or all-failed experiment has no results.
    return pd.DataFrame(rows, columns=list(ARM_STATS_COLUMNS))


def first_per_arm(runs: list[RunOfArm]) -> dict[str, RunView]:
    """Per arm (in order), its first succeeded run, else its first run: the one shown
    where a figure or table has room for one run per arm."""
    out: dict[str, RunView] = {}
    for r in runs:
        if r.arm not in out or (
            out[r.arm].status.state != "succeeded" and r.view.status.state == "succeeded"
        ):
            out[r.arm] = r.view
    return out


def _throughput_parts(tput: pd.DataFrame, level: float) -> list[list[str]]:
    """Per arm, its output-throughput change at the lowest and highest concurrency."""
    parts: list[list[str]] = []
    concs = sorted(c for c in tput["concurrency"].unique() if c is not None)
    picks = [concs[0], concs[-1]] if len(concs) > 1 else concs
    for arm in tput["arm"].unique():
        parts.append([])
        for c in dict.fromkeys(picks):
            row = tput[(tput["arm"] == arm) & (tput["concurrency"] == c)].iloc[0]
            if row["rel_low"] is not None and not pd.isna(row["rel_low"]):
                ci = f" ({level_text(level)} {pct_interval_text(row['rel_low'], row['rel_high'])})"
            else:
                ci = f" (interval unknown: fewer than {MIN_TRIALS_FOR_CI} trials)"
            note = "" if row["label"] in ("better", "worse", "unconfirmed") else f", {row['label']}"
            change = pct_text(row["rel"])
            parts[-1].append(f"{change} output throughput at concurrency {c}{ci}{note}")
    return parts


def _kv_text(runs: list[RunOfArm], baseline_arm: str) -> str:
    kv = {
        a: [r.view.facts.get("kv_cache_tokens") for r in runs if r.arm == a]
        for a in dict.fromkeys(r.arm for r in runs)
    }
    base_kv = [x for v in kv.get(baseline_arm, []) if (x := as_number(v)) is not None]
    # One change per arm: with several arms, each is named (the last one must not stand
    # for all of them).
    kv_parts = []
    for arm, vals in kv.items():
        nums = [x for v in vals if (x := as_number(v)) is not None]
        if arm != baseline_arm and nums and base_kv:
            change = pct_text(float(np.mean(nums)) / float(np.mean(base_kv)) - 1)
            kv_parts.append(f"{arm} {change}" if len(kv) > 2 else change)
    return "KV pool " + ", ".join(kv_parts) if kv_parts else "KV pool unknown"


def _confounder_text(runs: list[RunOfArm], baseline_arm: str) -> str:
    """The "confounders: ..." clause, with the engine version change between installations."""
    views = [r.view for r in runs]
    by_arm = {r.view.run_id: r.arm for r in runs}
    conf = confounders(views) if len(views) > 1 else []
    # The host and engine must be the same for every arm: a knob never explains those,
    # except the engine version when the arms differ by installation (then it is said).
    conf += environment_differences(views)
    # the baseline arm's installation first: "0.5.14→0.5.17" reads baseline → other
    version = version_change(sorted(views, key=lambda v: by_arm.get(v.run_id) != baseline_arm))
    return (
        "confounders: "
        + (", ".join(conf) if conf else "none")
        + (f"; {version}" if version else "")
    )


def verdict(
    name: str,
    table: pd.DataFrame,
    runs: list[RunOfArm],
    baseline_arm: str,
    level: float = 0.95,
) -> str:
    """One sentence from the numbers: output throughput at the lowest and highest
    concurrency, the KV pool difference, and the confounders. ``level``: the intervals'
    (``table``'s) coverage; other than 95% it is said (an adaptive experiment's adjusted
    level)."""
    # one sentence per arm (its lowest and highest concurrency), so a 2x2 reads arm by arm
    # rather than as one sentence over every arm and concurrency
    tput = table[(table["metric"] == "output_throughput") & (table["arm"] != baseline_arm)]
    tput = tput.dropna(subset=["rel"]) if "rel" in tput else tput.iloc[0:0]
    if tput.empty:
        return f"{name}: no comparable results yet."
    parts = _throughput_parts(tput, level)
    several = len(parts) > 1
    short = sum(
        1
        for r in runs
        for s in r.view.points
        if ((s.get("metrics") or {}).get("output_len_ratio") or 1.0) < 0.99
    )
    tail = f"; output shorter than requested in {short} point(s)" if short else ""
    arms_text = (
        ". ".join(
            f"{arm} vs {baseline_arm}: " + ", ".join(p)
            for arm, p in zip(tput["arm"].unique(), parts, strict=True)
        )
        if several
        else ", ".join(parts[0])
    )
    return (
        f"{name}: "
        + arms_text
        + (". " if several else "; ")
        + f"{_kv_text(runs, baseline_arm)}; {_confounder_text(runs, baseline_arm)}"
        + tail
        + "."
    )


def slo_table(runs: list[RunOfArm], ttft_p99_ms: float, tpot_median_ms: float) -> pd.DataFrame:
    """Per arm and point, from the raw records: does the point meet p99 TTFT and median
    TPOT targets, and goodput (requests/s whose own TTFT and TPOT meet the targets)."""
    rows = []
    for r in runs:
        folder = r.view.folder
        if folder is None or r.view.status.state != "succeeded":
            continue
        for s in r.view.points:
            table = folder.read_table(f"points/{s['index']:03d}/records.parquet")
            if table is None:
                continue
            recs = records_from_table(table)
            lat = latency_values(recs)
            ok = [x for x in recs if x.ok and x.ttft_s is not None and x.latency_s is not None]
            good = 0
            for x in ok:
                n = x.output_tokens("server")
                tpot_ms = ((x.latency_s or 0) - (x.ttft_s or 0)) / (n - 1) * 1e3 if n > 1 else 0
                if (x.ttft_s or 0) * 1e3 <= ttft_p99_ms and tpot_ms <= tpot_median_ms:
                    good += 1
            dur = (s.get("metrics") or {}).get("duration_s") or 0
            p99_ttft = float(np.percentile(lat["ttft"], 99)) * 1e3 if lat["ttft"] else None
            med_tpot = float(np.median(lat["tpot"])) * 1e3 if lat["tpot"] else None
            rows.append(
                {
                    "arm": r.arm,
                    "trial": r.trial,
                    "point": s.get("label"),
                    "concurrency": (s.get("point") or {}).get("concurrency"),
                    "p99_ttft_ms": p99_ttft,
                    "median_tpot_ms": med_tpot,
                    "meets_slo": (
                        p99_ttft is not None
                        and med_tpot is not None
                        and p99_ttft <= ttft_p99_ms
                        and med_tpot <= tpot_median_ms
                    ),
                    "goodput_req_s": good / dur if dur else None,
                }
            )
    return pd.DataFrame(rows)


def frontier(table: pd.DataFrame, gpus_per_run: int) -> pd.DataFrame:
    """Per arm and point: per-user speed = 1000 / median TPOT (tok/s per user) and
    throughput per GPU = output throughput / GPUs, plus whether the point is on the arm's
    Pareto frontier (no other point of the arm is better on both axes)."""
    if table.empty:
        return pd.DataFrame()
    means = table.pivot_table(
        index=["arm", "point", "concurrency"], columns="metric", values="mean"
    ).reset_index()
    if "median_tpot_ms" not in means or "output_throughput" not in means:
        return pd.DataFrame()
    means["user_tok_s"] = 1000.0 / means["median_tpot_ms"]
    means["tok_s_per_gpu"] = means["output_throughput"] / max(gpus_per_run, 1)
    on = []
    for _, row in means.iterrows():
        same = means[means["arm"] == row["arm"]]
        dominated = (
            (same["user_tok_s"] >= row["user_tok_s"])
            & (same["tok_s_per_gpu"] >= row["tok_s_per_gpu"])
            & (
                (same["user_tok_s"] > row["user_tok_s"])
                | (same["tok_s_per_gpu"] > row["tok_s_per_gpu"])
            )
        ).any()
        on.append(not dominated)
    means["on_frontier"] = on
    return means[["arm", "point", "concurrency", "user_tok_s", "tok_s_per_gpu", "on_frontier"]]


def runs_phrase(runs: Sequence[tuple[str, int, int]]) -> str:
    """Which runs a finding covers, per arm: (arm, runs flagged, runs that measured it) ->
    ``the run of A, all 3 runs of B, 2 of 3 runs of C`` (caveats and drift findings)."""
    return ", ".join(
        f"the run of {arm}"
        if n == 1
        else f"all {n} runs of {arm}"
        if k == n
        else f"{k} of {n} runs of {arm}"
        for arm, k, n in runs
    )
