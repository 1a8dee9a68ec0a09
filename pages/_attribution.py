"""The Experiment page's attribution section for a knob grid: the verdict split into each
knob's effect, the waterfall, every effect, and the sweep charts (core does the numbers)."""

from __future__ import annotations

from collections.abc import Collection

import pandas as pd
import streamlit as st

from core.analysis.attribution import (
    ATTRIBUTION_METRICS,
    attribute,
    decompose,
    design_of,
    effects_table,
    verdict_sentence,
)
from core.analysis.stats import RunOfArm
from core.experiments.design import ExperimentRecord
from core.metric_info import metric_label
from core.settings import Settings
from core.views.figures_attribution import attribution_waterfall, sweep_figure
from pages._chart import chart
from pages._details import details


def attribution_section(
    settings: Settings,
    record: ExperimentRecord,
    runs: list[RunOfArm],
    table: pd.DataFrame,
    untested: Collection[str] = (),
) -> None:
    """``untested``: the knobs the workload could not show (the story's knob checks), which
    read "not tested by this workload" rather than inconclusive."""
    design = design_of(record.spec) if record.spec.get("grid") else None
    if design is None:
        return
    attr = attribute(runs, design)
    st.subheader("Attribution: which knob did it")
    metrics = [m for m in ATTRIBUTION_METRICS if any(k[1] == m for k in attr.decompositions)]
    for note in attr.notes:
        st.warning(note, icon=":material/warning:")
    if not metrics:
        st.info(
            "No attribution yet: it needs finished runs of the baseline and the "
            "after-configuration."
        )
        return
    c1, c2 = st.columns(2)
    metric = c1.selectbox("Metric", metrics, format_func=metric_label, key="attr_metric")
    concs = [k[0] for k in attr.decompositions if k[1] == metric]
    known = sorted(c for c in concs if c is not None)
    conc = (
        c2.selectbox("Concurrency", known, index=len(known) - 1, key="attr_conc") if known else None
    )
    st.markdown(f"**{verdict_sentence(attr, metric, conc, untested)}**")
    where = "over all points" if conc is None else f"at concurrency {conc}"
    # no A/A band: an A/A measures noise (it plans trials), it is no threshold
    chart(attribution_waterfall(decompose(attr, metric, conc), metric, where))
    st.caption(
        "Effects are log-ratios from OLS on log(metric) with one block per trial; "
        "a part's bar shows its own 95% interval; faded = its interval covers 0 "
        "(inconclusive or equivalent)."
    )
    with details("Every effect, per point and metric", "attr_effects") as shown:
        if shown:
            pct = st.column_config.NumberColumn(format="percent")
            st.dataframe(
                effects_table(attr),
                hide_index=True,
                column_config={"rel": pct, "rel_low": pct, "rel_high": pct},
            )
    swept = [k for k in design.knobs if len(design.levels[k]) > 2 or len(design.knobs) == 1]
    if swept and metric in set(table.get("metric", [])):
        st.subheader("Sweep")
        for knob in swept:
            chart(sweep_figure(table, design, knob, metric))
