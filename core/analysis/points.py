"""Points and metrics across runs: a point is paired with the same load in every run
(concurrency, request rate, input and output length), never by position, and flagged when
the runs were sent different prompts there; ``metric_deltas`` is the single-run delta
table (one run each, no interval: every difference reads "unconfirmed", the word of
``core.analysis.words`` for a change no interval backs; never better or worse).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pandas as pd
import pyarrow.parquet as pq

from core.analysis.runs import RunView, has_records, run_labels
from core.analysis.server_view import prefix_cache_by_point
from core.metric_info import METRICS, Direction, direction_of, metrics_for
from core.metrics import (
    TokenSource,
    as_number,
    length_distribution,
    rate_value,
)
from core.records import CANCELLED

__all__ = [
    "HEADLINE_METRICS",
    "METRIC_DIRECTIONS",
    "NO_CHANGE_THRESHOLD",
    "MatchedPoint",
    "PointKey",
    "different_prompts",
    "first_points",
    "is_no_change",
    "match_points",
    "metric_deltas",
    "point_key",
    "point_lengths",
    "point_rows",
    "point_text",
    "prompt_check",
]

# |relative change| below this, on single runs (no interval), reads as "no change".
NO_CHANGE_THRESHOLD = 0.005

Verdict = Literal["unconfirmed"]
# = core.analysis.words.UNCONFIRMED (this module sits below words; tests/test_words.py
# checks they are one word)
UNCONFIRMED: Verdict = "unconfirmed"

# THE direction of each metric (core.metric_info); a metric without one reads "changed".
METRIC_DIRECTIONS: dict[str, Direction] = {
    k: m.direction for k, m in METRICS.items() if m.direction is not None
}

# What metric_deltas shows when no metric list is given.
HEADLINE_METRICS = metrics_for("deltas")


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
    can say more."""
    return abs(rel) < NO_CHANGE_THRESHOLD


def _verdict(base: float, value: float) -> tuple[float, float, Verdict | None]:
    if math.isnan(base) or math.isnan(value):
        return math.nan, math.nan, None
    delta = value - base
    rel = delta / abs(base) if base != 0 else (0.0 if delta == 0 else math.nan)
    # one run each: no interval, so no difference is better or worse, however large
    return delta, rel, UNCONFIRMED


def metric_deltas(
    views: Sequence[RunView],
    baseline: int = 0,
    metrics: Sequence[str] | None = None,
    source: TokenSource = "server",
    names: Sequence[str] | None = None,
) -> pd.DataFrame:
    """One row per (matched point, metric): ``point``, ``metric``, ``direction``, one value
    column per run, then per non-baseline run ``delta_<id>`` (absolute), ``rel_<id>``
    (fraction of the baseline; NaN when the baseline is 0) and ``verdict_<id>``
    ("unconfirmed": one run each, no interval; None when a value is missing), and
    ``same_prompts`` (False: the runs were sent different prompts at this point; None: not
    checkable). A point one run lacks gives NaN there. ``names``
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
            direction = direction_of(metric)
            values = [_metric(s, metric, source) for s in mp.summaries]
            row: dict[str, Any] = {"point": mp.label, "metric": metric, "direction": direction}
            row.update(zip(labels, values, strict=True))
            for i in others:
                delta, rel, verdict = _verdict(values[baseline], values[i])
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


def different_prompts(summaries: Sequence[dict[str, Any] | None]) -> bool:
    """THE rule for "these runs were not sent the same prompts at this point": their
    workloads' digests differ, or, at points of a fixed size (not sized by time, where a run
    sends a prefix of the same sequence), their prompts' digests do. False when a digest is
    missing (an imported run, an old folder): nothing says they differ."""
    present = [s for s in summaries if s]
    workloads = {
        (s.get("workload") or {}).get("digest")
        for s in present
        if isinstance(s.get("workload"), dict) and (s.get("workload") or {}).get("digest")
    }
    if len(workloads) > 1:
        return True

    def fixed(s: dict[str, Any]) -> bool:
        planned = s.get("requests_planned") or {}
        return planned.get("at_least") == planned.get("at_most")

    return (
        len({s.get("prompts_digest") for s in present if fixed(s) and s.get("prompts_digest")}) > 1
    )


def point_lengths(view: RunView, summary: dict[str, Any]) -> dict[str, dict[str, float | None]]:
    """p50/p90/p99/max of the point's per-request input and output tokens: as its summary
    recorded them, or (a folder older than that) from its records.parquet; {} for none."""
    if isinstance(summary.get("lengths"), dict):
        return dict(summary["lengths"])
    index = summary.get("index")
    if view.path is None or not isinstance(index, int) or not has_records(view, index):
        return {}
    table = pq.read_table(
        view.path / "points" / f"{index:03d}" / "records.parquet",
        columns=["prompt_tokens", "output_tokens_server", "output_tokens_requested", "ok", "error"],
    ).to_pylist()
    sent = [r for r in table if r["error"] != CANCELLED]
    outputs = [
        r["output_tokens_server"]
        if r["output_tokens_server"] is not None
        else r["output_tokens_requested"]
        for r in sent
        if r["ok"]
    ]
    return length_distribution([r["prompt_tokens"] for r in sent], outputs)


def point_rows(view: RunView) -> list[dict[str, Any]]:
    """Per point of a run, what stays true with varied lengths: its input/output length
    distribution, the prefix-cache hits the server reported over it and, for a kv_fill
    point, what it asked for and what it was sized to. The Run page and `show` list these."""
    hits = prefix_cache_by_point(view)
    rows = []
    for s in view.points:
        lengths = point_lengths(view, s)
        index = s.get("index")
        row: dict[str, Any] = {"point": s.get("label"), "index": index}
        for side in ("input_tokens", "output_tokens"):
            for stat in ("p50", "p90", "p99", "max"):
                row[f"{side}_{stat}"] = (lengths.get(side) or {}).get(stat)
        cache = hits.get(index) if isinstance(index, int) else None
        row["prefix_cache_hit_rate"] = None if cache is None else cache.hit_rate
        row["prefix_cached_tokens"] = None if cache is None else cache.cached_tokens
        fill = s.get("kv_fill") or {}
        done = fill.get("computed") or {}
        row["kv_fill"] = fill.get("kv_fill")
        row["kv_fill_pool_tokens"] = fill.get("pool_tokens")
        row["kv_fill_pool_whose"] = fill.get("pool_whose")
        row["kv_fill_computed"] = (
            None
            if not done
            else f"c={done.get('concurrency')} in={done.get('input_len')} "
            f"out={done.get('output_len')}"
        )
        rows.append(row)
    return rows
