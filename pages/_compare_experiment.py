"""Compare in experiment mode (``/compare?experiment=ID``, the Experiment page's "Compare the
arms (all trials)"): the arms of one experiment over all its trials. Everything comes from the
export Selection (``core.interop.export.select``), so this page, the Experiment page and the
report a colleague receives tell one story: the experiment's baseline arm, the record's arm
labels, the arm colours in the record's order and the intervals over trials
(``core.analysis.card.experiment_story``)."""

from __future__ import annotations

import streamlit as st

from core.analysis.card import arm_table
from core.analysis.diff import config_diff
from core.analysis.stats import EXPERIMENT_METRICS, first_per_arm
from core.analysis.trials import experiment_runs
from core.errors import ConfigError
from core.interop.export import select
from core.metric_info import metric_label
from core.settings import Settings
from core.views.cells import readable_cells
from core.views.figures import arm_bands_figure
from pages import _story
from pages._answers import answers_section
from pages._chart import chart
from pages._engines import engine_section
from pages._export import export_buttons
from pages._ledger import ledger_section


def experiment_compare(settings: Settings, exp_id: str) -> None:
    """Draw the experiment's comparison of its arms; a bad id gets a warning, not a trace."""
    try:
        sel = select(settings, [exp_id])
    except ConfigError as exc:
        st.title("Compare")
        st.warning(f"{exc} Open an experiment from the Experiments page.")
        return
    record, story = sel.experiment, sel.story
    if record is None or story is None:  # select() of one exp- id is an experiment
        st.title("Compare")
        st.warning(f"{exp_id[:80]!r} is not an experiment.")
        return
    st.title("Compare the arms (all trials)")
    st.caption(
        f"**{record.name or exp_id}** · {exp_id} · {len(story.arms)} arms × "
        f"{record.spec.get('trials')} trials · baseline "
        f"**{story.baseline}** · each change is the experiment's estimate over all trials "
        "with its interval, as on the Experiment page"
    )
    st.page_link(
        "pages/experiment.py",
        label="Back to the experiment",
        query_params={"experiment": exp_id},
        icon=":material/science:",
    )
    runs = experiment_runs(settings, record)
    if not any(r.view.status.state == "succeeded" for r in runs):
        st.info("No run of this experiment has succeeded yet: nothing to compare.")
        return

    _story.verdict(story, record.name)  # the answer first, as on the Experiment page
    _story.summary_card(story)
    answers_section(story, "cmp_exp_answers")  # same / differs / broken, beside the verdict

    first = first_per_arm(runs)
    arms = [a for a in story.arms if a in first]
    st.subheader("Configuration differences between the arms")
    diff = config_diff([first[a] for a in arms], arms)
    if diff.empty:
        st.write("The arms' configurations are identical.")
    else:
        st.table(readable_cells(diff).set_index(diff.columns[0]))
    engine_section({a: first[a] for a in arms})

    colours = sel.colours  # the Experiment page's: record order, baseline first
    table = arm_table(runs, story)
    st.subheader("Per arm against concurrency (mean over trials, 95% interval)")
    metric = st.selectbox(
        "Metric", list(EXPERIMENT_METRICS), format_func=metric_label, key="cmp_exp_metric"
    )
    chart(arm_bands_figure(table, metric, colours))
    ledger_section(story.ledger, colours, key="cmp_exp_ledger")

    st.subheader("Export")
    export_buttons(sel.views, key="compare-exp-export", sel=sel)
