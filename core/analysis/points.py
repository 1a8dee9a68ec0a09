"""Points and metrics across runs: a point is paired with the same load in every run
(concurrency, request rate, input and output length), never by position, and flagged when
the runs were sent different prompts there; ``metric_deltas`` is the single-run delta
table (no interval: a change below ``NO_CHANGE_THRESHOLD`` reads "no change", never
"within noise", which only an interval or a measured noise floor can say).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pandas as pd

from core.analysis.runs import RunView, run_labels
from core.metrics import LATENCY_FAMILIES, STAT_NAMES, TokenSource, as_number, rate_value

__all__ = [
    "HEADLINE_METRICS",
    "METRIC_DIRECTIONS",
    "NO_CHANGE_THRESHOLD",
    "MatchedPoint",
    "PointKey",
    "first_points",
    "is_no_change",
    "match_points",
    "metric_deltas",
    "point_key",
    "point_text",
    "prompt_check",
]

# |relative change| below this, on single runs (no interval), reads as "no change".
NO_CHANGE_THRESHOLD = 0.005

Direction = Literal["higher", "lower"]
Verdict = Literal["better", "worse", "no change", "changed"]

METRIC_DIRECTIONS: dict[str, Direction] = {
    "request_throughput": "higher",
    "input_throughput": "higher",
    "output_throughput": "higher",
    "total_throughput": "higher",
    "max_output_tokens_per_s": "higher",
    "error_rate": "lower",
    **{f"{stat}_{fam}_ms": "lower" for fam in LATENCY_FAMILIES for stat in STAT_NAMES},
}

# What metric_deltas shows when no metric list is given.
HEADLINE_METRICS = (
    "output_throughput",
    "request_throughput",
    "total_throughput",
    "median_ttft_ms",
    "p99_ttft_ms",
    "median_itl_ms",
    "p99_itl_ms",
    "median_tpot_ms",
    "median_e2e_ms",
    "p99_e2e_ms",
    "error_rate",
)


def point_text(p: dict[str, Any]) -> str:
    """One load setting in words: ``c=4 rate=inf in=16 out=32 n=64``."""
    rate = rate_value(p.get("request_rate"))
    rate_s = "?" if rate is None else ("inf" if math.isinf(rate) else f"{rate:g}")
    conc = p.get("concurrency")
    conc_s = "?" if "concurrency" not in p else ("unbounded" if conc is None else conc)
    return (
        f"c={conc_s} rate={rate_s} "
        f"in={p.get('input_len', '?')} out={p.get('output_len', '?')} "
        f"n={p.get('num_prompts', '?')}"
    )


PointKey = tuple[int | None, float | None, int | None, int | None]


def point_key(summary: dict[str, Any]) -> PointKey:
    """(concurrency, request_rate, input_len, output_len) of one point summary."""
    p = summary.get("point") or {}
    return (
        p.get("concurrency"),
        rate_value(p.get("request_rate")),
        p.get("input_len"),
        p.get("output_len"),
    )


def first_points(view: RunView) -> Iterator[tuple[PointKey, dict[str, Any]]]:
    """Each load setting's first point summary in a run (a plan may repeat a point)."""
    seen: set[PointKey] = set()
    for s in view.points:
        key = point_key(s)
        if key not in seen:
            seen.add(key)
            yield key, s


@dataclass(frozen=True)
class MatchedPoint:
    """One load setting across runs: per run the summary (None where that run has no
    such point)."""

    key: PointKey
    occurrence: int  # the n-th point with this key in a run (a plan may repeat a point)
    label: str
    summaries: tuple[dict[str, Any] | None, ...]

    @property
    def indices(self) -> tuple[int | None, ...]:
        return tuple(None if s is None else s.get("index") for s in self.summaries)

    @property
    def complete(self) -> bool:
        return all(s is not None for s in self.summaries)

    @property
    def same_prompts(self) -> bool | None:
        """All runs sent the same prompts; None when a run lacks the point or a digest."""
        digests = [None if s is None else s.get("prompts_digest") for s in self.summaries]
        if any(d is None for d in digests):
            return None
        return len(set(digests)) == 1


def match_points(views: Sequence[RunView]) -> list[MatchedPoint]:
    """Points paired by their load, in order of first appearance (runs in order). A point
    repeated within a run pairs with the same repetition in the others."""
    keyed: list[dict[tuple[PointKey, int], dict[str, Any]]] = []
    order: list[tuple[PointKey, int]] = []
    for v in views:
        seen: Counter[PointKey] = Counter()
        by_key: dict[tuple[PointKey, int], dict[str, Any]] = {}
        for s in v.points:
            k = point_key(s)
            by_key[(k, seen[k])] = s
            if (k, seen[k]) not in order:
                order.append((k, seen[k]))
            seen[k] += 1
        keyed.append(by_key)
    out = []
    for k, n in order:
        summaries = tuple(by_key.get((k, n)) for by_key in keyed)
        first = next(s for s in summaries if s is not None)
        label = str(first.get("label") or point_text(first.get("point") or {}))
        out.append(MatchedPoint(k, n, label if n == 0 else f"{label} #{n + 1}", summaries))
    return out


def prompt_check(views: Sequence[RunView]) -> pd.DataFrame:
    """Per matched point: each run's prompts digest and whether they all agree
    (``same_prompts`` None where a run lacks the point or a digest)."""
    labels = run_labels(views)
    rows = []
    for mp in match_points(views):
        row: dict[str, Any] = {"point": mp.label}
        for lab, s in zip(labels, mp.summaries, strict=True):
            row[lab] = None if s is None else s.get("prompts_digest")
        row["same_prompts"] = mp.same_prompts
        rows.append(row)
    return pd.DataFrame(rows, columns=["point", *labels, "same_prompts"], dtype=object)


def _metric(summary: dict[str, Any] | None, metric: str, source: TokenSource) -> float:
    if summary is None:
        return math.nan
    block = summary.get("metrics_retokenized" if source == "retokenized" else "metrics") or {}
    value = as_number(block.get(metric))
    return math.nan if value is None else value


def is_no_change(rel: float) -> bool:
    """THE single-run "no difference" rule: a relative change below 0.5 %, where no interval
    (and no noise floor) can say whether it is noise."""
    return abs(rel) < NO_CHANGE_THRESHOLD


def _verdict(
    base: float, value: float, direction: Direction | None
) -> tuple[float, float, Verdict | None]:
    if math.isnan(base) or math.isnan(value):
        return math.nan, math.nan, None
    delta = value - base
    rel = delta / abs(base) if base != 0 else (0.0 if delta == 0 else math.nan)
    if delta == 0 or (not math.isnan(rel) and is_no_change(rel)):
        return delta, rel, "no change"
    if direction is None:
        return delta, rel, "changed"
    better = delta > 0 if direction == "higher" else delta < 0
    return delta, rel, "better" if better else "worse"


def metric_deltas(
    views: Sequence[RunView],
    baseline: int = 0,
    metrics: Sequence[str] | None = None,
    source: TokenSource = "server",
    names: Sequence[str] | None = None,
) -> pd.DataFrame:
    """One row per (matched point, metric): ``point``, ``metric``, ``direction``, one value
    column per run, then per non-baseline run ``delta_<id>`` (absolute), ``rel_<id>``
    (fraction of the baseline; NaN when the baseline is 0) and ``verdict_<id>`` ("better",
    "worse", "no change" below 0.5 %, "changed" for a metric without a direction, None when a
    value is missing), and ``same_prompts`` (False: the runs were sent different prompts
    at this point; None: not checkable). A point one run lacks gives NaN there. ``names``
    (e.g. ``arm_names``) replaces the run ids in the column names."""
    if not views:
        raise ValueError("no runs to compare")
    if not 0 <= baseline < len(views):
        raise ValueError(f"baseline {baseline} is not one of the {len(views)} runs")
    labels = list(names) if names is not None else run_labels(views)
    others = [i for i in range(len(views)) if i != baseline]
    columns = ["point", "metric", "direction", *labels]
    for i in others:
        columns += [f"delta_{labels[i]}", f"rel_{labels[i]}", f"verdict_{labels[i]}"]
    columns.append("same_prompts")
    rows = []
    for mp in match_points(views):
        for metric in metrics or HEADLINE_METRICS:
            direction = METRIC_DIRECTIONS.get(metric)
            values = [_metric(s, metric, source) for s in mp.summaries]
            row: dict[str, Any] = {"point": mp.label, "metric": metric, "direction": direction}
            row.update(zip(labels, values, strict=True))
            for i in others:
                delta, rel, verdict = _verdict(values[baseline], values[i], direction)
                row[f"delta_{labels[i]}"] = delta
                row[f"rel_{labels[i]}"] = rel
                row[f"verdict_{labels[i]}"] = verdict
            row["same_prompts"] = mp.same_prompts
            rows.append(row)
    # object first, so a missing verdict stays None (a str column would make it NaN)
    df = pd.DataFrame(rows, columns=columns, dtype=object)
    numeric = [*labels, *(f"{p}_{labels[i]}" for i in others for p in ("delta", "rel"))]
    df[numeric] = df[numeric].astype("float64")
    return df
