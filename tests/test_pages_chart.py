"""pages/_chart.py: figures drawn by the vendored plotly.js basic bundle in frames of their own."""

from __future__ import annotations

import re
from pathlib import Path

import plotly.graph_objects as go
import pytest
from plotly.offline import get_plotlyjs_version

from pages._chart import BASIC_TRACES, chart

BUNDLE = Path(__file__).resolve().parent.parent / "pages" / "chart_frame" / "plotly-basic.min.js"


def test_the_bundle_is_the_plotly_js_that_python_plotly_writes_figures_for() -> None:
    """A plotly upgrade writes figure JSON for its own plotly.js: the frame's bundle must be
    that version (npm's plotly.js-basic-dist-min of the same number), or charts break."""
    head = BUNDLE.read_text(encoding="utf-8")[:200]
    found = re.search(r"plotly\.js \(basic - minified\) v(\S+)", head)
    assert found, head
    assert found.group(1) == get_plotlyjs_version()


def test_a_trace_the_basic_bundle_cannot_draw_is_refused_by_name() -> None:
    fig = go.Figure([go.Scatter(y=[1, 2]), go.Heatmap(z=[[1, 2]])])
    with pytest.raises(ValueError, match=r"cannot draw \['heatmap'\]"):
        chart(fig)
    assert {"scatter", "bar"} <= BASIC_TRACES
