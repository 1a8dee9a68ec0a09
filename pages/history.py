"""History: one configuration's runs over time and engine versions, the band the earlier
runs make and the regression alert (shareable as ?series=KEY; ?run=ID opens that run's
series with that run checked)."""

from __future__ import annotations

import streamlit as st

from core.analysis.history import (
    BAND_LEVEL,
    alert_text,
    is_series_key,
    load_history,
    power_text,
)
from core.numbers import share_text
from core.run_folder import is_run_id
from core.views.history import history_figure, history_path, history_table, history_verdict
from pages._chart import chart
from pages._details import code_line
from pages._picker import pick_run
from pages._services import bootstrap

settings, _worker = bootstrap()
target = st.query_params.get("series", "") or st.query_params.get("run", "")
history = (
    load_history(settings.runs_dir, target)
    if target and (is_series_key(target) or is_run_id(target))
    else None
)
st.title("History")
if history is None:
    if target:
        st.warning(f"No series selected, or no succeeded run of {target!r}: pick a run below.")
    # a run opens its configuration's series, that run checked (/history?run=RUN_ID)
    pick_run(settings, "run", "Pick a run: its configuration's history", ("succeeded",))

# the verdict first: the same words as `python -m core history` (core.views.history): the
# version change as its experiment reads it, where one measured it, then the band's alert
alert, power = alert_text(history), power_text(history)
for line in history_verdict(history, settings):
    if line in (alert, power):
        continue
    st.info(line, icon=":material/compare_arrows:")
if history.regression:
    st.error(alert, icon=":material/trending_down:")
elif alert.startswith("No band yet"):
    st.info(alert, icon=":material/hourglass_empty:")
else:
    st.success(alert, icon=":material/check_circle:")
if power:
    st.caption(power)
versions = list(dict.fromkeys(r.version for r in history.runs))
st.caption(
    f"{history.config} · {len(history.runs)} run(s) of this configuration · "
    f"{len(versions)} version(s): {', '.join(versions)} · checked: {history.focus}"
)
st.markdown("**Link to this series**")
code_line(f"/{history_path(history.key)}")

labels = [label for _, label in history.points]
keys = [key for key, _ in history.points]
chosen = st.selectbox(
    "Point",
    labels,
    index=labels.index(history.headline_label) if history.headline_label in labels else 0,
    key="history_point",
    help="the alert checks the headline point (the heaviest load); the others are shown",
)
point = keys[labels.index(chosen)]
chart(history_figure(history, point))
table = history_table(history, point)
st.dataframe(
    table,
    hide_index=True,
    column_config={
        "run": st.column_config.LinkColumn("run", display_text=r"run\?run=(.*)"),
        **{
            c: st.column_config.NumberColumn(format="%.1f")
            for c in table.columns
            if str(table[c].dtype).startswith("float")
        },
    },
)
st.caption(
    f"Band: the {share_text(BAND_LEVEL)} prediction interval of the next run (shared over "
    "the points checked) from the earlier runs of one engine installation, on the log scale "
    "(mean ± t·s·√(1+1/n)); a value beyond it on the worse side is a regression. It needs 3 "
    "earlier runs; an A/A series alerts at most 2% of the time "
    "(docs/METRICS.md, History). Error bars: each run's own 95% interval from its requests."
)
