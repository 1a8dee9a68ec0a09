"""The server's view over time, beside the client's, per run and point.

One long table per run (``Timeline.frame``: ``point, series, t_s, t_point_s, value, source``)
on two clocks: ``t_s`` is the run's clock (seconds since the sampler started, the clock of
``samples.parquet``), ``t_point_s`` is seconds since the point started (the clock of
``records.parquet``), so the arms of a comparison overlay at one point.

Where each point started on the run's clock: ``summary.json``'s ``started_run_s`` (written by
the pipeline since this module), else its ``started_at`` minus the ``point 0`` step's
``started_at`` (the sampler starts just before that step; a few ms apart). The server log's
scheduler lines carry their host's wall clock, naive: they are mapped to the run's clock
through the run's start, with the log host's UTC offset taken as the whole quarter hour that
puts the log's first stamp next to the ``launch`` step.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from core.analysis.runs import RunView
from core.engines.registry import find_engine
from core.run_folder import point_step
from core.scheduler_log import parse_scheduler_lines

__all__ = [
    "CLIENT_SERIES",
    "SERIES",
    "TIMELINE_MAX_POINTS",
    "Timeline",
    "downsample",
    "kv_capacity_tokens",
    "log_lines_by_point",
    "metric_samples",
    "point_spans",
    "run_timeline",
    "series_words",
    "timelines_table",
]

Source = Literal["metrics", "log", "none"]

# series name -> (words with unit, how a bin of it is summarised when downsampling): levels
# keep their peak (a filled KV pool must not be averaged away), rates their mean.
SERIES: dict[str, tuple[str, str]] = {
    "running_reqs": ("running requests (server)", "max"),
    "queued_reqs": ("queued requests (server)", "max"),
    "kv_used_tokens": ("KV tokens used", "max"),
    "kv_usage": ("KV usage (fraction of the pool)", "max"),
    "gen_throughput_tok_s": ("generation throughput (server, tok/s)", "mean"),
    "retracted_reqs": ("retracted requests", "max"),
    "decode_graph_share": ("decode passes in CUDA graphs (fraction)", "mean"),
    "client_in_flight_reqs": ("requests in flight (client)", "max"),
    "client_output_tok_s": ("output throughput (client, tok/s)", "mean"),
}
CLIENT_SERIES = ("client_in_flight_reqs", "client_output_tok_s")
# The report and the exports carry at most this many points per series, run and point.
TIMELINE_MAX_POINTS = 300

# The server's gauges a timeline draws; which /metrics names state each is the engine's
# declaration (``server_metrics`` of its ENGINE in core/engines/), first found wins.
_GAUGES = ("running_reqs", "queued_reqs", "kv_used_tokens", "kv_usage", "gen_throughput_tok_s")
# ... and the counters and gauges read besides (retractions, CUDA-graph passes)
_OTHER_ROLES = ("retracted_reqs", "retracted_total", "graph_passes_total")


def server_metric_names(engine: str | None) -> dict[str, tuple[str, ...]]:
    """role → the /metrics names that state it, from the engine's declaration; {} for an
    engine no registration here knows (an imported run's), whose server view is then none."""
    spec = find_engine(engine)
    return {k: spec.metric_names(k) for k in spec.server_metrics} if spec is not None else {}


def engine_of(view: RunView) -> str | None:
    engine = (view.spec.get("server") or {}).get("engine")
    return engine if isinstance(engine, str) else None


_LOG_FIELDS = {
    "running_reqs": "running_req",
    "queued_reqs": "queue_req",
    "kv_used_tokens": "tokens_used",
    "kv_usage": "token_usage",
    "gen_throughput_tok_s": "gen_throughput_tok_s",
    "retracted_reqs": "retracted_req",
}
_COLUMNS = ["point", "series", "t_s", "t_point_s", "value", "source"]


@dataclass(frozen=True)
class Timeline:
    """One run's series. ``source`` is where the server side came from: ``metrics`` (the
    /metrics scrapes), ``log`` (scheduler lines: metrics were off) or ``none`` (the engine
    said nothing; the client series may still be there)."""

    run_id: str
    source: Source
    frame: pd.DataFrame  # columns _COLUMNS, sorted by point, series, t_s
    kv_capacity_tokens: float | None = None

    def at(self, point: int, series: str | None = None) -> pd.DataFrame:
        f = self.frame[self.frame["point"] == point]
        return f if series is None else f[f["series"] == series]

    def downsampled(self, max_points: int = TIMELINE_MAX_POINTS) -> Timeline:
        return Timeline(
            self.run_id, self.source, downsample(self.frame, max_points), self.kv_capacity_tokens
        )

    @property
    def has_server(self) -> bool:
        return self.source != "none" and bool((~self.frame["series"].isin(CLIENT_SERIES)).any())


def _epoch(stamp: Any) -> float | None:
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        t = datetime.fromisoformat(stamp)
    except ValueError:
        return None
    return (t if t.tzinfo else t.replace(tzinfo=UTC)).timestamp()


def _step_started(view: RunView, name: str) -> float | None:
    for step in view.status.steps:
        if step.step == name:
            return _epoch(step.started_at)
    return None


def point_spans(view: RunView) -> dict[int, tuple[float, float]]:
    """Point index -> (start, end) on the run's clock, in s; end is the last request's end
    (or its start when none ended). Points whose start cannot be placed are left out."""
    origin = _step_started(view, point_step(0))
    spans: dict[int, tuple[float, float]] = {}
    for s in view.points:
        idx = s.get("index")
        if not isinstance(idx, int):
            continue
        start = s.get("started_run_s")
        if not isinstance(start, int | float):
            at = _epoch(s.get("started_at"))
            if at is None or origin is None:
                continue
            start = max(at - origin, 0.0)
        duration = ((s.get("metrics") or {}).get("duration_s")) or 0.0
        spans[idx] = (float(start), float(start) + float(duration))
    if view.path is not None:
        for idx, (start, end) in list(spans.items()):
            ends = _records(view.path, idx)
            if ends is not None and len(ends):
                last = ends[["send_s", "end_s"]].max(skipna=True).max()
                spans[idx] = (start, start + max(float(last), end - start))
    return spans


def _records(run_path: Path, point: int) -> pd.DataFrame | None:
    file = run_path / "points" / f"{point:03d}" / "records.parquet"
    if not file.is_file():
        return None
    stat = file.stat()
    return _read_records(str(file), stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=64)
def _read_records(file: str, _mtime_ns: int, _size: int) -> pd.DataFrame | None:
    cols = ["send_s", "end_s", "chunk_s", "ok", "output_tokens_server", "output_tokens_requested"]
    try:
        names = pq.read_schema(file).names
        return pq.read_table(file, columns=[c for c in cols if c in names]).to_pandas()
    except (OSError, ValueError):
        return None


def _bin_s(duration_s: float, interval_s: float) -> float:
    # ~100 bins a point, never finer than the server's sampling interval, so the client's
    # rate reads at the same grain as the server's gen throughput beside it
    return max(duration_s / 100.0, interval_s)


def _client_series(
    records: pd.DataFrame, interval_s: float
) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """In flight at each send/end instant (a step series) and output tok/s in bins, on the
    point's clock. A request that never ended counts as in flight to the point's end."""
    sends = records["send_s"].to_numpy(dtype=float)
    if not len(sends):
        return []
    ends = records["end_s"].to_numpy(dtype=float)
    horizon = float(np.nanmax(np.concatenate([sends, ends])))
    ends = np.where(np.isnan(ends), horizon, ends)
    times = np.concatenate([sends, ends])
    steps = np.concatenate([np.ones(len(sends)), -np.ones(len(ends))])
    order = np.lexsort((steps, times))  # at one instant, ends before sends
    t, in_flight = times[order], np.cumsum(steps[order])
    out: list[tuple[str, np.ndarray, np.ndarray]] = [("client_in_flight_reqs", t, in_flight)]

    # Output tokens: each request's count spread over its content chunks (a chunk may carry
    # several tokens; the total is the server's count, else the requested length). The
    # per-request rule in Python, the per-chunk work in numpy: a c=640 point has millions
    # of chunks.
    times_of: list[np.ndarray] = []
    share_of: list[float] = []
    for row in records.itertuples(index=False):
        chunks = getattr(row, "chunk_s", None)
        if chunks is None or not len(chunks) or not bool(getattr(row, "ok", True)):
            continue
        n: Any = getattr(row, "output_tokens_server", None)
        if n is None or (isinstance(n, float) and math.isnan(n)):
            n = getattr(row, "output_tokens_requested", None) or len(chunks)
        times_of.append(np.asarray(chunks, dtype=float))
        share_of.append(float(n) / len(chunks))
    if times_of:
        chunk_t = np.concatenate(times_of)
        chunk_n = np.repeat(share_of, [len(c) for c in times_of])
        width = _bin_s(horizon, interval_s)
        edges = np.arange(0.0, horizon + width, width)
        if len(edges) < 2:
            edges = np.array([0.0, width])
        tokens, _ = np.histogram(chunk_t, bins=edges, weights=chunk_n)
        out.append(("client_output_tok_s", edges[:-1] + width / 2, tokens / width))
    return out


def _primary(rows: pd.DataFrame) -> pd.DataFrame:
    # one scheduler's view: a TP group repeats its numbers on every tp_rank
    labels = rows["labels"].fillna("")
    ranked = labels.str.contains("tp_rank=", regex=False)
    if ranked.any():
        rows = rows[~ranked | labels.str.contains("tp_rank=0", regex=False)]
    return rows


def _graph_share(passes: pd.DataFrame) -> tuple[str, np.ndarray, np.ndarray] | None:
    """The share of decode passes run in CUDA graphs, between scrapes (None: not counted)."""
    mode = passes["labels"].fillna("").str.extract(r"mode=(\w+)", expand=False)
    wide = passes.assign(mode=mode).pivot_table(
        index="t_s", columns="mode", values="value", aggfunc="sum"
    )
    if not {"decode_cuda_graph", "decode_none"} & set(wide.columns):
        return None
    graph = wide.get("decode_cuda_graph", pd.Series(0.0, index=wide.index)).fillna(0.0)
    eager = wide.get("decode_none", pd.Series(0.0, index=wide.index)).fillna(0.0)
    dg, de = graph.diff(), eager.diff()
    total_d = dg + de
    share = (dg / total_d).where(total_d > 0).dropna()
    if share.empty:
        return None
    return ("decode_graph_share", share.index.to_numpy(float), share.to_numpy(float))


def _metric_rows(
    m: pd.DataFrame, roles: dict[str, tuple[str, ...]]
) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """The server's series from the /metrics scrapes of one point (long rows); ``roles``:
    ``server_metric_names`` of the run's engine."""
    out: list[tuple[str, np.ndarray, np.ndarray]] = []
    # split by name once (a mask per name over every scrape cost more than the series)
    by_name = dict(tuple(m.groupby("name", sort=False, observed=True)))
    none = m.iloc[:0]

    def named(name: str) -> pd.DataFrame:
        return by_name.get(name, none)

    def first(role: str) -> pd.DataFrame:
        return next(
            (rows for n in roles.get(role, ()) if not (rows := _primary(named(n))).empty), none
        )

    for series in _GAUGES:
        for name in roles.get(series, ()):
            rows = _primary(named(name))
            if not rows.empty:
                # dp ranks hold separate batches: their requests add up
                by = rows.groupby("t_s")["value"]
                agg = by.max() if series in ("kv_usage", "gen_throughput_tok_s") else by.sum()
                out.append((series, agg.index.to_numpy(float), agg.to_numpy(float)))
                break

    retracted = first("retracted_reqs")
    total = first("retracted_total")
    if not total.empty:  # a counter: retracted since the point started
        by = total.groupby("t_s")["value"].sum()
        out.append(("retracted_reqs", by.index.to_numpy(float), (by - by.iloc[0]).to_numpy(float)))
    elif not retracted.empty:
        by = retracted.groupby("t_s")["value"].sum()
        out.append(("retracted_reqs", by.index.to_numpy(float), by.to_numpy(float)))

    passes = first("graph_passes_total")
    if not passes.empty and (share := _graph_share(passes)) is not None:
        out.append(share)
    return out


def _log_offset_s(view: RunView, lines: list[dict[str, Any]]) -> float | None:
    """Seconds to add to a line's stamp (read as UTC) to get the run's clock."""
    origin = _step_started(view, point_step(0))
    launch = _step_started(view, "launch") or origin
    first = next((_epoch(r["ts"]) for r in lines if r.get("ts")), None)
    if origin is None or launch is None or first is None:
        return None
    # the log host's UTC offset: a whole quarter hour (its first stamp is at most minutes
    # after the launch step; real offsets are multiples of 15 min)
    tz_s = round((first - launch) / 900.0) * 900.0
    return -tz_s - origin


def log_lines_by_point(view: RunView) -> dict[int, list[tuple[float, dict[str, Any]]]]:
    """The server log's scheduler lines of each point, as (run-clock time, line), one rank's
    lines only (a TP8 server prints each batch eight times)."""
    if view.path is None:
        return {}
    log = view.path / "server.log"
    if not log.is_file():
        return {}
    lines = parse_scheduler_lines(log.read_text(errors="replace"))
    ranks = {r["rank"] for r in lines}
    if len(ranks) > 1:
        lines = [r for r in lines if r["rank"] == min(ranks, key=lambda x: (len(x), x))]
    offset = _log_offset_s(view, lines)
    if offset is None:
        return {}
    # (earliest, latest) moment of each line: a stamp without a fraction is truncated to
    # its second (SGLANG_LOG_MS=1 gives ms)
    stamped = [
        (t + offset, t + offset + (0.001 if "." in r["ts"] else 1.0), r)
        for r in lines
        if (t := _epoch(r.get("ts"))) is not None
    ]
    out: dict[int, list[tuple[float, dict[str, Any]]]] = {}
    for idx, (start, end) in point_spans(view).items():
        # a line belongs to a point only if all of its second does: points follow each
        # other within ~0.1 s, and a point-1 batch counted in point 0 would fake its peak
        mine = [((a + b) / 2, r) for a, b, r in stamped if a >= start and b <= end]
        if mine:
            out[idx] = mine
    return out


def _log_series(view: RunView) -> dict[int, list[tuple[str, np.ndarray, np.ndarray]]]:
    out: dict[int, list[tuple[str, np.ndarray, np.ndarray]]] = {}
    for idx, mine in log_lines_by_point(view).items():
        series: list[tuple[str, np.ndarray, np.ndarray]] = []
        for name, key in _LOG_FIELDS.items():
            # gen throughput is a decode line's field; the rest both kinds of line carry
            rows = [
                (t, float(r[key]))
                for t, r in mine
                if isinstance(r.get(key), int | float)
                and (r["kind"] == "decode" or name != "gen_throughput_tok_s")
            ]
            if rows:
                t_arr, v_arr = np.array(rows, dtype=float).T
                series.append((name, t_arr, v_arr))
        graphs = [
            (t, 1.0 if r["graph"] else 0.0)
            for t, r in mine
            if r["kind"] == "decode" and "graph" in r
        ]
        if graphs:
            t_arr, v_arr = np.array(graphs, dtype=float).T
            series.append(("decode_graph_share", t_arr, v_arr))
        if series:
            out[idx] = series
    return out


def metric_samples(run_path: Path) -> pd.DataFrame | None:
    """The /metrics scrapes taken while a point ran (``samples.parquet``, source
    ``metrics``, point >= 0); None: no such samples. Read once per file version (a
    finished run's file never changes) and shared by this module and
    ``core.analysis.server_view``: a page asks for it once per chart and per point."""
    file = run_path / "samples.parquet"
    if not file.is_file():
        return None
    stat = file.stat()
    return _read_samples(str(file), stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=64)
def _read_samples(file: str, _mtime_ns: int, _size: int) -> pd.DataFrame | None:
    try:
        df = pd.read_parquet(file)
    except (OSError, ValueError):
        return None
    if df.empty or "source" not in df.columns:
        return None
    m = df[(df["source"] == "metrics") & (df["point"].fillna(-1) >= 0)]
    return m if not m.empty else None


@lru_cache(maxsize=64)
def _metric_series(
    file: str, mtime_ns: int, size: int, engine: str | None
) -> tuple[tuple[int, str, np.ndarray, np.ndarray], ...]:
    """The server's series of every point from one samples file version: (point, series,
    t_s, value)."""
    m = _read_samples(file, mtime_ns, size)
    if m is None:
        return ()
    roles = server_metric_names(engine)
    # every /metrics name a timeline reads (filtered once: SGLang exports hundreds)
    wanted = {n for r in (*_GAUGES, *_OTHER_ROLES) for n in roles.get(r, ())}
    m = m[m["name"].isin(wanted)]
    return tuple(
        (int(point), name, t, v)
        for point, rows in m.groupby("point")
        for name, t, v in _metric_rows(rows, roles)
    )


def kv_capacity_tokens(view: RunView) -> float | None:
    """The KV pool's size in tokens: the server's own gauge where it was sampled, else what
    the facts step read (``/server_info`` or the start-up log)."""
    samples = metric_samples(view.path) if view.path is not None else None
    pool = server_metric_names(engine_of(view)).get("kv_cache_tokens", ())
    if samples is not None and pool:
        rows = samples.loc[samples["name"].isin(pool), "value"].dropna()
        if not rows.empty and rows.max() > 0:
            return float(rows.max())
    for key in ("max_total_num_tokens", "kv_cache_tokens"):
        x = view.facts.get(key)
        if isinstance(x, int | float) and not isinstance(x, bool) and x > 0:
            return float(x)
    return None


def _point_starts(view: RunView) -> dict[int, float]:
    """Point index -> its start on the run's clock (s): ``point_spans`` without reading each
    point's records for its end (a timeline places its rows by the start only)."""
    origin = _step_started(view, point_step(0))
    starts: dict[int, float] = {}
    for s in view.points:
        idx = s.get("index")
        if not isinstance(idx, int):
            continue
        start = s.get("started_run_s")
        if isinstance(start, int | float):
            starts[idx] = float(start)
        elif (at := _epoch(s.get("started_at"))) is not None and origin is not None:
            starts[idx] = max(at - origin, 0.0)
    return starts


@lru_cache(maxsize=256)
def _client_series_of(
    file: str, mtime_ns: int, size: int, interval_s: float
) -> tuple[tuple[str, np.ndarray, np.ndarray], ...]:
    """``_client_series`` of one records file, once per file version (a finished run's
    records never change; a running point's file gets a new mtime with each write)."""
    records = _read_records(file, mtime_ns, size)
    return () if records is None else tuple(_client_series(records, interval_s))


def _frame(
    parts: Sequence[tuple[int, str, np.ndarray, np.ndarray, str]], starts: dict[int, float]
) -> pd.DataFrame:
    """The long table (``_COLUMNS``) of ``parts``, sorted by point, series and time."""
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype=float) for c in _COLUMNS})
    sizes = [len(p[2]) for p in parts]
    t_s = np.concatenate([p[2] for p in parts])
    frame = pd.DataFrame(
        {
            "point": np.repeat([p[0] for p in parts], sizes),
            "series": np.repeat(np.array([p[1] for p in parts], dtype=object), sizes),
            "t_s": t_s,
            "t_point_s": t_s - np.repeat([starts.get(p[0], 0.0) for p in parts], sizes),
            "value": np.concatenate([p[3] for p in parts]),
            "source": np.repeat(np.array([p[4] for p in parts], dtype=object), sizes),
        }
    )
    return frame.sort_values(["point", "series", "t_s"], kind="stable").reset_index(drop=True)


def run_timeline(view: RunView, points: Collection[int] | None = None) -> Timeline:
    """Every series of one run; the server's from /metrics where it was sampled, else from
    the log's scheduler lines; the client's from each point's records. ``points``: the
    point indices whose client series to compute (None: every point). The server's series
    are always every point's (which points have a server view decides what a page offers;
    the client's, one pass over every request's chunks, is what a chart of one point
    need not pay for the others)."""
    starts = _point_starts(view)
    # (point, series, t_s, value, source): one frame is built from all of them at the end
    # (a DataFrame per series costs more than the series' numbers)
    parts: list[tuple[int, str, np.ndarray, np.ndarray, str]] = []

    def add(point: int, series: str, t_s: np.ndarray, value: np.ndarray, source: str) -> None:
        parts.append((point, series, np.asarray(t_s, float), np.asarray(value, float), source))

    source: Source = "none"
    samples = metric_samples(view.path) if view.path is not None else None
    running = server_metric_names(engine_of(view)).get("running_reqs", ())
    if samples is not None and view.path is not None and samples["name"].isin(running).any():
        source = "metrics"
        stat = (view.path / "samples.parquet").stat()
        samples_file = str(view.path / "samples.parquet")
        scraped = _metric_series(samples_file, stat.st_mtime_ns, stat.st_size, engine_of(view))
        for point, name, t, v in scraped:
            add(point, name, t, v, "metrics")
    else:
        by_point = _log_series(view)
        if by_point:
            source = "log"
        for point, series in by_point.items():
            for name, t, v in series:
                add(point, name, t, v, "log")
    interval = (view.spec.get("plan") or {}).get("metrics_interval_s")
    interval_s = float(interval) if isinstance(interval, int | float) and interval > 0 else 1.0
    if view.path is not None:
        for point, start in starts.items():
            if points is not None and point not in points:
                continue
            file = view.path / "points" / f"{point:03d}" / "records.parquet"
            if not file.is_file():
                continue
            stat = file.stat()
            for name, t, v in _client_series_of(
                str(file), stat.st_mtime_ns, stat.st_size, interval_s
            ):
                add(point, name, t + start, v, "client")
    capacity = kv_capacity_tokens(view)
    if capacity:
        # KV usage as used / pool where both are known: SGLang's token_usage is rounded
        # (0.00 for 7,878 of 5.5 M tokens), and the fraction is what a memory knob acts on
        has_used = {p[0] for p in parts if p[1] == "kv_used_tokens"}
        parts = [p for p in parts if not (p[1] == "kv_usage" and p[0] in has_used)]
        parts += [
            (p[0], "kv_usage", p[2], p[3] / capacity, p[4])
            for p in parts
            if p[0] in has_used and p[1] == "kv_used_tokens"
        ]
    frame = _frame(parts, starts)
    return Timeline(view.run_id, source, frame.reset_index(drop=True), capacity)


def downsample(frame: pd.DataFrame, max_points: int = TIMELINE_MAX_POINTS) -> pd.DataFrame:
    """At most ``max_points`` rows per (point, series): equal time bins, each series
    summarised its own way (``SERIES``: peaks for levels, means for rates), at the bin's
    mean time. A series already short enough is kept as it is."""
    if frame.empty:
        return frame
    keys = [k for k in ("run_id", "point", "series") if k in frame.columns]
    out: list[pd.DataFrame] = []
    for key, rows in frame.groupby(keys, sort=False):
        if len(rows) <= max_points:
            out.append(rows)
            continue
        series = key[-1] if isinstance(key, tuple) else key
        how = SERIES.get(str(series), ("", "mean"))[1]
        t = rows["t_s"].to_numpy(float)
        edges = np.linspace(t.min(), t.max(), max_points + 1)
        binned = rows.assign(
            _bin=np.clip(np.searchsorted(edges, t, side="right") - 1, 0, max_points - 1)
        )
        g = binned.groupby("_bin")
        agg = g.agg(
            t_s=("t_s", "mean"),
            t_point_s=("t_point_s", "mean"),
            value=("value", how),
        )
        first = g.first()
        for c in rows.columns:
            if c not in agg.columns:
                agg[c] = first[c]
        out.append(agg[list(rows.columns)].reset_index(drop=True))
    return pd.concat(out, ignore_index=True)


def series_words(series: str) -> str:
    return SERIES.get(series, (series.replace("_", " "), ""))[0]


def timelines_table(
    names: Sequence[str], timelines: Sequence[Timeline], max_points: int = TIMELINE_MAX_POINTS
) -> pd.DataFrame:
    """The downsampled series of several runs in one long table (the exports'), each row
    with its run's display name and where the server's side came from."""
    cols = ["run_id", "name", "server_source", *_COLUMNS]
    frames = [
        downsample(t.frame, max_points).assign(run_id=t.run_id, name=name, server_source=t.source)
        for name, t in zip(names, timelines, strict=True)
        if not t.frame.empty
    ]
    if not frames:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in cols})
    return pd.concat(frames, ignore_index=True)[cols]
