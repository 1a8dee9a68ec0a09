"""Experiment: arms × trials with intervals, a verdict and SLO views (?experiment=ID)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from core.compare import confounders, memory_headroom
from core.experiments import experiment_runs, list_experiments, load_experiment, noise_floor
from core.figures import arm_bands_figure, frontier_figure, memory_headroom_figure
from core.metrics import DEFINITION
from core.stats import EXPERIMENT_METRICS, arm_stats, frontier, slo_table, verdict
from pages._services import bootstrap

settings, _worker = bootstrap()
exp_id = st.query_params.get("experiment", "")
record = load_experiment(settings, exp_id) if exp_id else None
if record is None:
    st.title("Experiments")
    rows = [{"experiment": e["experiment_id"], "name": e["spec"]["name"],
             "kind": e["spec"].get("kind"), "arms": len(e["spec"]["arms"]),
             "trials": e["spec"]["trials"], "created": e.get("created_at")}
            for e in list_experiments(settings)]
    if not rows:
        st.info("No experiments yet: choose a preset with two arms on the Launch page, or run "
                "`python -m core experiment PLAN.yaml`.")
    for row in rows:
        st.page_link("pages/experiment.py", label=f"{row['experiment']} · {row['name']} "
                     f"({row['arms']} arms × {row['trials']} trials)",
                     query_params={"experiment": row["experiment"]})
    st.stop()
assert record is not None

spec = record["spec"]
arms = [a["label"] for a in spec["arms"]]
baseline = spec.get("baseline") or arms[-1]
st.title(spec["name"])
st.caption(f"{exp_id} · {len(arms)} arms × {spec['trials']} trials · arm order shuffled per "
           f"trial with seed {spec['order_seed']} · fresh server per run · same prompts for "
           f"every arm · host {record.get('host')}")


@st.fragment(run_every="3s")
def progress() -> None:
    runs = experiment_runs(settings, record)
    states = [r.view.status.get("state") for r in runs]
    done = sum(s not in ("queued", "running") for s in states)
    if done < len(states):
        st.progress(done / max(len(states), 1), text=f"{done}/{len(states)} runs finished")
    table = pd.DataFrame([{"trial": r.trial, "arm": r.arm, "run": r.view.run_id,
                           "state": r.view.status.get("state"),
                           "reason": r.view.status.get("reason")} for r in runs])
    with st.expander(f"Runs ({done}/{len(states)} finished)", expanded=done < len(states)):
        st.dataframe(table, hide_index=True)


progress()
runs = experiment_runs(settings, record)
table = arm_stats(runs, baseline)
floor = noise_floor(settings) if spec.get("kind") != "aa" else None
st.subheader("Verdict")
st.markdown(f"**{verdict(spec['name'], table, runs, baseline, floor)}**")
conf = confounders([r.view for r in runs]) if len(runs) > 1 else []
if conf:
    st.warning(f"Confounders: {', '.join(conf)} differ between runs beyond the arms' knobs.")
if floor:
    st.caption(f"A/A noise floor on this host (from {floor['experiment_id']}): "
               + ", ".join(f"{k} ±{v:.1%}" for k, v in floor.items() if k != "experiment_id"))
elif spec.get("kind") != "aa":
    st.caption("No A/A experiment on this host yet: run the 'A/A noise check' preset to "
               "measure the noise floor.")
st.caption(f"Definitions: {DEFINITION}; intervals: Student-t over trials (unknown below 3 "
           "trials); relative difference vs the baseline arm with Welch's interval.")

st.subheader("Per point and metric")
shown = table.copy()
if "label" in shown:
    shown["label"] = shown["label"].where(shown["arm"] != baseline, "baseline")
pct = st.column_config.NumberColumn(format="percent")
st.dataframe(shown, hide_index=True, column_config={
    "rel": pct, "rel_low": pct, "rel_high": pct,
    "mean": st.column_config.NumberColumn(format="%.2f"),
    "ci_low": st.column_config.NumberColumn(format="%.2f"),
    "ci_high": st.column_config.NumberColumn(format="%.2f")})
metric = st.selectbox("Metric against concurrency", list(EXPERIMENT_METRICS),
                      key="exp_metric")
st.plotly_chart(arm_bands_figure(table, metric))

gpus = max((r.view.spec.get("server", {}).get("tp_size") or 1) for r in runs) if runs else 1
st.plotly_chart(frontier_figure(frontier(table, gpus), gpus))

st.subheader("Memory headroom per arm")
first = {}
for r in runs:
    first.setdefault(r.arm, r.view)
head = memory_headroom(list(first.values()))
head.insert(0, "arm", list(first))
st.dataframe(head, hide_index=True)
st.plotly_chart(memory_headroom_figure(head))

st.subheader("SLO")
c1, c2 = st.columns(2)
ttft = c1.number_input("p99 TTFT at most (ms)", 1.0, 1e7, 1000.0, key="slo_ttft")
tpot = c2.number_input("median TPOT at most (ms)", 1.0, 1e6, 50.0, key="slo_tpot")
slo = slo_table(runs, ttft, tpot)
if slo.empty:
    st.info("No per-request records yet.")
else:
    best = slo[slo["meets_slo"]].groupby("arm")["concurrency"].max()
    for arm in arms:
        st.write(f"**{arm}**: largest concurrency meeting the SLO: "
                 f"{best.get(arm, 'none') if not best.empty else 'none'}")
    st.dataframe(slo, hide_index=True)
