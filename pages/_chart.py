"""Plotly figures drawn by plotly.js's basic bundle in a frame of their own.

Why not ``st.plotly_chart``: Streamlit 1.67 draws it with a 4.7 MB front-end chunk, and its
first paint commits every lazily loaded element (the first table too) in one frame, after the
renderer has evaluated that chunk: a chart page's first table waited for plotly
(docs/BENCHMARKS.md §7.4-7.5). Here each figure is a component frame (``chart_frame/``)
that loads the 1.2 MB basic bundle (scatter and bar: every trace ServeLab draws) after the
page is drawn, and takes its height at once, so nothing below it moves. The figure is the
one ``core.views`` built, template included, so the page draws what the HTML report draws.
"""

from __future__ import annotations

from pathlib import Path

import plotly.graph_objects as go
import streamlit.components.v1 as components

COMPONENT = "servelab_chart"
# plotly's own default when a layout names no height
DEFAULT_HEIGHT_PX = 450
# the trace types the basic bundle draws; core.views draws no other
BASIC_TRACES = frozenset({"scatter", "bar", "pie"})

_frame = components.declare_component(COMPONENT, path=Path(__file__).with_name("chart_frame"))


def chart(fig: go.Figure, key: str | None = None) -> None:
    """Draw ``fig`` across the container's width (``st.plotly_chart``'s place on the page)."""
    unknown = {t.type for t in fig.data} - BASIC_TRACES
    if unknown:  # a programming error, not the user's: say which bundle lacks what
        raise ValueError(f"plotly.js's basic bundle cannot draw {sorted(unknown)}")
    _frame(
        figure_json=fig.to_json(),
        height_px=int(fig.layout.height or DEFAULT_HEIGHT_PX),
        key=key,
        default=None,
    )
