"""Compare: two or more runs side by side (shareable as ?runs=ID1,ID2,...)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from core.compare import (
    config_diff,
    confounders,
    has_records,
    latency_samples,
    load_run,
    memory_headroom,
    metric_deltas,
    no_records_note,
    unknown_fields,
)
from core.figures import cdf_figure, memory_headroom_figure, metric_vs_concurrency
from core.metrics import DEFINITION
from core.run_folder import RunFolder
from pages._export import export_buttons
from pages._services import bootstrap

settings, _worker = bootstrap()
ids = [r for r in st.query_params.get("runs", "").split(",") if r.strip()]
folders = [RunFolder(settings.runs_dir / r) for r in ids
           if r.replace("-", "").isalnum() and (settings.runs_dir / r / "spec.json").is_file()]
st.title("Compare")
if len(folders) < 2:
    st.warning("Pick two or more runs on the Runs page (links look like "
               "`/compare?runs=ID1,ID2`)." + (f" Unknown: {', '.join(ids)}" if ids else ""))
    st.stop()

views = [load_run(f) for f in folders]
run_ids = [v.run_id for v in views]
baseline_id = st.query_params.get("baseline", run_ids[0])
baseline_id = st.selectbox("Baseline", run_ids, index=run_ids.index(baseline_id)
                           if baseline_id in run_ids else 0, key="baseline")
st.query_params["baseline"] = baseline_id
baseline = run_ids.index(baseline_id)

states = {v.run_id: v.status.get("state") for v in views}
if any(s != "succeeded" for s in states.values()):
    st.info("Not every run succeeded: " + ", ".join(f"{k}: {s}" for k, s in states.items()))

intended = {f for v in views for f in v.spec.get("intended_diff", [])}
diff = config_diff(views)
extra = confounders(views, intended)
if extra:
    knob = ", ".join(sorted(intended)) or "none declared"
    st.warning(f"More differs than the intended knob ({knob}): **{', '.join(extra)}**. "
               "A difference in the numbers cannot be pinned on one knob.",
               icon=":material/warning:")
elif intended:
    st.success(f"Only the intended knob differs: {', '.join(sorted(intended))}.")
for lab, unknown in unknown_fields(views).items():  # imported runs state less
    st.info(f"**{lab}** is imported and does not state {len(unknown)} compared field(s), so "
            f"they cannot be checked: {', '.join(unknown)}.", icon=":material/upload_file:")

st.subheader("Metrics")
src = {s.get("token_source", "server") for v in views for s in v.points}
st.caption(f"Definitions: {DEFINITION}. Output tokens counted by: {', '.join(sorted(src))}. "
           "Deltas are against the baseline; green = better, red = worse by the metric's "
           "direction.")
deltas = metric_deltas(views, baseline=baseline)
# Headline: the heaviest common point, each run against the baseline.
head_point = deltas["point"].iloc[-1] if not deltas.empty else None
for other in (r for r in run_ids if r != baseline_id):
    cols = st.columns(4)
    cols[0].markdown(f"**{other}** vs **{baseline_id}**  \n{head_point}")
    for col, metric in zip(cols[1:], ("output_throughput", "median_ttft_ms", "median_itl_ms"),
                           strict=True):
        row = deltas[(deltas["point"] == head_point) & (deltas["metric"] == metric)]
        if row.empty or pd.isna(row.iloc[0][other]):
            col.metric(metric, "n/a")
            continue
        r = row.iloc[0]
        rel = r.get(f"rel_{other}")
        col.metric(metric, f"{r[other]:.1f}",
                   delta=None if pd.isna(rel) else f"{rel:+.1%}",
                   delta_color="normal" if r["direction"] == "higher" else "inverse")
if "same_prompts" in deltas.columns and deltas["same_prompts"].map(
        lambda same: same is False).any():
    st.warning("Some points were measured on different prompts (prompt digests differ).")


def _colour(row: pd.Series) -> list[str]:
    out = []
    for col in row.index:
        v = row[col]
        out.append("background-color: #d4edda" if col.startswith("verdict_") and v == "better"
                   else "background-color: #f8d7da" if col.startswith("verdict_") and v == "worse"
                   else "")
    return out


st.dataframe(deltas.style.apply(_colour, axis=1).format(
    {c: "{:+.1%}" for c in deltas.columns if c.startswith("rel_")}, na_rep="–"),
    hide_index=True)

st.subheader("Configuration differences")
if diff.empty:
    st.write("The configurations are identical.")
else:
    st.dataframe(diff.astype(str), hide_index=True)

st.subheader("Throughput and latency by concurrency")
c1, c2 = st.columns(2)
c1.plotly_chart(metric_vs_concurrency(views, "output_throughput"))
c2.plotly_chart(metric_vs_concurrency(views, "median_ttft_ms"))

st.subheader("Latency distributions")
labels = [s["label"] for s in views[baseline].points]
if labels:
    q1, q2 = st.columns(2)
    point = st.query_params.get("point", labels[0])
    point = q1.selectbox("Point", labels, index=labels.index(point) if point in labels else 0,
                         key="cmp_point")
    metric = st.query_params.get("metric", "ttft")
    metrics = ["ttft", "itl", "tpot", "e2e"]
    metric = q2.selectbox("Metric", metrics, index=metrics.index(metric)
                          if metric in metrics else 0, key="cmp_metric")
    st.query_params["point"], st.query_params["metric"] = point, metric
    series = {}
    for v, f in zip(views, folders, strict=True):
        match = [s["index"] for s in v.points if s["label"] == point]
        if match and not has_records(v, match[0]):
            st.info(no_records_note(v), icon=":material/info:")  # not an empty line
            continue
        series[v.run_id] = latency_samples(f, match[0], metric) if match else []
    if series:
        st.plotly_chart(cdf_figure(series, f"{metric.upper()} (ms) at {point}"))

st.subheader("Memory headroom")
head = memory_headroom(views)
st.dataframe(head, hide_index=True)
st.plotly_chart(memory_headroom_figure(head))

st.subheader("Export")
export_buttons(views, baseline, key="compare-export")
