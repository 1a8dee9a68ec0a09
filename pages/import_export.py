"""Import / Export: bring in results people already have; take results anywhere.

Import: upload files or paste text (bench_serving / vLLM tables and JSON, SGLang start-up
logs), preview what would be stored (a dry run), then import; links to the runs.
Export: pick runs or an experiment; tables as CSV/Parquet, an HTML report, charts as PNG.
"""

from __future__ import annotations

import io
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from core.engines.registry import engine_names
from core.errors import ServeLabError
from core.experiments.design import list_experiments
from core.interop.export import figures, select, write_pngs
from core.interop.importers import Given, ParsedFile, PlannedRun, parse_text, plan_runs, store_runs
from core.interop.transfer import import_rate
from core.store import Catalog
from pages._auth import can_launch
from pages._export import export_buttons
from pages._services import bootstrap

settings, _worker = bootstrap()
st.title("Import and export")
tab_import, tab_export = st.tabs(["Import", "Export"])

HEADLINE = (
    "output_throughput",
    "median_ttft_ms",
    "p99_ttft_ms",
    "median_itl_ms",
    "median_tpot_ms",
    "completed",
)


def _whole(label: str, text: str, errors: dict[str, str]) -> int | None:
    text = text.strip()
    if not text:
        return None
    if not text.isdigit() or int(text) < 1:
        errors[label] = f"{label}: give a whole number of at least 1, or leave it empty"
        return None
    return int(text)


def _rate(text: str, errors: dict[str, str]) -> float | str | None:
    try:
        return import_rate(text)  # core/interop/transfer.py: the CLI's rule too
    except ValueError as exc:
        errors["rate"] = f"Request rate: {exc}"
        return None


def _show_plan(parsed: ParsedFile, planned: list[PlannedRun], stored: set[str] | None) -> None:
    st.markdown(f"#### {parsed.name} · `{parsed.format}`")
    for note in parsed.not_understood:
        st.warning(f"Not read: {note}", icon=":material/help:")
    if not planned:
        st.info("Nothing to import from this text.")
    for run in planned:
        preview = run.preview()
        if run.exists and (stored is None or run.run_id not in stored):
            what = "already imported as"
        elif stored is None:
            what = "would be stored as"
        else:
            what = "stored as"
        st.markdown(
            f"**{what} `{run.run_id}`** · {preview['state']} · engine "
            f"{preview['engine'] or '*not stated*'} · model "
            f"{preview['model'] or '*not stated*'}"
        )
        if preview.get("reason"):
            st.caption(str(preview["reason"]))
        if stored is not None or run.exists:
            st.page_link(
                "pages/run.py",
                label=f"Open run {run.run_id}",
                query_params={"run": run.run_id},
                icon=":material/description:",
            )
        facts = {k: v for k, v in preview["facts"].items() if k != "facts_source"}
        if facts:
            st.caption(
                "Server facts: "
                + ", ".join(f"{k}={v}" for k, v in facts.items() if not isinstance(v, dict | list))
            )
        rows = []
        for p in preview["points"]:
            m = p["metrics"]
            rows.append(
                {
                    "point": p["label"],
                    **{k: m.get(k) for k in HEADLINE},
                    "metrics read": len(m),
                    "unknown load": ", ".join(u for u in p["unknown"] if u.startswith("point."))
                    or "-",
                }
            )
        if rows:
            st.dataframe(pd.DataFrame(rows), hide_index=True)
        for p in preview["points"]:
            for note in p["not_understood"]:
                st.caption(f"{p['label']}: not read: {note}")
        with st.expander("Every value it would store (ServeLab names, values as read)"):
            st.json(preview, expanded=False)


with tab_import:
    st.markdown(
        "Bring in results you already have: SGLang `bench_serving` output (the printed "
        "*Serving Benchmark Result* table, or its `--output-file` JSONL, bare `Infinity` "
        "included), vLLM `benchmark_serving` / `vllm bench serve` (table or JSON), and SGLang "
        "server start-up logs, alone or with a result. Each becomes a run marked *imported*: "
        "it lists, compares and links like any other, with what its source does not state "
        "shown as unknown. Importing the same results again finds the run already there."
    )
    uploads = st.file_uploader("Files", accept_multiple_files=True, key="imp_files")
    pasted = st.text_area(
        "…or paste text",
        height=180,
        key="imp_text",
        placeholder="============ Serving Benchmark Result ============",
    )
    log_file = st.file_uploader(
        "SGLang start-up log of the server the results came from (optional)", key="imp_log"
    )
    errors: dict[str, str] = {}
    with st.expander("What the files do not state (optional; a value in a file wins)"):
        g1, g2, g3 = st.columns(3)
        # the engines ServeLab knows, and "other" for a server it does not (vLLM, ...)
        engine = g1.selectbox("Engine", ["", *engine_names(), "other"], key="imp_engine")
        model = g2.text_input("Model", key="imp_model")
        rate_text = g3.text_input("Request rate (req/s or inf)", key="imp_rate")
        g4, g5, g6, g7 = st.columns(4)
        conc = _whole("Concurrency", g4.text_input("Concurrency", key="imp_conc"), errors)
        in_len = _whole("Input tokens", g5.text_input("Input tokens", key="imp_in"), errors)
        out_len = _whole("Output tokens", g6.text_input("Output tokens", key="imp_out"), errors)
        n_prompts = _whole("Prompts", g7.text_input("Prompts", key="imp_n"), errors)
        split = st.checkbox(
            "One run per result (default: results of one server at different loads form one run)",
            key="imp_split",
        )
    rate = _rate(rate_text, errors)
    for message in errors.values():
        st.error(message)
    b1, b2 = st.columns(2)
    preview_clicked = b1.button(
        "Preview (dry run)", key="imp_preview", icon=":material/visibility:"
    )
    import_clicked = (
        b2.button(
            "Import",
            key="imp_import",
            type="primary",
            icon=":material/upload:",
            disabled=not can_launch(),
        )
        and can_launch()
    )
    sources: list[tuple[str, bytes]] = [(f.name, f.getvalue()) for f in uploads or []]
    if pasted.strip():
        sources.append(("pasted.txt", pasted.encode("utf-8")))
    if (preview_clicked or import_clicked) and not sources:
        st.warning("Upload a file or paste some text first.")
    elif (preview_clicked or import_clicked) and not errors:
        given = Given(
            engine=engine or None,
            model=model.strip() or None,
            concurrency=conc,
            request_rate=rate,
            input_len=in_len,
            output_len=out_len,
            num_prompts=n_prompts,
        )
        log = None
        if log_file is not None:
            data = log_file.getvalue()
            log = parse_text(data.decode("utf-8", "replace"), log_file.name, data)
            if log.log_facts is None:
                st.warning(f"{log_file.name} holds no SGLang start-up log lines; ignored.")
                log = None
        done: list[str] = []
        for name, data in sources:
            parsed = parse_text(data.decode("utf-8", "replace"), name, data)
            planned = plan_runs(parsed, settings, given, log=log, split=split)
            stored: set[str] | None = None
            if import_clicked:
                try:
                    stored = set(store_runs(planned, settings))
                except ServeLabError as exc:
                    st.error(f"{name}: {exc}")
                    continue
                done += [p.run_id for p in planned]
            _show_plan(parsed, planned, stored)
        if import_clicked and done:
            st.success(f"{len(done)} run(s) ready: {', '.join(done)}")
            if len(done) >= 2:
                st.page_link(
                    "pages/compare.py",
                    label="Compare the imported runs",
                    query_params={"runs": ",".join(done)},
                    icon=":material/compare_arrows:",
                )


def _png_zip(ids: list[str]) -> bytes:
    sel = select(settings, ids)
    figs, _notes = figures(sel)
    buf = io.BytesIO()
    with tempfile.TemporaryDirectory() as tmp:
        paths, _renderer = write_pngs(figs, Path(tmp))
        with zipfile.ZipFile(buf, "w") as zf:
            for path in paths:
                zf.write(path, f"{sel.name}/{path.name}")
    return buf.getvalue()


with tab_export:
    catalog = Catalog(settings.catalog_path, settings.runs_dir)
    catalog.sync()
    runs: list[dict[str, Any]] = catalog.list_runs(limit=500)
    experiments = list_experiments(settings)
    exp_ids = [""] + [e.experiment_id for e in experiments]
    choice = st.selectbox("An experiment (its runs with arm and trial)", exp_ids, key="exp_pick")
    picked = st.multiselect(
        "…or runs (the first is the baseline)",
        [r["run_id"] for r in runs],
        key="exp_runs",
        disabled=bool(choice),
    )
    ids = [choice] if choice else picked
    if not ids:
        st.info("Pick runs or an experiment to export.")
    else:
        try:
            sel = select(settings, ids)
        except ServeLabError as exc:
            st.error(str(exc))
        else:
            st.caption(f"{sel.kind}: {sel.name} · {len(sel.views)} run(s)")
            export_buttons(sel.views, 0, key="ie-export", sel=sel)
            st.download_button(
                "Charts as PNG (zip; kaleido with Debian chromium)",
                lambda: _png_zip(ids),
                file_name=f"{sel.name}-png.zip",
                mime="application/zip",
                key="ie-png",
                on_click="ignore",
                icon=":material/image:",
            )
