"""Compare: two or more runs side by side (shareable as ?runs=ID1,ID2,...&baseline=ID).

Thin: which run is the baseline (the control, unless the link names one), what each run is
called, the headline point, the card and the verdict all come from core (core/analysis/roles.py,
core/analysis/card.py through the export Selection), so this page, the Experiment page and the
HTML report tell the same story.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from core.analysis.card import shared_experiment
from core.analysis.diff import config_diff, confounders, unknown_fields, version_change
from core.analysis.memory import memory_headroom
from core.analysis.points import metric_deltas
from core.analysis.roles import baseline_index, headline_point, knob_fields
from core.analysis.runs import has_records, latency_samples, load_run, no_records_note
from core.interop.export import selection_of
from core.metric_info import metric_label, verdict_metrics
from core.metrics import DEFINITION
from core.numbers import pct_text
from core.run_folder import find_runs
from core.shapes import runs_routing, shapes_line
from core.views.cells import (
    DELTA_LEGEND,
    EMPTY,
    confounder_sentence,
    headroom_table,
    number_text,
    readable_cells,
)
from core.views.figures import (
    cdf_figure,
    memory_headroom_figure,
    metric_vs_concurrency,
    no_memory_line,
)
from pages import _story
from pages._answers import answers_section
from pages._chart import chart
from pages._compare_experiment import experiment_compare
from pages._details import details
from pages._explain import explain_block
from pages._export import export_buttons
from pages._ledger import ledger_section
from pages._picker import pick_runs
from pages._services import bootstrap
from pages._timelines import timelines_section

settings, _worker = bootstrap()
if exp_id := st.query_params.get("experiment", ""):
    experiment_compare(settings, exp_id)  # the arms over all trials: the Experiment page's story
    st.stop()
folders, unknown = find_runs(settings.runs_dir, st.query_params.get("runs", "").split(","))
if len(folders) < 2:
    st.title("Compare")
    if unknown:
        st.warning(f"Not runs here: {', '.join(unknown)}; pick two or more below.")
    pick_runs(settings)  # links look like /compare?runs=ID1,ID2
views = [load_run(f) for f in folders]
if (exp_of := shared_experiment(views)) is not None:  # runs of one experiment: say what this is
    st.title("Compare single runs (one run per arm, no intervals)")
    st.page_link(
        "pages/compare.py",
        label="Compare the arms (all trials): the experiment's estimate with intervals",
        query_params={"experiment": exp_of},
        icon=":material/compare_arrows:",
    )
else:
    st.title("Compare")
if unknown:
    st.warning(f"Not runs here, left out: {', '.join(unknown)}")
# model shapes: dummy weights; how the runs' MoE routing ran (launch.json)
if shape_line := shapes_line([v.spec for v in views], runs_routing(v.launch for v in views)):
    st.warning(shape_line, icon=":material/science:")
run_ids = [v.run_id for v in views]
asked = st.query_params.get("baseline", "")
default = run_ids.index(asked) if asked in run_ids else baseline_index(views)
sel = selection_of(views, default, settings)
names = sel.names
baseline = st.selectbox(
    "Baseline",
    range(len(views)),
    index=default,
    format_func=lambda i: f"{names[i]} ({run_ids[i]})",
    key="baseline",
    help="Default: the control (the knob's off / default / lower value).",
)
st.query_params["baseline"] = run_ids[baseline]
if baseline != sel.baseline:
    sel = selection_of(views, baseline, settings)
story = sel.story
assert story is not None
colours = sel.colours
st.caption(" · ".join(f"**{n}** = {r}" for n, r in zip(names, run_ids, strict=True)))

states = {n: v.status.state for n, v in zip(names, views, strict=True)}
if any(s != "succeeded" for s in states.values()):
    st.info("Not every run succeeded: " + ", ".join(f"{k}: {s}" for k, s in states.items()))

# --- the answer ------------------------------------------------------------------------------
_story.verdict(story)  # the answer first: one sentence per knob, whether it was tested
_story.summary_card(story)
answers_section(story, "cmp_answers")  # same / differs / broken, beside the verdict
knobs = knob_fields(views)
extra = confounders(views)
if extra:
    st.warning(confounder_sentence(knobs, extra), icon=":material/warning:")
elif knobs:
    st.success(f"Only the knob under test differs: {', '.join(knobs)}.")
# the version is the installation's, not a confounder; the baseline's first
if version := version_change([views[baseline], *(v for i, v in enumerate(views) if i != baseline)]):
    st.info(f"The runs differ by engine installation: {version}.", icon=":material/deployed_code:")
by_id = dict(zip(run_ids, names, strict=True))
for rid, missing in unknown_fields(views).items():  # imported runs state less
    st.info(
        f"**{by_id.get(rid, rid)}** ({rid}) does not state {len(missing)} compared "
        f"field(s), so they cannot be checked: {', '.join(missing)}.",
        icon=":material/upload_file:",
    )

# --- details ---------------------------------------------------------------------------------
st.subheader("Metrics")
src = {s.get("token_source", "server") for v in views for s in v.points}
st.caption(
    f"Definitions: {DEFINITION}. Output tokens counted by: {', '.join(sorted(src))}. "
    "Deltas are against the baseline, one run each: no interval, so no colour says "
    "better or worse."
)
deltas = metric_deltas(views, baseline=baseline, names=names)
head = headline_point(views)
if head is not None:
    tiles = verdict_metrics()  # one tile per headline metric, however many the table has
    for other in (n for i, n in enumerate(names) if i != baseline):
        cols = st.columns(1 + len(tiles))
        cols[0].markdown(f"**{other}** vs **{names[baseline]}**  \n{head.label}")
        for col, metric in zip(cols[1:], tiles, strict=True):
            row = deltas[(deltas["point"] == head.label) & (deltas["metric"] == metric)]
            if row.empty or pd.isna(row.iloc[0][other]):
                col.metric(metric_label(metric), "n/a")
                continue
            r = row.iloc[0]
            rel = r.get(f"rel_{other}")
            col.metric(
                metric_label(metric),
                number_text(r[other]),
                delta=None if pd.isna(rel) else pct_text(rel),
                delta_color="off",  # a single-run difference: no interval backs a colour
            )
if (
    "same_prompts" in deltas.columns
    and deltas["same_prompts"].map(lambda same: same is False).any()
):
    st.warning("Some points were measured on different prompts (prompt digests differ).")


with details(f"Every metric at every point ({len(deltas)} rows)", "cmp_all_metrics") as shown:
    if shown:
        st.dataframe(
            deltas.style.format(
                {c: pct_text for c in deltas.columns if c.startswith("rel_")}, na_rep=EMPTY
            ),
            hide_index=True,
            placeholder=EMPTY,
        )
        st.caption(DELTA_LEGEND)

st.subheader("Configuration differences")
diff = config_diff(views, names)
if diff.empty:
    st.write("The configurations are identical.")
else:
    st.table(readable_cells(diff).set_index(diff.columns[0]))
explain_block(settings, views, baseline)  # two or more knobs differ: queue the factorial

st.subheader("Throughput and latency by concurrency")
c1, c2 = st.columns(2)
with c1:
    chart(metric_vs_concurrency(views, "output_throughput", names, colours))
with c2:
    chart(metric_vs_concurrency(views, "median_ttft_ms", names, colours))

st.subheader("Latency distributions")
labels = [s["label"] for s in views[baseline].points]
if labels:
    q1, q2 = st.columns(2)
    point = st.query_params.get("point", head.label if head is not None else labels[-1])
    point = q1.selectbox(
        "Point", labels, index=labels.index(point) if point in labels else 0, key="cmp_point"
    )
    metric = st.query_params.get("metric", "ttft")
    metrics = ["ttft", "itl", "tpot", "e2e"]
    metric = q2.selectbox(
        "Metric", metrics, index=metrics.index(metric) if metric in metrics else 0, key="cmp_metric"
    )
    st.query_params["point"], st.query_params["metric"] = point, metric
    series = {}
    for name, v, f in zip(names, views, folders, strict=True):
        match = [s["index"] for s in v.points if s["label"] == point]
        if match and not has_records(v, match[0]):
            st.info(no_records_note(v), icon=":material/info:")  # not an empty line
            continue
        series[name] = latency_samples(f, match[0], metric) if match else []
    if series:
        chart(cdf_figure(series, f"{metric.upper()} (ms) at {point}", colours))

timelines_section(names, views, names[baseline], key="cmp_timeline_point", colours=colours)

ledger_section(story.ledger, colours, key="cmp_ledger")

st.subheader("Memory headroom")
mem = memory_headroom(views, names)
if (no_memory := no_memory_line(mem, views)) is not None:  # one line, not an empty table
    st.caption(no_memory)
else:
    for table in headroom_table(mem):  # a row per fact, a column per run: none cut off
        st.table(table)
    chart(memory_headroom_figure(mem))

st.subheader("Export")
export_buttons(views, baseline, key="compare-export", sel=sel)
