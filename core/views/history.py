"""The History view of a series (``core.analysis.history``): the chart of its headline
metrics over time and engine versions with the band, the CLI's lines and the JSON. Words
and pictures only: the band and the alert come from the analysis (``alert_text``)."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from core.analysis.history import (
    BAND_LEVEL,
    HISTORY_METRICS,
    Band,
    History,
    SeriesValue,
    alert_text,
    power_text,
)
from core.analysis.points import PointKey
from core.analysis.version_reading import version_reading
from core.metric_info import metric_label
from core.numbers import number_text, share_text
from core.run_folder import epoch_s
from core.settings import Settings
from core.views.figures import ARM_PALETTE, TEMPLATE, rgb_of

__all__ = [
    "history_figure",
    "history_json",
    "history_lines",
    "history_path",
    "history_table",
    "history_verdict",
    "version_colours",
]

REGRESSION_COLOUR = "#d62728"
ROW_HEIGHT_PX = 260


def history_path(key: str) -> str:
    """The shareable address of a series' History page, relative to the portal's root."""
    return f"history?series={key}"


def version_colours(history: History) -> dict[str, str]:
    """One colour per engine version, in the order the versions first ran."""
    versions = list(dict.fromkeys(r.version for r in history.runs))
    return {v: ARM_PALETTE[i % len(ARM_PALETTE)] for i, v in enumerate(versions)}


def _when(text: str) -> datetime | None:
    """A stored stamp as a naive UTC time (plotly draws an aware one in the browser's zone)."""
    t = epoch_s(text)
    return None if t is None else datetime.fromtimestamp(t, UTC).replace(tzinfo=None)


def history_figure(history: History, point: PointKey | None = None) -> go.Figure:
    """One panel per headline metric: each run's value at ``point`` (the headline point by
    default) against the time it started, with its own interval as error bars, coloured by
    engine version; the band of the runs before the checked run shaded, its mean dashed;
    the checked run ringed (red when it is a regression)."""
    point = point if point is not None else history.headline
    metrics = [m for m in HISTORY_METRICS if any(v.metric == m for v in history.values)]
    fig = make_subplots(
        rows=max(len(metrics), 1),
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.08,
        subplot_titles=[metric_label(m) for m in metrics],
    )
    started = {r.run_id: _when(r.started_at) for r in history.runs}
    regressions = {c.metric for c in history.checks if c.outcome == "regression"}
    for row, metric in enumerate(metrics, start=1):
        values = [v for v in history.values if v.metric == metric and v.point == point]
        band = history.bands.get((point, metric)) if point is not None else None
        times = [t for t in started.values() if t is not None]
        regression = metric in regressions
        if band is not None and times:
            _add_band(fig, row, band, [min(times), max(times)], regression, history.band_level)
        _add_runs(fig, row, history, values, started)
        focus = next((v for v in values if v.run_id == history.focus), None)
        if focus is not None:
            _add_focus(fig, row, focus, started.get(focus.run_id), regression)
        fig.update_yaxes(title_text=metric_label(metric), row=row, col=1)
    label = next((v.point_label for v in history.values if v.point == point), "")
    band_words = (
        f"shaded: {share_text(history.band_level, 1)} prediction band of the runs of one "
        "installation before the checked one"
        if history.bands
        else "no band yet"
    )
    fig.update_layout(
        title={"text": f"History at {label} · {band_words}", "x": 0.01, "xanchor": "left"},
        template=TEMPLATE,
        height=ROW_HEIGHT_PX * max(len(metrics), 1) + 120,
        margin={"l": 70, "r": 20, "t": 80, "b": 60},
        legend={"orientation": "h", "yanchor": "top", "y": -0.08, "xanchor": "left", "x": 0.0},
    )
    fig.update_xaxes(title_text="run started (UTC)", row=max(len(metrics), 1), col=1)
    return fig


def _add_band(
    fig: go.Figure,
    row: int,
    band: Band,
    span: list[datetime],
    regression: bool,
    level: float = BAND_LEVEL,
) -> None:
    """The band of the earlier runs over ``span`` (shaded red for a regression), its mean
    dashed: traces, not a shape, so the axis range takes the band in."""
    fill = rgb_of(REGRESSION_COLOUR if regression else "#7f7f7f")
    fig.add_trace(
        go.Scatter(
            x=span,
            y=[band.low] * 2,
            mode="lines",
            line={"width": 0},
            showlegend=False,
            hoverinfo="skip",
        ),
        row=row,
        col=1,
    )
    fig.add_trace(
        go.Scatter(
            x=span,
            y=[band.high] * 2,
            mode="lines",
            line={"width": 0},
            fill="tonexty",
            fillcolor=f"rgba({fill},0.15)",
            name=f"band ({share_text(level, 1)}, {band.n} earlier runs)",
            legendgroup="band",
            showlegend=row == 1,
            hovertemplate=f"band {number_text(band.low)} … {number_text(band.high)}<extra></extra>",
        ),
        row=row,
        col=1,
    )
    fig.add_trace(
        go.Scatter(
            x=span,
            y=[band.mean] * 2,
            mode="lines",
            line={"dash": "dash", "color": "#7f7f7f", "width": 1},
            name="mean of the earlier runs",
            legendgroup="mean",
            showlegend=row == 1,
            hoverinfo="skip",
        ),
        row=row,
        col=1,
    )


def _add_runs(
    fig: go.Figure,
    row: int,
    history: History,
    values: list[SeriesValue],
    started: dict[str, datetime | None],
) -> None:
    """Each run's value with its own interval, one trace per engine version."""
    version_of = {r.run_id: r.version for r in history.runs}
    for version, colour in version_colours(history).items():
        mine = [v for v in values if version_of.get(v.run_id) == version]
        if not mine:
            continue
        fig.add_trace(
            go.Scatter(
                x=[started.get(v.run_id) for v in mine],
                y=[v.value for v in mine],
                mode="markers",
                marker={"color": colour, "size": 9},
                error_y={
                    "type": "data",
                    "symmetric": False,
                    "array": [(v.ci_high - v.value) if v.ci_high is not None else 0 for v in mine],
                    "arrayminus": [
                        (v.value - v.ci_low) if v.ci_low is not None else 0 for v in mine
                    ],
                    "color": colour,
                    "thickness": 1.2,
                },
                name=version,
                legendgroup=version,
                showlegend=row == 1,
                text=[v.run_id for v in mine],
                hovertemplate="%{text}<br>" + version + "<br>%{y:.4g}<extra></extra>",
            ),
            row=row,
            col=1,
        )


def _add_focus(
    fig: go.Figure, row: int, focus: SeriesValue, at: datetime | None, regression: bool
) -> None:
    """The checked run ringed, red when it is a regression."""
    ring = REGRESSION_COLOUR if regression else "#222222"
    fig.add_trace(
        go.Scatter(
            x=[at],
            y=[focus.value],
            mode="markers",
            marker={"symbol": "circle-open", "size": 18, "color": ring, "line": {"width": 2}},
            name="checked run",
            legendgroup="checked",
            showlegend=row == 1,
            hoverinfo="skip",
        ),
        row=row,
        col=1,
    )


def history_verdict(history: History, settings: Settings | None = None) -> list[str]:
    """What History says, in the page's order: the version change as its experiment reads
    it (``core.analysis.version_reading``, where an experiment measured it: the words of its
    Experiment page), the band's alert (``alert_text``), and the drop the band would catch
    (``power_text``)."""
    runs = [r.run_id for r in history.runs]
    reading = version_reading(settings, runs) if settings is not None else []
    power = power_text(history)
    return [*reading, alert_text(history), *([power] if power else [])]


def history_lines(history: History, settings: Settings | None = None) -> list[str]:
    """The CLI's text: the verdict (the page's words: ``history_verdict``), the series, and
    per run its version and the headline metrics at the headline point with their
    intervals, then the band."""
    lines = [
        *history_verdict(history, settings),
        "",
        f"series {history.key}: {history.config} · {len(history.runs)} run(s) · "
        f"headline point {history.headline_label}",
        f"link: /{history_path(history.key)}",
        "",
    ]
    metrics = [m for m in HISTORY_METRICS if any(v.metric == m for v in history.values)]
    header = f"{'run':24} {'started (UTC)':20} {'version':30}" + "".join(
        f" {m:>30}" for m in metrics
    )
    lines.append(header)
    for r in history.runs:
        cells = []
        for m in metrics:
            v = next(
                (
                    v
                    for v in history.values
                    if v.run_id == r.run_id and v.metric == m and v.point == history.headline
                ),
                None,
            )
            cell = (
                "-"
                if v is None
                else f"{number_text(v.value)} [{number_text(v.ci_low)}, {number_text(v.ci_high)}]"
            )
            cells.append(f" {cell:>30}")
        mark = " <" if r.run_id == history.focus else ""
        lines.append(
            f"{r.run_id:24} {r.started_at[:19]:20} {r.version[:30]:30}{''.join(cells)}{mark}"
        )
    band_cells = []
    for m in metrics:
        band = history.bands.get((history.headline, m)) if history.headline else None
        text = "-" if band is None else f"{number_text(band.low)} … {number_text(band.high)}"
        band_cells.append(f" {text:>30}")
    level = format(history.band_level, ".1%").replace(".0%", "%")
    lines.append(f"{'band (' + level + ' prediction)':76}{''.join(band_cells)}")
    lines.append("[a, b]: the run's own 95% interval; <: the run checked against the band")
    return lines


def _point_json(point: PointKey) -> list[Any]:
    """A load as JSON: an unbounded request rate as ``"inf"`` (JSON has no infinity)."""
    return ["inf" if isinstance(x, float) and math.isinf(x) else x for x in point]


def history_json(history: History, settings: Settings | None = None) -> dict[str, Any]:
    """The same as JSON: the verdict's words, the runs, every value, the bands and checks."""
    return {
        "verdict": history_verdict(history, settings),
        "power": power_text(history),
        "band_from": history.band_from,
        "series": history.key,
        "link": "/" + history_path(history.key),
        "config": history.config,
        "alert": alert_text(history),
        "regression": history.regression,
        "headline_point": history.headline_label,
        "checked_run": history.focus,
        "band_level": history.band_level,
        "runs": [vars(r) for r in history.runs],
        "values": [{**vars(v), "point": _point_json(v.point)} for v in history.values],
        "bands": [
            {"point": _point_json(p), "metric": m, **vars(b)} for (p, m), b in history.bands.items()
        ],
        "checks": [
            {**{k: v for k, v in vars(c).items() if k != "band"}, "band": c.band and vars(c.band)}
            for c in history.checks
        ],
    }


def history_table(history: History, point: PointKey | None = None) -> pd.DataFrame:
    """The History page's table at ``point`` (the headline point by default): per run a
    link to it, when it started, its version, and each headline metric with its own
    interval; the checked run marked."""
    point = point if point is not None else history.headline
    metrics = [m for m in HISTORY_METRICS if any(v.metric == m for v in history.values)]
    rows = []
    for r in history.runs:
        row: dict[str, Any] = {
            "run": f"run?run={r.run_id}",
            "started (UTC)": r.started_at[:19].replace("T", " "),
            "version": r.version,
            "checked": "◀ checked" if r.run_id == history.focus else "",
        }
        for m in metrics:
            v = next(
                (
                    v
                    for v in history.values
                    if v.run_id == r.run_id and v.metric == m and v.point == point
                ),
                None,
            )
            row[metric_label(m)] = None if v is None else v.value
            row[f"{metric_label(m)} 95% CI"] = (
                None
                if v is None or v.ci_low is None
                else f"{number_text(v.ci_low)} … {number_text(v.ci_high)}"
            )
        rows.append(row)
    return pd.DataFrame(rows)
