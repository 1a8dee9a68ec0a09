"""The server's view over time, overlaid per arm, for Run, Compare and Experiment: the
series come from core (core/analysis/timelines.py), the words and the figure from
core/views/figures_server.py; this only picks the point and draws."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import streamlit as st

from core.analysis.runs import RunView
from core.analysis.server_view import no_view_line, server_view
from core.analysis.timelines import run_timeline
from core.views.figures_server import (
    LINE_STYLES,
    no_timeline_lines,
    server_point_line,
    timeline_figure,
)
from pages._chart import chart


def timelines_section(
    labels: Sequence[str],
    views: Sequence[RunView],
    baseline: str | None,
    key: str,
    caption: str = "",
    colours: Mapping[str, str] | None = None,
) -> None:
    st.subheader("The server's view over time")
    # the server's series first (which runs and points have a view), the client's for the
    # drawn point only (core/analysis/timelines.py)
    timelines = [run_timeline(v, points=()) for v in views]
    quiet = no_timeline_lines(labels, timelines, [no_view_line(v) for v in views])
    for line in quiet:  # one line, never an empty chart
        st.caption(line)
    if len(quiet) == len(views):
        return
    points = {
        s["index"]: s.get("label") or f"point {s['index']}"
        for v, t in zip(views, timelines, strict=True)
        if t.has_server
        for s in v.points
        if isinstance(s.get("index"), int)
    }
    if not points:
        return
    order = sorted(points)
    point = (
        st.selectbox("Point", order, index=len(order) - 1, format_func=points.__getitem__, key=key)
        if len(order) > 1
        else order[0]
    )
    said = [
        server_point_line(label, server_view(v, point))
        for label, v, t in zip(labels, views, timelines, strict=True)
        if t.has_server
    ]
    lines = [line for line in said if line]
    timelines = [
        run_timeline(v, points=(point,)) if t.has_server else t
        for v, t in zip(views, timelines, strict=True)
    ]
    if lines:
        st.markdown("  \n".join(lines))
    fig = timeline_figure(
        labels, timelines, point, baseline, point_label=points[point], colours=colours
    )
    if fig is None:
        st.caption(f"No server samples at {points[point]}.")
        return
    chart(fig, key=f"{key}-fig")
    st.caption(f"{LINE_STYLES} Time since the point started." + (f" {caption}" if caption else ""))
