"""The server's view over time, overlaid per arm: three stacked panels on one time axis.

1. requests: the client's in flight (dotted) beside the server's running (solid) and queued
   (dashed);
2. KV usage, % of the pool;
3. throughput: the server's generation rate (solid) beside the client's output rate (dotted).

One colour per arm label (``figures.arm_colours``, the rule of every other chart); trials of
one arm share it, drawn faint after the first. The x axis is seconds since the point started,
so runs that ran at different times overlay.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from core.analysis.server_view import ServerView
from core.analysis.timelines import Timeline, series_words
from core.numbers import count_text, share_text, short_count_text
from core.views.figures import apply_template, arm_colours, colour_of

__all__ = [
    "LINE_STYLES",
    "TIMELINE_PANELS",
    "no_timeline_lines",
    "server_point_line",
    "timeline_figure",
]

# panel -> (title, ((series, dash, scale), ...))
LINE_STYLES = (
    "Solid: the server's running requests, KV usage and generation rate; dashed: queued; "
    "dotted: the client's requests in flight and output rate."
)
TIMELINE_PANELS: tuple[tuple[str, tuple[tuple[str, str, float], ...]], ...] = (
    (
        "requests",
        (
            ("running_reqs", "solid", 1.0),
            ("queued_reqs", "dash", 1.0),
            ("client_in_flight_reqs", "dot", 1.0),
        ),
    ),
    ("KV usage (% of the pool)", (("kv_usage", "solid", 100.0),)),
    (
        "throughput (tok/s)",
        (("gen_throughput_tok_s", "solid", 1.0), ("client_output_tok_s", "dot", 1.0)),
    ),
)
_SHORT = {
    "running_reqs": "running",
    "queued_reqs": "queued",
    "client_in_flight_reqs": "in flight (client)",
    "kv_usage": "KV usage",
    "gen_throughput_tok_s": "gen (server)",
    "client_output_tok_s": "output (client)",
}


def no_timeline_lines(
    labels: Sequence[str], timelines: Sequence[Timeline], no_view: Sequence[str]
) -> list[str]:
    """The one line per run whose engine reported no server-side view (``no_view``: each
    run's ``server_view.no_view_line``), instead of an empty chart."""
    return [
        f"{label}: {line}"
        for label, t, line in zip(labels, timelines, no_view, strict=True)
        if not t.has_server
    ]


def server_point_line(label: str, sv: ServerView) -> str | None:
    """One point's server view in words: KV peak and p50 of the pool, peak running and
    queued, retracted, decode passes in CUDA graphs. None when the server said nothing."""
    if sv.source == "none":
        return None
    parts = []
    if sv.kv_used_peak_tokens is not None:
        if sv.kv_capacity_tokens:
            p50 = (sv.kv_used_p50_tokens or 0.0) / sv.kv_capacity_tokens
            parts.append(
                f"KV peak {share_text(sv.kv_used_peak_tokens / sv.kv_capacity_tokens, 2)} of "
                f"{short_count_text(sv.kv_capacity_tokens)} tokens (p50 {share_text(p50, 2)})"
            )
        else:
            parts.append(
                f"KV peak {short_count_text(sv.kv_used_peak_tokens)} tokens (pool size unknown)"
            )
    if sv.running_peak is not None:
        parts.append(f"peak {count_text(sv.running_peak)} running")
    if sv.queue_peak is not None:
        parts.append(f"{count_text(sv.queue_peak)} queued")
    if sv.retracted_peak:
        parts.append(f"{count_text(sv.retracted_peak)} retracted")
    if sv.decode_graph_share is not None:
        parts.append(f"decode passes in CUDA graphs {share_text(sv.decode_graph_share)}")
    if not parts:
        return None
    return f"**{label}** ({sv.source}): " + ", ".join(parts)


def timeline_figure(
    labels: Sequence[str],
    timelines: Sequence[Timeline],
    point: int,
    baseline: str | None = None,
    title: str = "The server's view",
    point_label: str | None = None,
    colours: Mapping[str, str] | None = None,
) -> go.Figure | None:
    """Overlaid timelines of one point for every run that has a server-side view; None when
    none has (the page shows ``no_timeline_lines`` instead). ``colours``: the page's (its
    arms' colours, ``arm_colours``), so an arm keeps its colour on this chart too, even where
    the baseline has no server view; without, the runs shown are coloured baseline first."""
    shown = [
        (label, t)
        for label, t in zip(labels, timelines, strict=True)
        if t.has_server and not t.at(point).empty
    ]
    if not shown:
        return None
    if colours is None:
        colours = arm_colours([label for label, _ in shown], baseline)
    fig = make_subplots(
        rows=len(TIMELINE_PANELS),
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.06,
        subplot_titles=[p[0] for p in TIMELINE_PANELS],
    )
    seen_arm: set[str] = set()
    in_legend: set[str] = set()
    for label, t in shown:
        arm = label.rsplit(" · ", 1)[0]
        faint = arm in seen_arm  # the arm's other trials: same colour, faint, no legend
        seen_arm.add(arm)
        rows = t.at(point)
        for row, (_, panel) in enumerate(TIMELINE_PANELS, start=1):
            for series, dash, scale in panel:
                s = rows[rows["series"] == series]
                if s.empty:
                    continue
                fig.add_trace(
                    go.Scatter(
                        x=s["t_point_s"],
                        y=s["value"] * scale,
                        mode="lines",
                        line={
                            "color": colour_of(colours, label),
                            "dash": dash,
                            "width": 1 if faint else 2,
                        },
                        opacity=0.35 if faint else 1.0,
                        line_shape="hv" if series == "client_in_flight_reqs" else "linear",
                        # one legend entry per run (its colour); the line styles are
                        # the same for every run, said once in the caption
                        name=label,
                        legendgroup=label,
                        showlegend=not faint and label not in in_legend,
                        hovertemplate=(
                            f"{label}: {_SHORT[series]}<br>{series_words(series)}<br>"
                            "t=%{x:.1f} s<br>%{y:.4g}<extra></extra>"
                        ),
                    ),
                    row=row,
                    col=1,
                )
                in_legend.add(label)
    sources = sorted({t.source for _, t in shown})
    apply_template(fig)
    fig.update_layout(
        title={
            "text": f"{title} (from {' and '.join(sources)}) at {point_label or f'point {point}'}",
            "x": 0.01,
            "xanchor": "left",
        },
        height=640,
        margin={"l": 60, "r": 20, "t": 70, "b": 80},
        legend={"orientation": "h", "yanchor": "top", "y": -0.1, "xanchor": "left", "x": 0.0},
    )
    fig.update_xaxes(title_text="time since the point started (s)", row=len(TIMELINE_PANELS))
    fig.update_yaxes(rangemode="tozero")
    return fig
