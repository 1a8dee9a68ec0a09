"""Attribution figures: the waterfall from the baseline to the after-configuration, and a
sweep's metric against the knob's value (core/analysis/attribution.py computes the numbers)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from core.analysis.attribution import Design, Part, higher_is_better
from core.config import knob_text
from core.views.figures import ARM_PALETTE, layout, metric_label, note, rgb_of

__all__ = ["attribution_waterfall", "sweep_figure"]


def _cum(logs: Sequence[float]) -> list[float]:
    """Relative difference to the baseline after each part (parts multiply on this scale)."""
    out, total = [], 0.0
    for x in logs:
        total += x
        out.append(math.expm1(total))
    return out


def attribution_waterfall(
    parts: Sequence[Part], metric: str, where: str, noise_floor: float | None = None
) -> go.Figure:
    """One floating bar per main effect and interaction, from the baseline (0 %) to the
    after-configuration (the total bar), each with its own 95% interval, and the A/A
    noise floor as a band around 0."""
    fig = go.Figure()
    title = f"{metric_label(metric)} {where}: baseline → after, part by part"
    if not parts:
        return note(
            layout(fig, title, "", "difference to the baseline"),
            "no attribution yet (needs finished runs of every arm)",
        )
    *pieces, total = parts
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
    for name, p, s, e in zip(names, pieces, starts, ends, strict=True):
        good = (p.log > 0) == higher_is_better(metric)
        # the part's own interval, drawn at the bar's end on the cumulative scale
        lo = None if p.log_low is None else (1 + s) * math.exp(p.log_low) - 1
        hi = None if p.log_high is None else (1 + s) * math.exp(p.log_high) - 1
        fig.add_trace(
            go.Bar(
                x=[name.replace(" × ", " ×<br>")],
                y=[e - s],
                base=[s],
                showlegend=False,
                marker={"color": up if good else down, "opacity": 0.35 if p.within_noise else 1},
                error_y=None
                if lo is None or hi is None
                else {
                    "type": "data",
                    "symmetric": False,
                    "array": [hi - e],
                    "arrayminus": [e - lo],
                },
                text=[f"{p.rel * 100:+.1f}%" + (" (noise)" if p.within_noise else "")],
                textposition="outside",
                hovertemplate=f"{name}: {p.rel * 100:+.1f}% (log {p.log:+.3f})<extra></extra>",
            )
        )
    tlo = None if total.log_low is None else math.expm1(total.log_low)
    thi = None if total.log_high is None else math.expm1(total.log_high)
    fig.add_trace(
        go.Bar(
            x=["total"],
            y=[total.rel],
            base=[0],
            marker={"color": "rgb(90,90,90)"},
            showlegend=False,
            text=[f"{total.rel * 100:+.1f}%"],
            textposition="outside",
            error_y=None
            if tlo is None or thi is None
            else {
                "type": "data",
                "symmetric": False,
                "array": [thi - total.rel],
                "arrayminus": [total.rel - tlo],
            },
        )
    )
    if noise_floor:
        fig.add_hrect(
            y0=-noise_floor,
            y1=noise_floor,
            fillcolor="grey",
            opacity=0.15,
            line_width=0,
            annotation_text=f"A/A noise floor ±{noise_floor:.0%}",
            annotation_position="top left",
        )
    logs = " ".join(f"{p.log:+.3f}" for p in pieces)
    fig.add_annotation(
        text=f"log scale: {logs} = {total.log:+.3f} (the parts add up)",
        xref="paper",
        yref="paper",
        x=0,
        y=-0.28,
        showarrow=False,
    )
    fig.update_yaxes(tickformat="+.0%", zeroline=True)
    return layout(fig, title, "", "difference to the baseline (95% interval per part)")


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
