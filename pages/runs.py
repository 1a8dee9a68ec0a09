"""Runs: every run with status, knobs and headline metrics; filter, compare, cancel."""

from __future__ import annotations

import streamlit as st

from core.errors import StoreError
from core.executors import run_nodes
from core.executors.queue import cancel
from core.store import Catalog, folder_rows
from core.views.runs_table import knob_columns, live_runs, runs_frame
from pages._auth import can_launch
from pages._services import bootstrap

settings, worker = bootstrap()
catalog = Catalog(settings.catalog_path, settings.runs_dir)
st.title("Runs")

f1, f2, f3, f4 = st.columns(4)
engine = f1.selectbox("Engine", ["", "transformers", "sglang", "endpoint"], key="f_engine")
state = f2.selectbox(
    "Status",
    ["", "queued", "running", "succeeded", "failed", "invalid", "cancelled", "interrupted"],
    key="f_state",
)
model = f3.text_input("Model (exact)", key="f_model")
tag = f4.text_input("Tag", key="f_tag")

# The catalog's columns and their headings; core/views/runs_table.py adds the experiment, arm,
# knobs under test and the headline point.
COLUMNS = {
    "run_id": "run",
    "state": "status",
    "phase": "phase",
    "experiment": "experiment",
    "arm": "arm",
    "engine": "engine",
    "model": "model",
    "device": "device",
    "headline at": "headline at",
    "output_throughput": "out tok/s",
    "median_ttft_ms": "TTFT p50 ms",
    "median_itl_ms": "ITL p50 ms",
    "error_rate": "errors",
    "kv_cache_tokens": "KV tokens",
    "started_at": "started",
    "duration_s": "wall s",
    "tags": "tags",
    "reason": "reason",
    "history": "history",
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
    st.caption(
        f"{len(rows)} run(s) · worker: "
        + (
            "running " + ", ".join(r["run_id"] for r in snap["running"])
            if snap["running"]
            else "idle"
        )
        + (f" · {len(snap['queued'])} queued" if snap["queued"] else "")
        + ("" if snap["active"] else f" · worker passive: {snap['reason']}")
    )
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
    columns = {
        **{k: v for k, v in COLUMNS.items() if k != "engine"},
        **{k: k for k in knobs},
        "engine": "engine",
    }
    if nodes:
        columns["node"] = "node"
    order = ["run_id", "state", "history", "phase", "experiment", "arm", *knobs]
    columns = {k: columns[k] for k in [*order, *(c for c in columns if c not in order)]}
    df = frame[list(columns)].rename(columns=columns)
    event = st.dataframe(
        df,
        hide_index=True,
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
            "out tok/s": st.column_config.NumberColumn(
                format="%.1f", help="at the point named in 'headline at' (the plan's heaviest load)"
            ),
            "TTFT p50 ms": st.column_config.NumberColumn(format="%.1f"),
            "ITL p50 ms": st.column_config.NumberColumn(format="%.1f"),
            "errors": st.column_config.NumberColumn(format="percent"),
            "wall s": st.column_config.NumberColumn(format="%.1f"),
        },
    )
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
