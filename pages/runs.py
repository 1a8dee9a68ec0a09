"""Runs: every run with status, knobs and headline metrics; filter, compare, cancel."""

from __future__ import annotations

import streamlit as st

from core.engines.registry import engine_names
from core.errors import StoreError
from core.executors import run_nodes
from core.executors.queue import cancel
from core.metric_info import metric_label
from core.store import Catalog, folder_rows
from core.views.cells import EMPTY, readable_table
from core.views.runs_table import knob_columns, live_runs, runs_frame
from pages._auth import can_launch
from pages._landing import answer_first
from pages._services import bootstrap

settings, worker = bootstrap()
catalog = Catalog(settings.catalog_path, settings.runs_dir)
answer_first(settings)  # the landing page answers the seed's question before the table
st.title("Runs")

f1, f2, f3, f4 = st.columns(4)
engine = f1.selectbox("Engine", ["", *engine_names()], key="f_engine")
state = f2.selectbox(
    "Status",
    ["", "queued", "running", "succeeded", "failed", "invalid", "cancelled", "interrupted"],
    key="f_state",
)
model = f3.text_input("Model (exact)", key="f_model")
tag = f4.text_input("Tag", key="f_tag")

# The catalog's columns in the order a reader looks for them: which run, then its headline
# metrics near the left (at 1440 px they were off-screen), then what tells runs apart;
# core/views/runs_table.py adds the experiment, arm, knobs under test and the headline point.
# None: the heading is the metric's label (core.metrics.metric_label, via readable_table).
COLUMNS: dict[str, str | None] = {
    "run_id": "run",
    "state": "status",
    "history": "history",
    "arm": "arm",
    "headline at": "headline at",
    "output_throughput": None,
    "median_ttft_ms": None,
    "median_itl_ms": None,
    "error_rate": "errors",
    "experiment": "experiment",
    "phase": "phase",
    "engine": "engine",
    "model": "model",
    "device": "device",
    "kv_cache_tokens": None,
    "started_at": "started",
    "duration_s": "wall s",
    "tags": "tags",
    "reason": "reason",
}


@st.fragment(run_every="2s")
def run_table() -> None:
    # Runs started from the CLI appear too: sync indexes any new or changed folder.
    try:
        catalog.sync()
        rows = catalog.list_runs(
            limit=500, engine=engine, state=state, model=model.strip(), tag=tag.strip()
        )
    except StoreError as exc:  # locked by another program, data folder not writable...
        st.error(
            f"The catalog is unavailable, so this list is read from the run folders "
            f"(no metrics): {exc}",
            icon=":material/database:",
        )
        rows = folder_rows(
            settings.runs_dir, 500, engine=engine, state=state, model=model.strip(), tag=tag.strip()
        )
    snap = worker.snapshot()
    running = ", ".join(r["run_id"] for r in snap["running"])
    if snap["active"]:
        worker_text = f"running {running}" if running else "idle"
    else:  # a passive worker starts nothing: its reason, then another portal's runs
        worker_text = snap["reason"] + (f" · running: {running}" if running else "")
    queued = f" · {len(snap['queued'])} queued" if snap["queued"] else ""
    st.caption(f"{len(rows)} run(s) · worker: {worker_text}{queued}")
    if not rows:
        st.info(
            "No runs yet. Launch one from the Launch page, or run "
            "`python -m core run --engine transformers`."
        )
        return
    if nodes := run_nodes(settings.runs_dir, [r["run_id"] for r in rows], snap["running"]):
        for r in rows:  # which Ray node ran each run (core/executors); "local" for the rest
            r["node"] = nodes.get(r["run_id"], "local")
    frame = runs_frame(rows, settings.runs_dir)
    knobs = knob_columns(frame)
    headings = {**COLUMNS, **{k: k for k in knobs}}  # a knob as the plan spells it
    if nodes:
        headings["node"] = "node"
    rest = [c for c in headings if c not in knobs]
    after = rest.index("experiment") + 1  # the knobs under test beside the experiment
    shown = frame[[*rest[:after], *knobs, *rest[after:]]]
    event = st.dataframe(
        readable_table(
            shown, {k: v for k, v in headings.items() if v}, keep=["experiment", "history"]
        ),
        hide_index=True,
        placeholder=EMPTY,  # an empty cell, not "None" (which reads like a value)
        on_select="rerun",
        selection_mode="multi-row",
        key="runs_table",
        column_config={
            "experiment": st.column_config.LinkColumn(
                "experiment", display_text=r"experiment\?experiment=(.*)"
            ),
            "history": st.column_config.LinkColumn(
                "history",
                display_text="history",
                help="this configuration's runs over time and versions, with the band",
            ),
            metric_label("output_throughput"): st.column_config.Column(
                help="at the point named in 'headline at' (the heaviest load the run measured)"
            ),
        },
    )
    df = shown.rename(columns={"run_id": "run"})
    chosen = [df.iloc[i]["run"] for i in event.selection.rows]
    b1, b2, b3 = st.columns(3)
    if len(chosen) == 1:
        b1.page_link(
            "pages/run.py",
            label=f"Open run {chosen[0]}",
            query_params={"run": chosen[0]},
            icon=":material/description:",
        )
        b1.page_link(
            "pages/history.py",
            label="History of this configuration",
            query_params={"run": chosen[0]},
            icon=":material/timeline:",
        )
    if len(chosen) >= 2:
        b2.page_link(
            "pages/compare.py",
            label=f"Compare {len(chosen)} runs",
            query_params={"runs": ",".join(chosen)},
            icon=":material/compare_arrows:",
        )
    live = live_runs(frame, chosen)  # a finished run has nothing to cancel
    if (
        live
        and b3.button(
            f"Cancel {len(live)} live run(s)", key="cancel_selected", disabled=not can_launch()
        )
        and can_launch()
    ):
        for run_id in live:
            st.toast(cancel(settings, run_id))


run_table()
st.caption("Select one run to open it, two or more to compare them.")
