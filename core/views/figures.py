"""Plotly figures for the portal's Run and Compare pages (no Streamlit here).

Every function returns a ``plotly.graph_objects.Figure`` with a titled, unit-labelled
layout on ``plotly_white``; an empty input gives a figure that says so in words rather
than an empty plot.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio
import pyarrow as pa
import pyarrow.compute as pc

from core.analysis.memory import run_peak_gpu_mib
from core.analysis.points import point_key
from core.analysis.runs import RunView, run_labels
from core.metrics import as_number, metric_label

__all__ = [
    "ARM_PALETTE",
    "CDF_MAX_POINTS",
    "MEMORY_PART_COLOURS",
    "SMALL_PART",
    "apply_template",
    "arm_bands_figure",
    "arm_colours",
    "cdf_figure",
    "colour_of",
    "frontier_figure",
    "gpu_memory_figure",
    "label_small_parts",
    "layout",
    "memory_headroom_figure",
    "metric_vs_concurrency",
    "no_gpu_samples_line",
    "no_memory_line",
    "note",
    "rgb_of",
]

# One colour per arm name on every chart, page and report: the baseline (the control)
# takes the first, the other arms the next in their order (``arm_colours``).
ARM_PALETTE = (
    "#4c78a8",
    "#f58518",
    "#54a24b",
    "#e45756",
    "#b279a2",
    "#72b7b2",
    "#9d755d",
    "#eeca3b",
)
TEMPLATE = "plotly_white"
HEIGHT = 380
# A CDF of more values than this is drawn through this many quantiles (ITL can have
# hundreds of thousands of entries; the curve looks the same).
CDF_MAX_POINTS = 2000


def _arm_of(name: str) -> str:
    """The arm a display name belongs to (``graphs on · c6a73d`` is arm ``graphs on``)."""
    return name.rsplit(" · ", 1)[0]


def arm_colours(names: Sequence[str], baseline: str | None = None) -> dict[str, str]:
    """Display name -> colour: the baseline's arm first, then each arm in order; the
    trials of one arm share its colour."""
    arms = list(dict.fromkeys(_arm_of(n) for n in names))
    if baseline is not None and _arm_of(baseline) in arms:
        arms.remove(_arm_of(baseline))
        arms.insert(0, _arm_of(baseline))
    colour = {a: ARM_PALETTE[i % len(ARM_PALETTE)] for i, a in enumerate(arms)}
    return {n: colour[_arm_of(n)] for n in names}


def colour_of(colours: Mapping[str, str] | None, name: str, position: int = 0) -> str:
    """THE colour of a run or an arm on a chart: its own in ``colours`` (the page's
    ``arm_colours``, made once from the experiment's arm order), else its arm's (``graphs on ·
    c6a73d`` is arm ``graphs on``); by ``position`` only on a chart given no colours."""
    given = colours or {}
    return given.get(name) or given.get(_arm_of(name)) or ARM_PALETTE[position % len(ARM_PALETTE)]


def apply_template(fig: go.Figure) -> go.Figure:
    """``plotly_white`` on ``fig``, assigned the way plotly assigns its own default template
    (``BaseFigure._initialize_layout_template``): without validating it again.
    ``update_layout(template=...)`` deep-copies and re-validates the registered template,
    24 trace types' defaults included: 30-150 ms per figure on 2 cores, most of a chart
    page's and of an HTML report's Python time (docs/BENCHMARKS.md §7.3)."""
    registered = pio.templates[TEMPLATE]  # validated once, when plotly registered it
    layout_obj = fig.layout
    validate = layout_obj._validate
    layout_obj._validate = False
    try:
        layout_obj.template = registered
    finally:
        layout_obj._validate = validate
    return fig


def layout(fig: go.Figure, title: str, x_title: str, y_title: str) -> go.Figure:
    """Every chart's look: title top left, the legend below the x axis, axis titles."""
    apply_template(fig)
    fig.update_layout(
        title={"text": title, "x": 0.01, "xanchor": "left"},
        height=HEIGHT,
        margin={"l": 60, "r": 20, "t": 60, "b": 50},
        # below the x axis: above the plot, a legend of several arms wrapped
        # onto the title (plotly grows the bottom margin to fit it)
        legend={"orientation": "h", "yanchor": "top", "y": -0.2, "xanchor": "left", "x": 0.0},
        xaxis_title=x_title,
        yaxis_title=y_title,
    )
    return fig


def note(fig: go.Figure, text: str) -> go.Figure:
    """A centred message on an otherwise empty plot."""
    fig.add_annotation(
        text=text,
        xref="paper",
        yref="paper",
        x=0.5,
        y=0.5,
        showarrow=False,
        font={"size": 14, "color": "#666"},
    )
    fig.update_xaxes(showticklabels=False)
    fig.update_yaxes(showticklabels=False)
    return fig


# --- CDF --------------------------------------------------------------------------------------


def _ecdf(values: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    x = np.sort(np.asarray(values, dtype=np.float64))
    n = x.size
    y = np.arange(1, n + 1, dtype=np.float64) / n
    if n > CDF_MAX_POINTS:
        idx = np.unique(np.linspace(0, n - 1, CDF_MAX_POINTS).round().astype(np.int64))
        x, y = x[idx], y[idx]
    return x, y


def cdf_figure(
    series: dict[str, list[float]], metric_label: str, colours: dict[str, str] | None = None
) -> go.Figure:
    """One empirical CDF per run (``series``: run name -> values in ms; ``colours``: name
    -> colour, ``arm_colours``). A run with no values gets no line and is named in the
    title."""
    fig = go.Figure()
    empty = [name for name, values in series.items() if not values]
    for i, (name, values) in enumerate(series.items()):
        if not values:
            continue
        x, y = _ecdf(values)
        fig.add_trace(
            go.Scatter(
                x=x,
                y=y,
                mode="lines",
                name=name,
                line={"shape": "hv", "width": 2, "color": colour_of(colours, name, i)},
                hovertemplate=f"{name}<br>%{{x:.2f}} ms<br>fraction ≤: %{{y:.3f}}<extra></extra>",
            )
        )
    unit = "" if "(ms)" in metric_label else " (ms)"
    title = f"{metric_label} CDF"
    if not series:
        title += " — no runs selected"
    elif empty:
        title += f" — no values for {', '.join(empty)}"
    layout(fig, title, f"{metric_label}{unit}", "fraction of values ≤ x")
    fig.update_yaxes(range=[0, 1.02])
    if not fig.data:
        note(fig, "no values to plot")
    return fig


# --- metric vs concurrency --------------------------------------------------------------------


def _value(summary: dict[str, Any], metric: str) -> float | None:
    return as_number((summary.get("metrics") or {}).get(metric))


def _shape_text(shape: tuple[float | None, int | None, int | None]) -> str:
    rate, inp, out = shape
    rate_s = "?" if rate is None else ("inf" if math.isinf(rate) else f"{rate:g}")
    return f"rate={rate_s} in={inp} out={out}"


def metric_vs_concurrency(
    views: Sequence[RunView],
    metric: str,
    names: Sequence[str] | None = None,
    colours: dict[str, str] | None = None,
) -> go.Figure:
    """``metric`` against concurrency (log2 axis), one line per run. When the runs hold
    points of more than one (rate, input, output) shape, one line per run and shape, so a
    line never joins different loads. Unbounded-concurrency points are left out (named
    in the title). ``names`` (``arm_names``) label the lines, coloured by ``colours``."""
    fig = go.Figure()
    labels = list(names) if names is not None else run_labels(views)
    shapes = sorted(
        {point_key(s)[1:] for v in views for s in v.points},
        key=lambda k: tuple(-1.0 if x is None else float(x) for x in k),
    )
    several = len(shapes) > 1
    xs_all: set[int] = set()
    unbounded = 0
    for i, (lab, v) in enumerate(zip(labels, views, strict=True)):
        for shape in shapes:
            pts = []
            for s in v.points:
                key = point_key(s)
                if key[1:] != shape:
                    continue
                if key[0] is None:
                    unbounded += 1
                    continue
                pts.append((key[0], _value(s, metric), str(s.get("label", ""))))
            if not pts:
                continue
            pts.sort(key=lambda p: p[0])
            xs_all |= {p[0] for p in pts}
            name = f"{lab} · {_shape_text(shape)}" if several else lab
            fig.add_trace(
                go.Scatter(
                    x=[p[0] for p in pts],
                    y=[p[1] for p in pts],
                    customdata=[p[2] for p in pts],
                    mode="lines+markers",
                    name=name,
                    line={"color": colour_of(colours, lab, i)},
                    hovertemplate=(
                        f"{name}<br>%{{customdata}}<br>{metric_label(metric)}: "
                        "%{y:.4g}<extra></extra>"
                    ),
                )
            )
    label = metric_label(metric)
    title = f"{label} vs concurrency"
    if unbounded:
        title += f" ({unbounded} unbounded-concurrency point(s) not shown)"
    layout(fig, title, "concurrency (requests in flight, log2)", label)
    if xs_all:
        lo, hi = min(xs_all), max(xs_all)
        ticks = [2**i for i in range(math.floor(math.log2(lo)), math.ceil(math.log2(hi)) + 1)]
        pad = 0.15
        fig.update_xaxes(
            type="log",
            tickvals=ticks,
            ticktext=[str(t) for t in ticks],
            range=[math.log10(lo) - pad, math.log10(hi) + pad],
        )
    else:
        note(fig, "no points with a concurrency to plot")
    return fig


# --- GPU memory over time ---------------------------------------------------------------------


def gpu_memory_figure(
    samples: pa.Table | None, point_labels: dict[int, str] | None = None
) -> go.Figure:
    """GPU memory used (NVML, MiB) over the run's time axis, one line per GPU, with each
    point's span shaded. No GPU rows (CPU host, or no samples) gives an explicit note."""
    fig = go.Figure()
    title = "GPU memory used (MiB) while points ran"
    gpu = None
    if samples is not None and samples.num_rows and "name" in samples.column_names:
        gpu = samples.filter(pc.equal(samples["name"], "gpu_used_mib"))
    if gpu is None or gpu.num_rows == 0:
        layout(fig, title, "time since sampling started (s)", "used (MiB)")
        return note(fig, "no GPU samples (CPU host)")
    df = pd.DataFrame(
        {
            "t_s": gpu["t_s"].to_pylist(),
            "point": gpu["point"].to_pylist(),
            "gpu": gpu["labels"].to_pylist(),
            "value": gpu["value"].to_pylist(),
        }
    )
    df = df.sort_values("t_s")
    # each point's span as a shaded band, labelled at its top left; built as plain shapes
    # in one update (``add_vrect`` re-validates the figure's layout per band: ~25 ms each)
    shapes: list[dict[str, Any]] = []
    notes: list[dict[str, Any]] = []
    for i, (point, span) in enumerate(df.groupby("point", sort=True)["t_s"]):
        if point is None or int(point) < 0:
            continue
        text = (point_labels or {}).get(int(point), f"point {int(point)}")
        x0, x1 = float(span.min()), float(span.max())
        if x1 - x0 < 1e-9:  # one sample: still a visible band
            x0, x1 = x0 - 0.5, x1 + 0.5
        shapes.append(
            {
                "type": "rect",
                "xref": "x",
                "yref": "y domain",
                "x0": x0,
                "x1": x1,
                "y0": 0,
                "y1": 1,
                "line": {"width": 0},
                "opacity": 0.12,
                "fillcolor": "#4c78a8" if i % 2 else "#f58518",
                "layer": "below",
            }
        )
        notes.append(
            {
                "text": text,
                "xref": "x",
                "yref": "y domain",
                "x": x0,
                "y": 1,
                "xanchor": "left",
                "yanchor": "top",
                "showarrow": False,
                "font": {"size": 10},
            }
        )
    fig.update_layout(shapes=shapes, annotations=notes)
    for name, rows in df.groupby("gpu", sort=True):
        gpu_name = str(name).replace("gpu=", "GPU ")
        fig.add_trace(
            go.Scatter(
                x=rows["t_s"],
                y=rows["value"],
                mode="lines+markers",
                name=gpu_name,
                marker={"size": 4},
                customdata=rows["point"],
                hovertemplate=(
                    f"{gpu_name}<br>t=%{{x:.1f}} s<br>%{{y:.0f}} MiB"
                    "<br>point %{customdata}<extra></extra>"
                ),
            )
        )
    layout(fig, title, "time since sampling started (s)", "used (MiB)")
    fig.update_yaxes(rangemode="tozero")
    return fig


# --- memory headroom --------------------------------------------------------------------------

# GPU memory part → fill colour, the same on the start-up bars and the ledger (fixed across
# arms and outside ARM_PALETTE, so a part never reads as an arm)
MEMORY_PART_COLOURS: dict[str, str] = {
    "weights": "#525252",
    "KV cache": "#9ecae9",
    "CUDA graphs": "#fdae6b",
    "other at peak": "#c7c7c7",
    "free": "#edf5e9",
}
# A stacked part under this fraction of the longest bar is a hairline on screen: it gets
# a label with its size (CUDA graphs take ~0.4 GB beside ~118 GB of KV cache on an H200,
# and they are the cost a CUDA-graph A/B is about).
SMALL_PART = 0.03


def label_small_parts(
    fig: go.Figure,
    stacks: dict[str, list[tuple[str, float | None]]],
    horizontal: bool = False,
) -> go.Figure:
    """Name every stated part too thin to see, with its GB, an arrow pointing at it.
    ``stacks``: bar (its category on the axis) → its parts in stacking order, (name, GB);
    None (not stated) is not drawn and not labelled; a stated 0 is labelled (``0 GB``)."""
    longest = max((sum(v or 0.0 for _, v in parts) for parts in stacks.values()), default=0.0)
    if longest <= 0:
        return fig
    for bar, parts in stacks.items():
        base = 0.0
        placed = {1: 0, -1: 0}  # labels already on each side of this bar
        for name, value in parts:
            if value is None:
                continue
            if value < SMALL_PART * longest:
                mid = base + value / 2
                # the label sits inside the bar, on the side with room: from a sliver near
                # the bar's far end back towards its start, else forwards; each further
                # label on a side one step further, so two never overlap
                side = -1 if mid > longest / 2 else 1
                placed[side] += 1
                k = placed[side]
                fig.add_annotation(
                    x=mid if horizontal else bar,
                    y=bar if horizontal else mid,
                    text=f"{name}: {value:.2g} GB",
                    showarrow=True,
                    arrowhead=0,
                    arrowwidth=1,
                    arrowcolor="#333",
                    # a horizontal bar is short: labels in a row along it, staggered a
                    # little so they stay within a bar of a four-arm chart
                    ax=side * (70 + 125 * (k - 1)) if horizontal else 0,
                    ay=(9 if k % 2 == 0 else -9) if horizontal else -side * 34 * k,
                    bgcolor="rgba(255,255,255,0.9)",
                    bordercolor="#999",
                    borderwidth=1,
                    font={"size": 11, "color": "#333"},
                )
            base += value
    return fig


_PARTS = (
    ("weight_mem_gb", "weights"),
    ("kv_cache_gb", "KV cache"),
    ("graph_mem_gb", "CUDA graphs"),
    ("available_gpu_mem_gb", "free after start-up"),
)
_PART_COLOUR = {"free after start-up": MEMORY_PART_COLOURS["free"]}


# the headroom table's columns that hold memory (not the run's name, nor where the
# headroom came from)
_MEMORY_COLUMNS = (
    "kv_cache_tokens",
    "weight_mem_gb",
    "kv_cache_gb",
    "graph_mem_gb",
    "available_gpu_mem_gb",
    "gpu_total_gb",
    "peak_gpu_used_mib",
    "headroom_gb",
)


def _engines(views: Sequence[RunView]) -> str:
    names = dict.fromkeys(
        str((v.spec.get("server") or {}).get("engine") or "this engine") for v in views
    )
    return " and ".join(names) or "this engine"


def no_memory_line(df: pd.DataFrame, views: Sequence[RunView]) -> str | None:
    """The one line shown instead of the memory-headroom table and chart when no run
    stated any memory (``transformers serve`` on a CPU host: every cell "—", an empty
    chart); None when any run stated something. ``df``: ``memory_headroom(views)``."""
    for col in _MEMORY_COLUMNS:
        if col in df.columns and any(as_number(v) is not None for v in df[col]):
            return None
    if views and all(v.imported for v in views):
        return "Imported from a file: the tool's summaries only, no GPU memory."
    engines = _engines(views)
    verb = "report" if " and " in engines else "reports"
    return (
        f"{engines} {verb} no GPU memory (weights, KV cache, CUDA graphs, free after "
        "start-up), and no GPU was sampled while the points ran (a CPU host, or no "
        "NVML): "
        "no memory headroom to show."
    )


def no_gpu_samples_line(view: RunView) -> str | None:
    """The one line shown instead of the GPU-memory-over-time chart of a run whose samples
    hold no GPU row (a CPU host); None when there is a GPU series to draw."""
    if run_peak_gpu_mib(view.path) is not None:
        return None
    return (
        f"No GPU memory over time: no GPU was sampled while the points ran "
        f"({_engines([view])} on a CPU host, or no NVML)."
    )


def memory_headroom_figure(df: pd.DataFrame) -> go.Figure:
    """Stacked bars per run (GB, per GPU, as the server reports them): weights, KV cache,
    CUDA graphs, free after start-up. A part the server did not report is left out and
    named under the plot, never drawn as 0. ``df`` is ``core.analysis.memory.memory_headroom``'s."""
    fig = go.Figure()
    title = "GPU memory at start-up (GB per GPU)"
    runs = [] if df is None or df.empty else [str(r) for r in df["run_id"]]
    missing: list[str] = []
    stacks: dict[str, list[tuple[str, float | None]]] = {run: [] for run in runs}
    for col, name in _PARTS:
        values = (
            [as_number(v) for v in df[col]] if runs and col in df.columns else [None] * len(runs)
        )
        missing += [f"{name} ({run})" for run, v in zip(runs, values, strict=True) if v is None]
        if all(v is None for v in values):
            continue
        for run, v in zip(runs, values, strict=True):
            stacks[run].append((name, v))
        fill = _PART_COLOUR.get(name) or MEMORY_PART_COLOURS[name]
        fig.add_trace(
            go.Bar(
                x=runs,
                y=values,
                name=name,
                marker={"color": fill, "line": {"color": "#999", "width": 0.5}},
                hovertemplate=f"%{{x}}<br>{name}: %{{y:.2f}} GB<extra></extra>",
            )
        )
    label_small_parts(fig, stacks)
    if not fig.data and runs and "peak_gpu_used_mib" in df.columns:
        # No memory facts from the server: what NVML saw (peak used, and the rest).
        peaks = [as_number(v) for v in df["peak_gpu_used_mib"]]
        heads = [as_number(v) for v in df.get("headroom_gb", [None] * len(runs))]
        if any(p is not None for p in peaks):
            title = "GPU memory at the peak while points ran (NVML, GB per GPU)"
            fig.add_trace(
                go.Bar(
                    x=runs,
                    y=[None if p is None else p / 1024 for p in peaks],
                    name="peak used (NVML)",
                    hovertemplate=("%{x}<br>peak used: %{y:.2f} GB<extra></extra>"),
                )
            )
            fig.add_trace(
                go.Bar(
                    x=runs,
                    y=heads,
                    name="headroom (total − peak)",
                    hovertemplate="%{x}<br>headroom: %{y:.2f} GB<extra></extra>",
                )
            )
            missing = []
    fig.update_layout(barmode="stack")
    layout(fig, title, "run", "GB")
    if not fig.data:
        return note(
            fig,
            "no memory facts (the server reported none and no GPU was "
            "sampled: a CPU host, or facts missing)",
        )
    if missing:
        text = "not reported: " + ", ".join(missing)
        if len(text) > 160:
            text = text[:157] + "..."
        fig.add_annotation(
            text=text,
            xref="paper",
            yref="paper",
            x=0.0,
            y=-0.22,
            xanchor="left",
            showarrow=False,
            font={"size": 11, "color": "#666"},
        )
        fig.update_layout(margin={"b": 80})
    return fig


# --- experiments ------------------------------------------------------------------------------


def rgb_of(hex_colour: str) -> str:
    """``#4c78a8`` as ``76,120,168``, for ``rgba(...)`` bands of an arm's colour."""
    h = hex_colour.lstrip("#")
    return ",".join(str(int(h[i : i + 2], 16)) for i in (0, 2, 4))


def arm_bands_figure(
    table: pd.DataFrame, metric: str, colours: dict[str, str] | None = None
) -> go.Figure:
    """One line per arm against concurrency, with its 95% interval as a band
    (``core.analysis.stats.arm_stats`` output); points without an interval have no band."""
    rows = (
        table[table["metric"] == metric].dropna(subset=["concurrency", "mean"])
        if "metric" in table
        else table
    )
    fig = go.Figure()
    if rows.empty:
        return note(
            layout(fig, metric_label(metric), "concurrency", metric_label(metric)),
            "no results for this metric yet",
        )
    for i, (arm, group) in enumerate(rows.groupby("arm", sort=False)):
        g = group.sort_values("concurrency")
        colour = rgb_of(colour_of(colours, str(arm), i))
        have_ci = g.dropna(subset=["ci_low", "ci_high"])
        if not have_ci.empty:
            fig.add_trace(
                go.Scatter(
                    x=[*have_ci["concurrency"], *have_ci["concurrency"][::-1]],
                    y=[*have_ci["ci_high"], *have_ci["ci_low"][::-1]],
                    fill="toself",
                    mode="lines",
                    fillcolor=f"rgba({colour},0.2)",
                    line={"width": 0},
                    hoverinfo="skip",
                    name=f"{arm} 95% CI",
                    showlegend=False,
                )
            )
        fig.add_trace(
            go.Scatter(
                x=g["concurrency"],
                y=g["mean"],
                mode="lines+markers",
                name=f"{arm} (n={int(g['n'].max())})",
                line={"color": f"rgb({colour})"},
            )
        )
    fig.update_xaxes(type="log", dtick=math.log10(2))
    return layout(
        fig,
        f"{metric_label(metric)}: mean over trials, 95% interval band",
        "concurrency (log2)",
        metric_label(metric),
    )


def frontier_figure(
    points: pd.DataFrame, gpus_per_run: int, colours: dict[str, str] | None = None
) -> go.Figure:
    """Throughput per GPU against per-user speed, each arm's Pareto frontier drawn."""
    fig = go.Figure()
    title = (
        "Throughput per GPU vs per-user speed — x = 1000 / median TPOT (ms), "
        f"y = output tok/s ÷ {gpus_per_run} GPU(s)"
    )
    if points.empty:
        return note(
            layout(fig, title, "tok/s per user", "output tok/s per GPU"),
            "needs median TPOT and output throughput",
        )
    for i, (arm, g) in enumerate(points.groupby("arm", sort=False)):
        colour = colour_of(colours, str(arm), i)
        fig.add_trace(
            go.Scatter(
                x=g["user_tok_s"],
                y=g["tok_s_per_gpu"],
                mode="markers",
                name=str(arm),
                marker={"color": colour, "size": 9},
                text=[f"c={c}" for c in g["concurrency"]],
                hovertemplate="%{text}: %{x:.1f} tok/s/user, %{y:.1f} tok/s/GPU<extra></extra>",
            )
        )
        front = g[g["on_frontier"]].sort_values("user_tok_s")
        fig.add_trace(
            go.Scatter(
                x=front["user_tok_s"],
                y=front["tok_s_per_gpu"],
                mode="lines",
                line={"color": colour, "dash": "dot"},
                name=f"{arm} frontier",
            )
        )
    return layout(fig, title, "tok/s per user (1000 / median TPOT ms)", "output tok/s per GPU")
