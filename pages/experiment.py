"""Experiment: arms × trials with intervals, a verdict and SLO views (?experiment=ID).

Thin: the baseline, the card and the verdict come from core/analysis/card.py (the same story as
the Compare page and every export). While runs are queued or running, a fragment follows
them and redraws the whole page whenever one finishes, so results appear without reload.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pandas as pd
import streamlit as st

from core.analysis.card import arm_table, experiment_story
from core.analysis.diff import confounders
from core.analysis.memory import memory_headroom
from core.analysis.sequential import progress_text
from core.analysis.stats import (
    EXPERIMENT_METRICS,
    RunOfArm,
    first_per_arm,
    frontier,
    slo_table,
)
from core.analysis.trials import experiment_runs
from core.experiments.design import list_experiments, load_experiment
from core.interop.export import select
from core.launch.presets import stored_run_estimate
from core.metric_info import metric_label
from core.metrics import DEFINITION
from core.numbers import trial_number
from core.run_folder import is_run_id
from core.shapes import runs_routing, shapes_line
from core.views.cells import EMPTY, column_label, headroom_table, readable_table
from core.views.figures import (
    arm_bands_figure,
    arm_colours,
    frontier_figure,
    memory_headroom_figure,
    no_memory_line,
)
from core.views.progress import ended_text, experiment_time_text
from pages import _story
from pages._answers import answers_section
from pages._attribution import attribution_section
from pages._chart import chart
from pages._details import details
from pages._engines import engine_section
from pages._export import export_buttons
from pages._ledger import ledger_section
from pages._services import bootstrap
from pages._timelines import timelines_section

ACTIVE = ("queued", "running")

settings, _worker = bootstrap()
exp_id = st.query_params.get("experiment", "")
loaded = load_experiment(settings, exp_id) if exp_id and is_run_id(exp_id) else None
if loaded is None:
    st.title("Experiments")
    if exp_id:
        st.warning(f"No experiment {exp_id[:80]!r}: pick one below.")
    rows = list_experiments(settings)
    if not rows:
        st.info(
            "No experiments yet: choose a preset with two arms on the Launch page, or run "
            "`python -m core experiment PLAN.yaml`."
        )
    for e in rows:
        st.page_link(
            "pages/experiment.py",
            label=f"{e.experiment_id} · {e.name} "
            f"({len(e.arm_labels)} arms × {e.spec.get('trials')} trials)",
            query_params={"experiment": e.experiment_id},
        )
    st.stop()
record = loaded  # not None: a name of its own, so the fragment below sees it narrowed

spec: dict[str, Any] = record.spec
st.title(record.name or exp_id)
st.caption(
    f"{exp_id} · {len(record.arm_labels)} arms × {spec.get('trials')} trials · arm "
    f"order shuffled per trial with seed {spec.get('order_seed')} · fresh server per "
    f"run · same prompts for every arm · host {record.host}"
)
runs = experiment_runs(settings, record)
# model shapes: dummy weights, speed only; how the runs' MoE routing ran (launch.json)
if shape_line := shapes_line([spec], runs_routing(r.view.launch for r in runs)):
    st.warning(shape_line, icon=":material/science:")


def _states(runs: list[RunOfArm]) -> tuple[str, ...]:
    return tuple(str(r.view.status.state) for r in runs)


drawn = _states(runs)
# trials: auto: "decided after 5 trials (38 min)", or while it runs "trial 4 of at most 10;
# undecided: ..." (core/analysis/sequential.py); the worker's controller adds the trials.
trials_line = progress_text(record)
stop = record.adaptive.stop if record.adaptive else None
adaptive_running = record.is_adaptive and stop is None
if trials_line is not None:  # green only for an answer: "undecided" at a limit is no success
    decided = stop is not None and stop.reason == "decided"
    (st.success if decided else st.info)(f"Trials auto: {trials_line}")


@st.fragment(run_every="3s" if adaptive_running or any(s in ACTIVE for s in drawn) else None)
def progress() -> None:
    """The runs and their states; redraws the page when a run's state changes or the
    controller of trials: auto added runs or stopped."""
    fresh = load_experiment(settings, exp_id) or record
    if fresh.as_json() != record.as_json():
        st.rerun()
    now = experiment_runs(settings, record)
    if _states(now) != drawn:
        st.rerun()  # a run moved on: the whole page (card, verdict, charts) follows
    done = sum(s not in ACTIVE for s in drawn)
    ended = ended_text(drawn)  # "4/4 ended: 4 failed", never "finished" for a failure
    if done < len(drawn):
        st.progress(done / max(len(drawn), 1), text=f"runs {ended}")
        # elapsed and time left, redrawn with this fragment; the per-run estimate read once
        if (key := f"estimate-{exp_id}") not in st.session_state:
            first = next((r.view.folder for r in now if r.view.folder is not None), None)
            st.session_state[key] = (
                stored_run_estimate(settings, first) if first else (None, "no run folder")
            )
        estimate_s, source = st.session_state[key]
        st.caption(
            experiment_time_text(
                [r.view.status for r in now], estimate_s, source, datetime.now(UTC)
            )
        )
    # trials counted from 1, as in each run page's title ("trial 2 of 3"); no reason: "—"
    table = readable_table(
        pd.DataFrame(
            [
                {
                    "trial": trial_number(r.trial),
                    "arm": r.arm,
                    "state": r.view.status.state,
                    "run": f"run?run={r.view.run_id}",
                    "reason": r.view.status.reason or None,  # a succeeded run's "": "—"
                }
                for r in now
            ]
        ),
        keep=["run"],
    )
    label = f"Runs ({ended})"
    if done < len(drawn):  # live: the list is the news
        with st.expander(label, expanded=True):
            _run_list(table)
    else:
        with details(label, "exp_runs") as shown:
            if shown:
                _run_list(table)


def _run_list(table: Any) -> None:
    link = st.column_config.LinkColumn(display_text=r"run\?run=(.*)")
    st.dataframe(
        table, hide_index=True, placeholder=EMPTY, column_config={column_label("run"): link}
    )


progress()

story = experiment_story(settings, record, runs)
succeeded = [r for r in runs if r.view.status.state == "succeeded"]
if not succeeded:
    active = sum(s in ACTIVE for s in drawn)
    if active or not runs:
        st.info(
            f"No results yet: {active} run(s) queued or running. This page fills in as "
            "they finish.",
            icon=":material/hourglass_top:",
        )
    else:
        reasons = sorted({str(r.view.status.reason or r.view.status.state) for r in runs})
        st.error(
            f"No run of this experiment succeeded ({len(runs)} run(s): "
            f"{', '.join(sorted(set(drawn)))}), so there is nothing to compare. "
            "Reasons: " + "; ".join(reasons),
            icon=":material/error:",
        )
    st.stop()
if still := sum(s in ACTIVE for s in drawn):
    st.info(
        f"{still} of {len(drawn)} run(s) still queued or running: the results below are "
        "partial and update as runs finish.",
        icon=":material/hourglass_top:",
    )

# --- the answer: card, verdict, and the link to the same comparison on Compare -------------
_story.verdict(story, record.name)  # the answer first: one sentence per knob, whether it was tested
_story.summary_card(story)
answers_section(story, "exp_answers")  # same / differs / broken, beside the verdict
first = first_per_arm(runs)
if len(first) > 1:  # Compare tells this story too: every trial, the same baseline and intervals
    st.page_link(
        "pages/compare.py",
        label="Compare the arms (all trials)",
        query_params={"experiment": exp_id},
        icon=":material/compare_arrows:",
    )
conf = confounders([r.view for r in runs]) if len(runs) > 1 else []
if conf:
    st.warning(f"Confounders: {', '.join(conf)} differ between runs beyond the arms' knobs.")
st.caption(
    f"Definitions: {DEFINITION}; intervals: Student-t over trials (unknown below 3 "
    "trials); relative difference vs the baseline arm, its interval on the log scale."
)

# --- details --------------------------------------------------------------------------------
colours = arm_colours(story.arms, story.baseline)
table = arm_table(runs, story)
attribution_section(
    settings, record, runs, table, story.untested_knobs
)  # a knob grid: which knob did it
st.subheader("Per point and metric")
with details(f"Every arm, point and metric ({len(table)} rows)", "exp_all_metrics") as open_:
    if open_:
        shown = table.copy()
        shown["label"] = shown["label"].where(shown["arm"] != story.baseline, "baseline")
        pct = st.column_config.NumberColumn(format="percent")
        st.dataframe(
            shown,
            hide_index=True,
            column_config={
                "rel": pct,
                "rel_low": pct,
                "rel_high": pct,
                "mean": st.column_config.NumberColumn(format="%.2f"),
                "ci_low": st.column_config.NumberColumn(format="%.2f"),
                "ci_high": st.column_config.NumberColumn(format="%.2f"),
            },
        )
metric = st.selectbox(
    "Metric against concurrency",
    list(EXPERIMENT_METRICS),
    format_func=metric_label,  # as Compare's arms view names it
    key="exp_metric",
)
chart(arm_bands_figure(table, metric, colours))

gpus = max((r.view.spec.get("server", {}).get("tp_size") or 1) for r in runs)
chart(frontier_figure(frontier(table, gpus), gpus, colours))

# one run per arm (its first trial): twelve overlaid runs read as noise
timelines_section(
    list(first),
    list(first.values()),
    story.baseline,
    key="exp_timeline_point",
    caption="One run per arm: its first trial (the other trials' runs open from the list above).",
    colours=colours,  # the arms' colours of every chart on this page
)

engine_section(first)  # arms of different engines: each one's configuration, flags side by side
ledger_section(story.ledger, colours, key="exp_ledger")

st.subheader("Memory headroom per arm")
head = memory_headroom(list(first.values()), list(first))
if (no_memory := no_memory_line(head, list(first.values()))) is not None:
    st.caption(no_memory)  # one line, not an all-"—" table and an empty chart
else:
    for table in headroom_table(head, "arm"):  # a row per fact, a column per arm
        st.table(table)
    chart(memory_headroom_figure(head))

st.subheader("SLO")
c1, c2 = st.columns(2)
ttft = c1.number_input("p99 TTFT at most (ms)", 1.0, 1e7, 1000.0, key="slo_ttft")
tpot = c2.number_input("median TPOT at most (ms)", 1.0, 1e6, 50.0, key="slo_tpot")
slo = slo_table(runs, ttft, tpot)
if slo.empty:
    st.info("No per-request records yet.")
else:
    best = slo[slo["meets_slo"]].groupby("arm")["concurrency"].max()
    for arm in story.arms:
        st.write(
            f"**{arm}**: largest concurrency meeting the SLO: "
            f"{best.get(arm, 'none') if not best.empty else 'none'}"
        )
    with details(f"Per run and point ({len(slo)} rows)", "exp_slo_rows") as open_:
        if open_:
            st.dataframe(slo, hide_index=True)

st.subheader("Export")  # the report a colleague receives: this page's story (the Selection's)
sel = select(settings, [exp_id])  # every run and trial, the experiment's baseline arm
export_buttons(sel.views, key="exp-export", sel=sel)
