"""Attribution figures: the waterfall from the baseline to the after-configuration, and a
sweep's metric against the knob's value (core/analysis/attribution.py computes the numbers)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from core.analysis.attribution import Design, Part, higher_is_better, part_reading
from core.config import knob_text
from core.metric_info import metric_label
from core.numbers import pct_text
from core.views.figures import ARM_PALETTE, layout, note, rgb_of

__all__ = ["WATERFALL_HEIGHT", "WATERFALL_Y_TITLE", "attribution_waterfall", "sweep_figure"]


def _cum(logs: Sequence[float]) -> list[float]:
    """Relative difference to the baseline after each part (parts multiply on this scale)."""
    out, total = [], 0.0
    for x in logs:
        total += x
        out.append(math.expm1(total))
    return out


# (x, rises, low, high, text): a bar's value label, beyond its whisker
_Label = tuple[str, bool, float, float, str]


def attribution_waterfall(parts: Sequence[Part], metric: str, where: str) -> go.Figure:
    """One floating bar per main effect and interaction, from the baseline (0 %) to the
    after-configuration (the total bar), each with its own 95% interval; a part that is
    no finding is pale and labelled with its word (``attribution.part_reading``)."""
    fig = go.Figure()
    title = f"{metric_label(metric)} {where}: baseline → after, part by part"
    if not parts:
        return note(
            layout(fig, title, "", "difference to the baseline"),
            "no attribution yet (needs finished runs of every arm)",
        )
    *pieces, total = parts
    labels = [*_add_part_bars(fig, pieces, metric), _add_total_bar(fig, total)]
    _add_labels(fig, labels)
    logs = " ".join(f"{p.log:+.3f}" for p in pieces)
    fig.add_annotation(
        text=f"log scale: {logs} = {total.log:+.3f} (the parts add up)",
        xref="paper",
        yref="paper",
        x=0,
        y=0,
        xanchor="left",
        yanchor="top",
        # below the category labels (up to three lines: an interaction's two knobs)
        yshift=-62,
        showarrow=False,
        font={"size": 11, "color": "#666"},
    )
    fig.update_yaxes(tickformat="+.0%", zeroline=True)
    layout(fig, title, "", WATERFALL_Y_TITLE)
    # a two-line axis title needs its own room: a taller plot and a wider left margin
    # than the shared layout's (the one-line title was clipped at both ends)
    fig.update_layout(height=WATERFALL_HEIGHT, margin={"l": 90, "b": 100})
    return fig


def _add_part_bars(fig: go.Figure, pieces: Sequence[Part], metric: str) -> list[_Label]:
    """A floating bar per part, from where the parts before it ended, with its interval;
    green when it moves the metric the good way."""
    ends = _cum([p.log for p in pieces])
    starts = [0.0, *ends[:-1]]
    names = [
        p.name
        if p.kind == "main"
        else f"interaction<br>{p.name}"
        if p.kind == "interaction"
        else p.name
        for p in pieces
    ]
    up, down = "rgb(44,160,44)", "rgb(214,39,40)"
    # Every bar's value label goes beyond its whisker, never on it: plotly's
    # textposition="outside" puts the text at the bar's end, where the part's own
    # interval is drawn through it.
    labels: list[_Label] = []
    for name, p, s, e in zip(names, pieces, starts, ends, strict=True):
        good = (p.log > 0) == higher_is_better(metric)
        reading = part_reading(p, metric)
        # the part's own interval, drawn at the bar's end on the cumulative scale
        lo = None if p.log_low is None else (1 + s) * math.exp(p.log_low) - 1
        hi = None if p.log_high is None else (1 + s) * math.exp(p.log_high) - 1
        x = name.replace(" × ", " ×<br>")
        fig.add_trace(
            go.Bar(
                x=[x],
                y=[e - s],
                base=[s],
                showlegend=False,
                marker={"color": up if good else down, "opacity": 1 if reading.coloured else 0.35},
                error_y=_whisker(e, lo, hi),
                hovertemplate=f"{name}: {pct_text(p.rel)} (log {p.log:+.3f})<extra></extra>",
            )
        )
        text = pct_text(p.rel) + ("" if reading.coloured else f" ({reading.text()})")
        labels.append((x, p.log >= 0, _lo(lo, s, e), _hi(hi, s, e), text))
    return labels


def _add_total_bar(fig: go.Figure, total: Part) -> _Label:
    """The total bar, from 0 to the after-configuration, with its interval."""
    tlo = None if total.log_low is None else math.expm1(total.log_low)
    thi = None if total.log_high is None else math.expm1(total.log_high)
    fig.add_trace(
        go.Bar(
            x=["total"],
            y=[total.rel],
            base=[0],
            marker={"color": "rgb(90,90,90)"},
            showlegend=False,
            error_y=_whisker(total.rel, tlo, thi),
            hovertemplate=f"total: {pct_text(total.rel)} (log {total.log:+.3f})<extra></extra>",
        )
    )
    low, high = _lo(tlo, 0.0, total.rel), _hi(thi, 0.0, total.rel)
    return ("total", total.log >= 0, low, high, pct_text(total.rel))


def _add_labels(fig: go.Figure, labels: Sequence[_Label]) -> None:
    """Each bar's value beyond its whisker (a rising bar's above it), and the room for them
    on the axis (a range fitted to the bars alone would cut the label over the tallest
    whisker)."""
    for x, rising, low, high, text in labels:
        fig.add_annotation(
            x=x,
            y=high if rising else low,
            text=text,
            showarrow=False,
            yanchor="bottom" if rising else "top",
            yshift=3 if rising else -3,
            font={"size": 12},
        )
    ys = [0.0, *(y for _, _, low, high, _ in labels for y in (low, high))]
    pad = (max(ys) - min(ys)) * 0.14 or 0.1
    fig.update_yaxes(range=[min(ys) - pad, max(ys) + pad])


# the y axis title, two lines so it fits the plot's height (one line of 50 characters
# at 380 px was cut at both ends)
WATERFALL_Y_TITLE = "difference to the baseline<br>(95% interval per part)"
WATERFALL_HEIGHT = 440


def _whisker(end: float, lo: float | None, hi: float | None) -> dict[str, Any] | None:
    """A bar's own 95% interval as an asymmetric error bar at its end (None: unknown)."""
    if lo is None or hi is None:
        return None
    return {"type": "data", "symmetric": False, "array": [hi - end], "arrayminus": [end - lo]}


def _lo(lo: float | None, start: float, end: float) -> float:
    """The lowest point a bar draws: its whisker's low end, else its own bottom."""
    return min(start, end) if lo is None else min(lo, start, end)


def _hi(hi: float | None, start: float, end: float) -> float:
    return max(start, end) if hi is None else max(hi, start, end)


def sweep_figure(table: pd.DataFrame, design: Design, knob: str, metric: str) -> go.Figure:
    """``metric`` against ``knob``'s value, one line per concurrency with its 95% interval
    band (``core.analysis.stats.arm_stats`` rows); only arms that hold every other knob at the
    baseline's value."""
    fig = go.Figure()
    base = design.arm_levels[design.baseline_arm]
    arms = {
        a: lv[knob]
        for a, lv in design.arm_levels.items()
        if all(lv[k] == base[k] for k in design.knobs if k != knob)
    }
    rows = (
        table[(table["metric"] == metric) & table["arm"].isin(list(arms))]
        if not table.empty
        else table
    )
    name = knob.split(".", 1)[-1]
    title = f"{metric_label(metric)} against {name}: mean over trials, 95% interval band"
    if rows.empty:
        return note(layout(fig, title, name, metric_label(metric)), "no results yet")
    order = list(design.levels[knob])
    numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in order)
    rows = rows.assign(
        value=[arms[a] for a in rows["arm"]], pos=[order.index(arms[a]) for a in rows["arm"]]
    )
    for i, (conc, g) in enumerate(rows.groupby("concurrency", sort=True, dropna=False)):
        g = g.sort_values("value" if numeric else "pos")
        x: list[Any] = list(g["value"]) if numeric else [knob_text(v) for v in g["value"]]
        colour = rgb_of(ARM_PALETTE[i % len(ARM_PALETTE)])
        ci = g.dropna(subset=["ci_low", "ci_high"])
        if len(ci) == len(g):
            fig.add_trace(
                go.Scatter(
                    x=[*x, *x[::-1]],
                    y=[*g["ci_high"], *g["ci_low"][::-1]],
                    fill="toself",
                    mode="lines",
                    fillcolor=f"rgba({colour},0.2)",
                    line={"width": 0},
                    hoverinfo="skip",
                    showlegend=False,
                )
            )
        fig.add_trace(
            go.Scatter(
                x=x,
                y=g["mean"],
                mode="lines+markers",
                name=f"concurrency {conc}",
                line={"color": f"rgb({colour})"},
            )
        )
    return layout(fig, title, name, metric_label(metric))
