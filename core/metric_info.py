"""THE table of metric metadata: for each metric its words, its unit, its direction (is a
higher value better or worse), whether it is a headline (verdict) metric, where it is shown,
and how its value reads. Every list of metrics, direction table and metric-words table of
ServeLab (pages, CLI, the summary card, the verdict, the HTML report, the exports) reads
this table; adding a metric is one row here.

The latency statistics (``median_ttft_ms``, ``p99_itl_ms`` ...) are rows too, made from
their family and statistic. A base module: it imports only ``core.numbers``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from core.numbers import count_text, gb_text, number_text

__all__ = [
    "METRICS",
    "Direction",
    "MetricInfo",
    "View",
    "direction_of",
    "higher_is_better",
    "info",
    "metric_label",
    "metric_name",
    "metric_text",
    "metric_unit",
    "metrics_for",
    "verdict_metrics",
]

Direction = Literal["higher", "lower"]
Format = Literal["number", "count", "gb"]
# Where a metric is shown: "deltas" (Compare's table of every metric at every point),
# "experiment" (the arms over trials), "card" (the summary card), "attribution" (the
# factorial's effects), "history" (a configuration's series).
View = Literal["deltas", "experiment", "card", "attribution", "history"]

LATENCY_FAMILIES = ("ttft", "itl", "tpot", "e2e")
STAT_NAMES = ("mean", "median", "std", "p90", "p95", "p99", "max")
_FAMILY_WORDS = {"ttft": "TTFT", "itl": "ITL", "tpot": "TPOT", "e2e": "E2E latency"}
_LATENCY_STAT = re.compile(r"(mean|median|std|p90|p95|p99|max)_(ttft|itl|tpot|e2e)_ms")


@dataclass(frozen=True)
class MetricInfo:
    """One metric: ``key`` as stored, ``name`` in words for a sentence, ``unit``,
    ``direction`` (None: neither way is better), ``headline`` (a verdict metric), the views
    that show it, and ``fmt``, how its value reads."""

    key: str
    name: str
    unit: str
    direction: Direction | None = None
    headline: bool = False
    views: frozenset[View] = frozenset()
    fmt: Format = "number"

    @property
    def label(self) -> str:
        """As a heading, tile or axis names it, with its unit: ``Median TTFT (ms)``."""
        name = self.name
        if not re.match(r"p\d", name):  # "p99 TTFT" stays a percentile's name
            name = name[:1].upper() + name[1:]
        return f"{name} ({self.unit})" if self.unit else name

    def text(self, value: Any) -> str:
        """A value of this metric as a reader sees it (no unit: the label carries it)."""
        if self.fmt == "count":
            return count_text(value)
        if self.fmt == "gb":
            return gb_text(value, unit=False)
        return number_text(value)


_VIEWS: frozenset[str] = frozenset(View.__args__)  # type: ignore[attr-defined]


def _m(
    key: str,
    name: str,
    unit: str,
    direction: Direction | None = None,
    views: str = "",
    headline: bool = False,
    fmt: Format = "number",
) -> MetricInfo:
    shown = frozenset(views.split())
    assert shown <= _VIEWS, shown - _VIEWS  # a view's name misspelt in the table below
    return MetricInfo(key, name, unit, direction, headline, shown, fmt)  # type: ignore[arg-type]


def _latency(stat: str, family: str, views: str = "", headline: bool = False) -> MetricInfo:
    key = f"{stat}_{family}_ms"
    return _m(key, f"{stat} {_FAMILY_WORDS[family]}", "ms", "lower", views, headline)


_EVERYWHERE = "deltas experiment card attribution history"
# In the order every list of metrics shows them (the card, the deltas, the experiment).
_ROWS = (
    _m("output_throughput", "output throughput", "tok/s", "higher", _EVERYWHERE, True),
    _m("request_throughput", "request throughput", "req/s", "higher", "deltas"),
    _m("total_throughput", "total throughput", "tok/s", "higher", "deltas"),
    _m("input_throughput", "input throughput", "tok/s", "higher"),
    _m("steady_output_throughput", "steady output throughput", "tok/s"),
    _m("max_output_tokens_per_s", "peak output", "tok/s", "higher"),
    _latency("median", "ttft", _EVERYWHERE, headline=True),
    _latency("p99", "ttft", "deltas experiment card"),
    _latency("median", "itl", _EVERYWHERE, headline=True),
    _latency("p99", "itl", "deltas"),
    _latency("median", "tpot", "deltas experiment card attribution"),
    _latency("median", "e2e", "deltas experiment"),
    _latency("p99", "e2e", "deltas"),
    _m("error_rate", "error rate", "fraction", "lower", "deltas experiment"),
    _m("peak_gpu_mib", "peak GPU memory", "MiB", "lower", "card", fmt="count"),
    _m("headroom_gb", "memory headroom", "GB", "higher", "card", fmt="gb"),
    _m("kv_cache_tokens", "KV pool", "tokens", "higher", "card attribution", fmt="count"),
    _m("memory_headroom_gb", "memory headroom", "GB", "higher", "attribution", fmt="gb"),
    _m("concurrency", "achieved concurrency", "requests"),
    _m("max_concurrent_requests", "peak concurrent requests", "requests"),
    _m("duration_s", "duration", "s"),
    _m("output_len_ratio", "output length ratio", "achieved / requested"),
)
METRICS: dict[str, MetricInfo] = {m.key: m for m in _ROWS}
for _fam in LATENCY_FAMILIES:  # every other latency statistic: lower is better
    for _stat in STAT_NAMES:
        _row = _latency(_stat, _fam)
        METRICS.setdefault(_row.key, _row)


def info(metric: str) -> MetricInfo:
    """The row of ``metric``; a metric the table does not know gets its key in words, no
    unit and no direction (a name ServeLab does not define is shown, never refused)."""
    if metric in METRICS:
        return METRICS[metric]
    if m := _LATENCY_STAT.fullmatch(metric):
        return _latency(m[1], m[2])
    return MetricInfo(metric, metric.replace("_", " "), "")


def metrics_for(view: View) -> tuple[str, ...]:
    """The metrics ``view`` shows, in the table's order."""
    return tuple(m.key for m in METRICS.values() if view in m.views)


def verdict_metrics() -> tuple[str, ...]:
    """THE headline metrics: what a verdict names at the headline point and what an
    adaptive experiment's stop rule decides."""
    return tuple(m.key for m in METRICS.values() if m.headline)


def direction_of(metric: str) -> Direction | None:
    """Whether a higher or a lower value of ``metric`` is better; None: neither."""
    return info(metric).direction


def higher_is_better(metric: str) -> bool:
    """True unless a lower value is better (a metric with no direction reads as higher)."""
    return info(metric).direction != "lower"


def metric_name(metric: str) -> str:
    """A metric in words, for a sentence: ``median_ttft_ms`` -> ``median TTFT``."""
    return info(metric).name


def metric_unit(metric: str) -> str:
    """A metric's unit (``tok/s``, ``ms``); empty where it has none."""
    return info(metric).unit


def metric_label(metric: str) -> str:
    """A metric as a heading, tile or axis names it, with its unit:
    ``output_throughput`` -> ``Output throughput (tok/s)``."""
    return info(metric).label


def metric_text(metric: str, value: Any) -> str:
    """A value of ``metric`` as a reader sees it (``1,234`` tokens, ``12.34`` GB)."""
    return info(metric).text(value)
