"""core.views.figures_server: the server's view over time, one colour per arm."""

from __future__ import annotations

import pandas as pd

from core.analysis.timelines import Timeline
from core.views.figures import ARM_PALETTE, arm_colours
from core.views.figures_server import timeline_figure


def _timeline(run_id: str, source: str) -> Timeline:
    rows = [
        {"point": 0, "series": "running_reqs", "t_s": t, "t_point_s": t, "value": 2.0,
         "source": source}
        for t in (0.0, 1.0)
    ]  # fmt: skip
    return Timeline(run_id, source, pd.DataFrame(rows))  # type: ignore[arg-type]


def test_an_arm_keeps_its_colour_when_the_baseline_has_no_server_view() -> None:
    """The page colours the arms once (baseline first); the timeline of the runs that have
    a server view uses those colours, so "graphs on" is not repainted as the baseline's."""
    names = ["graphs off", "graphs on"]
    page = arm_colours(names, "graphs off")
    timelines = [_timeline("a", "none"), _timeline("b", "metrics")]
    fig = timeline_figure(names, timelines, 0, "graphs off", colours=page)
    assert fig is not None
    drawn = {t.line.color for t in fig.data}
    assert drawn == {page["graphs on"]} == {ARM_PALETTE[1]}
