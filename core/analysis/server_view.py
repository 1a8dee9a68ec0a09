"""The server's own view of a run: what the server (SGLang, or any engine that declares its
/metrics names: ``server_metrics`` of its ENGINE) said it was doing while the load ran.

From ``samples.parquet`` (the ``/metrics`` scrapes, ``source == "metrics"``) and, where the
server ran without ``--enable-metrics``, from its log's scheduler lines. Counters are read as
deltas over the points (the prefix-cache gauge is reset by decode reports in 0.5.17, SGLang
issue 26608, so the hit rate is ``Δcached_tokens_total / Δprompt_tokens_total``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import pandas as pd

from core.analysis.runs import RunView
from core.analysis.timelines import (
    engine_of,
    kv_capacity_tokens,
    log_lines_by_point,
    metric_samples,
    server_metric_names,
)
from core.scheduler_log import parse_scheduler_lines

__all__ = ["PrefixCache", "ServerView", "no_view_line", "prefix_cache_by_point", "server_view"]


@dataclass(frozen=True)
class ServerView:
    """Peaks and shares over the run's points; None where the server did not say."""

    source: str  # "metrics", "log" or "none"
    kv_used_peak_tokens: float | None = None
    kv_used_p50_tokens: float | None = None
    kv_capacity_tokens: float | None = None
    running_peak: float | None = None
    queue_peak: float | None = None
    retracted_peak: float | None = None  # the most retracted at one scrape (a gauge)
    # requests retracted over the points (Δ of the counter; the gauge above resets each batch)
    retracted_total: float | None = None
    paused_peak: float | None = None
    gen_throughput_peak_tok_s: float | None = None
    decode_graph_share: float | None = None
    prefill_graph_share: float | None = None
    prefix_cache_hit_rate: float | None = None

    @property
    def kv_usage_peak(self) -> float | None:
        if self.kv_used_peak_tokens is None or not self.kv_capacity_tokens:
            return None
        return self.kv_used_peak_tokens / self.kv_capacity_tokens

    def as_json(self) -> dict[str, Any]:
        return asdict(self) | {"kv_usage_peak": self.kv_usage_peak}


@dataclass(frozen=True)
class PrefixCache:
    """The prefix-cache hits the server reported over one point: counter deltas (tokens)."""

    cached_tokens: float | None
    prompt_tokens: float | None

    @property
    def hit_rate(self) -> float | None:
        if self.cached_tokens is None or not self.prompt_tokens:
            return None
        return self.cached_tokens / self.prompt_tokens


def _delta(m: pd.DataFrame, name: str, labels_has: str | None = None) -> float | None:
    """THE counter rule: per label set, last minus first scrape of ``m`` (counters only grow
    while the server lives), summed; None when the server did not report ``name``."""
    rows = m[m["name"] == name]
    if labels_has is not None:
        rows = rows[rows["labels"].fillna("").str.contains(labels_has, regex=False)]
    if rows.empty:
        return None
    by = rows.sort_values("t_s").groupby(rows["labels"].fillna(""))["value"]
    return float((by.last() - by.first()).sum())


def _first_delta(
    m: pd.DataFrame, names: tuple[str, ...], labels_has: str | None = None
) -> float | None:
    """``_delta`` of the first of ``names`` the server reported."""
    return next(
        (d for n in names if (d := _delta(m, n, labels_has)) is not None),
        None,
    )


def prefix_cache_by_point(view: RunView) -> dict[int, PrefixCache]:
    """Per point index, the prefix-cache hits over that point: Δcached_tokens_total /
    Δprompt_tokens_total between the point's first and last scrape (the server view's rule;
    what was counted before the first scrape of a point, within one scrape interval, is
    not in it). {} when the server exposed no /metrics."""
    if view.path is None or not (view.path / "samples.parquet").is_file():
        return {}
    m = metric_samples(view.path)
    if m is None:
        return {}
    roles = server_metric_names(engine_of(view))
    out = {}
    for index, rows in m.groupby("point"):
        cached = _first_delta(rows, roles.get("cached_tokens_total", ()))
        prompt = _first_delta(rows, roles.get("prompt_tokens_total", ()))
        if cached is not None or prompt is not None:
            out[int(index)] = PrefixCache(cached, prompt)
    return out


def no_view_line(view: RunView) -> str:
    """The one line shown instead of empty charts for an engine that reports none of this."""
    if view.imported:
        return "imported from a file: the tool's summaries only, no server-side view."
    engine = (view.spec.get("server") or {}).get("engine") or "this engine"
    return f"{engine} reports no server-side view (no /metrics, no scheduler lines)."


def server_view(view: RunView, point: int | None = None) -> ServerView:
    """Over the whole run's points, or over one point's (``point``: its index)."""
    if view.path is None:
        return ServerView("none")
    kv_capacity = kv_capacity_tokens(view)
    file = view.path / "samples.parquet"
    if file.is_file():
        stat = file.stat()
        got = _from_metrics(
            str(file), stat.st_mtime_ns, stat.st_size, kv_capacity, point, engine_of(view)
        )
        if got is not None:
            return got
    log = view.path / "server.log"
    if not log.is_file():
        return ServerView("none")
    if point is None:
        return _from_log(parse_scheduler_lines(log.read_text(errors="replace")), kv_capacity)
    # one point's lines: placed on the run's clock (core.analysis.timelines)
    lines = [r for _, r in log_lines_by_point(view).get(point, [])]
    return _from_log(lines, kv_capacity)


@lru_cache(maxsize=128)
def _from_metrics(
    file: str,
    _mtime_ns: int,
    _size: int,
    kv_capacity: float | None,
    point: int | None = None,
    engine: str | None = None,
) -> ServerView | None:
    m = metric_samples(Path(file).parent)
    if m is None:
        return None
    if point is not None:
        m = m[m["point"] == point]
        if m.empty:
            return ServerView("metrics")

    def series(*names: str) -> pd.Series:
        for n in names:
            s = m.loc[m["name"] == n, "value"].dropna()
            if not s.empty:
                return s
        return pd.Series(dtype=float)

    def peak(*names: str) -> float | None:
        s = series(*names)
        return float(s.max()) if not s.empty else None

    roles = server_metric_names(engine)
    used = series(*roles.get("kv_used_tokens", ()))
    capacity = kv_capacity
    if used.empty and capacity:
        # vLLM states only the share of its pool in use (vllm:kv_cache_usage_perc)
        used = series(*roles.get("kv_usage", ())) * capacity
    passes = roles.get("graph_passes_total", ())

    def share(phase: str) -> float | None:
        graph = _first_delta(m, passes, f"mode={phase}_cuda_graph")
        eager = _first_delta(m, passes, f"mode={phase}_none")
        total = (graph or 0.0) + (eager or 0.0)
        return None if (graph is None and eager is None) or total <= 0 else (graph or 0.0) / total

    cached = _first_delta(m, roles.get("cached_tokens_total", ()))
    prompt = _first_delta(m, roles.get("prompt_tokens_total", ()))
    return ServerView(
        source="metrics",
        kv_used_peak_tokens=float(used.max()) if not used.empty else None,
        kv_used_p50_tokens=float(used.median()) if not used.empty else None,
        kv_capacity_tokens=capacity,
        running_peak=peak(*roles.get("running_reqs", ())),
        queue_peak=peak(*roles.get("queued_reqs", ())),
        retracted_peak=peak(*roles.get("retracted_reqs", ())),
        retracted_total=_first_delta(m, roles.get("retracted_total", ())),
        paused_peak=peak(*roles.get("paused_reqs", ())),
        gen_throughput_peak_tok_s=peak(*roles.get("gen_throughput_tok_s", ())),
        decode_graph_share=share("decode"),
        prefill_graph_share=share("prefill"),
        prefix_cache_hit_rate=cached / prompt if cached is not None and prompt else None,
    )


def _from_log(lines: list[dict[str, Any]], kv_capacity: float | None) -> ServerView:
    if not lines:
        return ServerView("none")
    decode = [r for r in lines if r["kind"] == "decode"]

    def peak(key: str, rows: list[dict[str, Any]] = lines) -> float | None:
        vals = [float(r[key]) for r in rows if isinstance(r.get(key), int | float)]
        return max(vals) if vals else None

    used = sorted(float(r["tokens_used"]) for r in decode if "tokens_used" in r)
    graphs = [bool(r["graph"]) for r in decode if "graph" in r]
    return ServerView(
        source="log",
        kv_used_peak_tokens=used[-1] if used else None,
        kv_used_p50_tokens=used[len(used) // 2] if used else None,
        kv_capacity_tokens=kv_capacity,
        running_peak=peak("running_req"),
        queue_peak=peak("queue_req"),
        gen_throughput_peak_tok_s=peak("gen_throughput_tok_s", decode),
        decode_graph_share=sum(graphs) / len(graphs) if graphs else None,
    )
