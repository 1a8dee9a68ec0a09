"""Download buttons shared by the Run, Compare, Experiment and Import/Export pages
(core/interop/export.py).

Each file is built on click (a callable ``data``), never on every rerun: an HTML report
inlines plotly.js (several MB) and a comparison's records can be large."""

from __future__ import annotations

from collections.abc import Sequence

import streamlit as st

from core.analysis.runs import RunView
from core.interop.export import Selection, bundle, html_report, selection_of


def export_buttons(
    views: Sequence[RunView],
    baseline: int | None = None,
    key: str = "export",
    sel: Selection | None = None,
) -> None:
    """Three buttons: tables as CSV (zip), tables as Parquet (zip), the HTML report."""
    sel = sel or selection_of(views, baseline)
    c1, c2, c3 = st.columns(3)
    c1.download_button(
        "Tables as CSV (zip)",
        lambda: bundle(sel, "csv"),
        file_name=f"{sel.name}-csv.zip",
        mime="application/zip",
        key=f"{key}-csv",
        on_click="ignore",
        icon=":material/table:",
    )
    c2.download_button(
        "Tables as Parquet (zip)",
        lambda: bundle(sel, "parquet"),
        file_name=f"{sel.name}-parquet.zip",
        mime="application/zip",
        key=f"{key}-parquet",
        on_click="ignore",
        icon=":material/dataset:",
    )
    c3.download_button(
        "Report (HTML, opens offline)",
        lambda: html_report(sel),
        file_name=f"{sel.name}.html",
        mime="text/html",
        key=f"{key}-html",
        on_click="ignore",
        icon=":material/description:",
    )
    st.caption(
        "Summaries (ServeLab's metric names), per-request records, configuration"
        + (
            ", the summary card and per-arm means over trials with intervals, config diff"
            if sel.kind == "experiment"
            else ", deltas and config diff"
            if len(views) > 1
            else ""
        )
        + ". PNG of any chart: `python -m core export ID... --format png --out DIR`, "
        "or the camera icon on a chart."
    )
