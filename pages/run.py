"""Run: one run in full (shareable as ?run=ID)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pandas as pd
import streamlit as st

from core.analysis.history import series_of_run, series_size
from core.analysis.ledger import run_ledger
from core.analysis.points import point_rows
from core.analysis.runs import has_records, latency_samples, load_run, no_records_note
from core.analysis.trials import run_place
from core.answers import probe_verdict
from core.executors.queue import cancel
from core.launch.presets import stored_run_estimate
from core.metrics import DEFINITION, caveat_lines, point_cancelled, point_caveats, point_error_rate
from core.run_folder import RunFolder, find_runs
from core.shapes import runs_routing, shapes_line
from core.views.cells import EMPTY, cell_text, column_label, readable_table, time_text
from core.views.figures import arm_colours, cdf_figure, gpu_memory_figure, no_gpu_samples_line
from core.views.progress import point_words, run_time_text
from core.views.report import node_line, step_rows
from core.views.runs_table import LIVE_STATES, is_demo_run
from pages._auth import can_launch
from pages._chart import chart
from pages._details import code_line, details
from pages._export import export_buttons
from pages._ledger import ledger_section
from pages._picker import pick_run
from pages._services import bootstrap
from pages._timelines import timelines_section

settings, _worker = bootstrap()
run_id = st.query_params.get("run", "")
found, _ = find_runs(settings.runs_dir, [run_id])
if not found:
    st.title("Run")
    if run_id:
        st.warning(f"No run selected, or no such run: {run_id[:40]!r}. Pick one below.")
    pick_run(settings, "run", "Pick a run (newest first; links look like `/run?run=RUN_ID`)")
folder: RunFolder = found[0]

view = load_run(folder)
place = run_place(settings, view)  # its experiment, arm and trial, if it has one
st.title(place.title if place is not None else f"Run {run_id}")
if place is not None:
    st.caption(f"Run {run_id} of the experiment **{place.experiment_name}**")
    st.page_link(
        "pages/experiment.py",
        label=f"Back to the experiment {place.experiment_id}",
        query_params={"experiment": place.experiment_id},
        icon=":material/science:",
    )
# a model shape: dummy weights, and how its MoE routing ran (launch.json)
if shape_line := shapes_line([view.spec], runs_routing([view.launch])):
    st.warning(shape_line, icon=":material/science:")
drawn_state = folder.status_or_empty().state or "?"
# the plan's point count: "point 2/3" everywhere on this page (core.views.progress)
points_total = len(((folder.read("spec.json") or {}).get("plan") or {}).get("points") or []) or None


@st.fragment(run_every="1s" if drawn_state in LIVE_STATES else None)
def live_status() -> None:
    """State, progress and log tail; when the state changes (queued → running →
    finished) the whole page is redrawn, so launch command, facts and metrics appear
    without a reload."""
    status = folder.status_or_empty()
    state = status.state or "?"
    if state != drawn_state:
        st.rerun()
    icon = {
        "succeeded": ":material/check_circle:",
        "failed": ":material/error:",
        "invalid": ":material/report:",
        "running": ":material/progress_activity:",
    }.get(state, ":material/info:")
    phase = status.phase or ""  # where a live run is; an ended run's last step
    live = state in LIVE_STATES and phase not in ("", state)
    st.subheader(f"{state} · {point_words(phase, points_total)}" if live else state)
    if where := node_line(status):  # a Ray run: which node and GPUs (core/executors)
        st.caption(
            where
            + (
                " · below: the server log's last lines from the node; the whole "
                "log comes back with the run folder"
                if state == "running"
                else ""
            )
        )
    if status.reason:
        st.error(point_words(status.reason, points_total), icon=icon)
    prog = status.progress or {}
    if state in LIVE_STATES:
        # elapsed and time left, redrawn with this fragment; the estimate read once a page
        if (key := f"estimate-{run_id}") not in st.session_state:
            st.session_state[key] = stored_run_estimate(settings, folder)
        estimate_s, source = st.session_state[key]
        st.caption(run_time_text(status, estimate_s, source, datetime.now(UTC)))
        frac = 0.0
        if prog:
            frac = (prog["point"] + prog["requests_done"] / max(prog["requests_total"], 1)) / max(
                prog["points_total"], 1
            )
            st.progress(
                min(frac, 1.0),
                text=f"point {prog['point'] + 1}/{prog['points_total']}"
                f" · {prog['requests_done']}/{prog['requests_total']} requests",
            )
        else:
            st.progress(0.0, text=status.phase or "queued")
        if (
            st.button("Cancel this run", key="cancel_run", disabled=not can_launch())
            and can_launch()
        ):
            st.toast(cancel(settings, run_id))
        st.code(folder.log_tail(15) or "(no server output yet)", language="log")
    if status.steps:
        rows = step_rows(status.steps, points_total, folder.read("probe.json"))
        st.table(pd.DataFrame(rows).set_index("step"))


live_status()
if drawn_state in LIVE_STATES:  # read again: the fragment may have seen it change
    view = load_run(folder)
if (series := series_of_run(settings.runs_dir, run_id)) and (
    n_runs := series_size(settings.runs_dir, series)
):
    st.page_link(
        "pages/history.py",
        label=f"History of this configuration ({n_runs} run{'s' if n_runs != 1 else ''})",
        query_params={"run": run_id},
        icon=":material/timeline:",
    )
launch = view.launch or {}
if is_demo_run(run_id):
    st.info(
        "Part of the shipped **H200 demo**: measured on an NVIDIA H200 (docs/BENCHMARKS.md)"
        "; `<checkout>` in paths stands for the checkout it was measured from.",
        icon=":material/science:",
    )
st.markdown("**Launch command**")
if launch.get("command"):
    code_line(launch["command"])
elif launch.get("base_url"):
    st.caption(f"No server launched: measured the endpoint `{launch['base_url']}`.")
elif drawn_state in LIVE_STATES:
    st.caption("Not launched yet: the command appears here once preflight has built it.")
else:
    st.caption(f"No server was launched ({drawn_state} before launch).")
for note in launch.get("notes") or []:
    st.caption(f"note: {note}")
if view.imported:  # core.interop.importers: the tool's summaries only, marked with their origin
    imp = view.spec.get("import") or {}
    st.info(
        f"Imported from **{imp.get('source_file')}** ({imp.get('format')}; "
        f"{imp.get('tool')}) at {time_text(imp.get('imported_at'))}: summary metrics as the tool "
        "reported them, no per-request records. What the source does not state is "
        "listed as unknown in each point's summary.",
        icon=":material/upload_file:",
    )
    unread = [f"{s['label']}: {n}" for s in view.points for n in s.get("not_understood") or []]
    if unread:
        with st.expander(f"Not understood in the source ({len(unread)})"):
            st.write("\n".join(f"- {n}" for n in unread))

left, right = st.columns(2)
with left:
    st.markdown("**Configuration**")
    # drawn when opened (pages/_details.py): a JSON viewer or highlighter costs the first paint
    with details("Spec as JSON, for `python -m core run --plan`", "run_spec_json") as shown:
        if shown:
            st.code(
                json.dumps(
                    {k: v for k, v in view.spec.items() if k not in ("run_id", "created_at")},
                    indent=2,
                ),
                language="json",
            )
with right:
    st.markdown("**Server facts**")
    facts = {k: v for k, v in (view.facts or {}).items() if k != "server_info_raw"}
    if not facts:
        st.caption(
            "None yet: they are read once the server is up."
            if drawn_state in LIVE_STATES
            else f"None: the run ended ({drawn_state}) before the server was up."
        )
    keys = [
        "engine_version",
        "kv_cache_tokens",
        "weight_mem_gb",
        "kv_cache_gb",
        "graph_mem_gb",
        "available_gpu_mem_gb",
        "cuda_graph_enabled",
        "cuda_graph_batch_sizes",
        "ready_after_s",
        "startup_s",
        "facts_source",
    ]
    if facts:  # the fact's words and unit, its value as a reader reads it ("unknown": unset)
        st.table(
            pd.DataFrame(
                [
                    {
                        "fact": column_label(k),
                        "value": "unknown" if facts.get(k) is None else cell_text(facts[k], k),
                    }
                    for k in keys
                ]
            ).set_index("fact")
        )
if view.probe:  # judged by today's rule (core.answers), older folders too
    p = view.probe
    verdict, why = probe_verdict(p)
    {"passed": st.success, "warning": st.warning, "failed": st.error}[verdict](
        f"Sanity probe {verdict}: {p['prompt']!r} → {p['answer'][:200]!r} ({why})",
        icon={
            "passed": ":material/check_circle:",
            "warning": ":material/warning:",
            "failed": ":material/error:",
        }[verdict],
    )

if view.points:
    st.subheader("Metrics per point")
    src = view.points[0].get("token_source", "server")
    st.caption(f"Definitions: {DEFINITION} (docs/METRICS.md). Output tokens counted by: {src}.")
    cols = [
        "completed",
        "num_requests",
        "error_rate",
        "output_throughput",
        "total_throughput",
        "request_throughput",
        "median_ttft_ms",
        "p99_ttft_ms",
        "median_itl_ms",
        "p99_itl_ms",
        "median_tpot_ms",
        "median_e2e_ms",
        "concurrency",
        "output_len_ratio",
    ]
    # a point a cancel cut short is marked; its cut requests are no server errors
    table = pd.DataFrame(
        [
            {
                "point": s["label"] + (" (cancelled)" if point_cancelled(s, view.status) else ""),
                **{c: s["metrics"].get(c) for c in cols},
                "error_rate": point_error_rate(s, view.status),
                "client_loop_lag_p99_ms": s["client"].get("loop_lag_ms_p99"),
            }
            for s in view.points
        ]
    )
    headings = {
        "point": "Point",
        "completed": "Completed",
        "num_requests": "Requests sent",
        "client_loop_lag_p99_ms": "Client loop lag p99 (ms)",
    }
    st.dataframe(readable_table(table, headings), hide_index=True, placeholder=EMPTY)
    care = [
        line
        for s in view.points
        for line in caveat_lines(s["label"], point_caveats(s, view.status))
    ]
    if care:  # the one rule of Compare, Experiment and the CLI (core.metrics.point_caveats)
        st.warning("**Read with care**\n\n" + "\n".join(f"- {line}" for line in care))
    st.markdown("**Lengths, prefix cache and KV fill per point**")
    st.caption(
        "Per-request input/output tokens as sent (p50/p90/p99/max); prefix-cache hits as the "
        "server counted them over the point (Δcached / Δprompt tokens); a kv_fill point's "
        "pool and what it was sized to (docs/METRICS.md)."
    )
    st.dataframe(
        readable_table(pd.DataFrame(point_rows(view)).drop(columns=["index"])),
        hide_index=True,
        placeholder=EMPTY,
        key="point_lengths",
    )
    st.subheader("Latency distributions")
    c1, c2 = st.columns(2)
    labels = [s["label"] for s in view.points]
    point_label = c1.selectbox("Point", labels, key="run_point")
    metric = c2.selectbox("Metric", ["ttft", "itl", "tpot", "e2e"], key="run_metric")
    idx = view.points[labels.index(point_label)]["index"]
    if has_records(view, idx):
        chart(cdf_figure({run_id: latency_samples(folder, idx, metric)}, f"{metric.upper()} (ms)"))
    else:
        st.info(no_records_note(view), icon=":material/info:")
timelines_section([run_id], [view], None, key="run_timeline_point")
if not view.imported:
    ledger_section({run_id: run_ledger(view)}, arm_colours([run_id]), key="run_ledger")
st.subheader("GPU memory over time")
if view.imported:
    st.info("No GPU memory samples: this run was imported, not measured by ServeLab.")
elif not (folder.path / "samples.parquet").exists():
    st.caption(
        "No samples yet: they are taken while the points run."
        if drawn_state in LIVE_STATES
        else "No samples: the run ended before its first point."
    )
elif (no_gpu := no_gpu_samples_line(view)) is not None:  # a line, not an empty chart
    st.caption(no_gpu)
else:
    chart(
        gpu_memory_figure(
            folder.read_table("samples.parquet")
            if (folder.path / "samples.parquet").exists()
            else None
        )
    )
st.subheader("Export")
export_buttons([view], key="run-export")

st.subheader("Server log")
# open by default when the run did not succeed: then the log is the answer
with details(
    "Last 200 lines", "run_log", expanded=drawn_state not in ("succeeded", *LIVE_STATES)
) as shown:
    if shown:
        st.code(folder.log_tail(200) or "(empty)", language="log")
st.subheader("Raw artifacts")
files = sorted(p for p in folder.path.rglob("*") if p.is_file() and not p.name.startswith("."))
for path in files:
    rel = path.relative_to(folder.path)
    # path.read_bytes, not its result: read on click, not on every rerun (a big run's
    # records would otherwise be read and held in memory each time the page draws)
    st.download_button(
        f"{rel} ({path.stat().st_size:,} bytes)",
        path.read_bytes,
        file_name=f"{run_id}-{str(rel).replace('/', '-')}",
        key=f"dl-{rel}",
        on_click="ignore",
    )
