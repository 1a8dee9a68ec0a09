"""The charts of a selection (``core.interop.selection``) for the HTML report and the PNG export:
throughput, TTFT and ITL against concurrency, the TTFT CDF at the headline point
(``core.analysis.roles.headline_point``, the same point the pages headline), the server's
view over time at that point (downsampled), the memory ledger (one bar per arm) and the
memory headroom; every run named and
coloured as on the pages (``core.views.figures.arm_colours``)."""

from __future__ import annotations

import plotly.graph_objects as go

from core.analysis.ledger import run_ledger
from core.analysis.memory import memory_headroom
from core.analysis.points import MatchedPoint
from core.analysis.roles import headline_point
from core.analysis.runs import has_records, latency_samples, no_records_note
from core.analysis.server_view import no_view_line
from core.analysis.stats import RunOfArm, first_per_arm
from core.analysis.timelines import run_timeline
from core.interop.export_tables import arm_stats_frame
from core.interop.selection import Selection
from core.run_folder import RunFolder
from core.views.figures import (
    arm_bands_figure,
    cdf_figure,
    memory_headroom_figure,
    metric_vs_concurrency,
)
from core.views.figures_ledger import ledger_figure
from core.views.figures_server import no_timeline_lines, timeline_figure

__all__ = ["REPORT_TIMELINE_POINTS", "figures"]

# The report's timelines: this many points per series at most (a report of a 12-run
# experiment stays a few hundred KB over plotly.js).
REPORT_TIMELINE_POINTS = 120


def _timeline(sel: Selection, head: MatchedPoint | None, notes: list[str]) -> go.Figure | None:
    """The server's view at the headline point, every run overlaid, downsampled: the
    client's series of that point only, and only for runs with a server view (each point's
    client series is a pass over every request's chunks: computing every run's every point
    was most of a report's build time, docs/BENCHMARKS.md §7.3)."""
    servers = [run_timeline(v, points=()) for v in sel.views]
    notes += no_timeline_lines(sel.names, servers, [no_view_line(v) for v in sel.views])
    point = next((i for i in (head.indices if head else []) if i is not None), None)
    if head is None or point is None or not any(t.has_server for t in servers):
        return None
    timelines = [
        (run_timeline(v, points=(point,)) if t.has_server else t).downsampled(
            REPORT_TIMELINE_POINTS
        )
        for v, t in zip(sel.views, servers, strict=True)
    ]
    return timeline_figure(
        sel.names,
        timelines,
        point,
        sel.names[sel.baseline],
        point_label=head.label,
        colours=sel.colours,  # the report's one colour per arm, as on every other chart
    )


def figures(sel: Selection) -> tuple[dict[str, go.Figure], list[str]]:
    """The charts of a run, comparison or experiment, and notes on what could not be drawn
    (imported runs have no per-request records, hence no CDF)."""
    figs: dict[str, go.Figure] = {}
    notes: list[str] = []
    views, names = sel.views, sel.names
    colours = sel.colours
    # an experiment's: one line per arm, its interval over trials as a band (the Experiment
    # page's chart), never one line per run
    stats = arm_stats_frame(sel)
    for metric, key in (
        ("output_throughput", "output_throughput_vs_concurrency"),
        ("median_ttft_ms", "median_ttft_vs_concurrency"),
        ("median_itl_ms", "median_itl_vs_concurrency"),
    ):
        figs[key] = (
            metric_vs_concurrency(views, metric, names, colours)
            if stats is None
            else arm_bands_figure(stats, metric, colours)
        )
    head = headline_point(views)
    if head is not None:
        series: dict[str, list[float]] = {}
        for name, v, idx in zip(names, views, head.indices, strict=True):
            if idx is not None and has_records(v, idx) and v.path is not None:
                series[name] = latency_samples(RunFolder(v.path), idx, "ttft")
            else:
                notes.append(f"No TTFT distribution at {head.label}: {no_records_note(v)}")
        if series:
            figs["ttft_cdf"] = cdf_figure(series, f"TTFT (ms) at {head.label}", colours)
    timeline = _timeline(sel, head, notes)
    if timeline is not None:
        figs["server_view"] = timeline
    if sel.story is not None and sel.story.ledger:  # one bar per arm, as on the pages
        figs["memory_ledger"] = ledger_figure(sel.story.ledger, colours)
    elif len(views) == 1 and not views[0].imported:
        figs["memory_ledger"] = ledger_figure({names[0]: run_ledger(views[0])}, colours)
    if sel.experiment is None:
        figs["memory_headroom"] = memory_headroom_figure(memory_headroom(views, names))
    else:  # one run per arm, named by its arm
        runs = [
            RunOfArm(str(sel.run_meta.get(v.run_id, {}).get("arm", n)), 0, v)
            for v, n in zip(views, names, strict=True)
        ]
        first = first_per_arm(runs)
        figs["memory_headroom"] = memory_headroom_figure(
            memory_headroom(list(first.values()), list(first))
        )
    return figs, notes
