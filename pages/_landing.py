"""The top of the landing page (Runs, at /): the seed team's question answered first, from the
shipped demo (core/views/landing.py words its attribution), with a link to the experiment and
to where to launch your own; the runs table follows."""

from __future__ import annotations

import streamlit as st

from core.settings import Settings
from core.shapes import shape_note
from core.views.landing import QUESTION, Answer, ShapeCheck, landing_answer, shape_check


@st.cache_data(ttl=60, show_spinner=False)
def _answer(_settings: Settings, data_dir: str) -> Answer | None:
    return landing_answer(_settings)  # an attribution fit: cached a minute per data folder


@st.cache_data(ttl=60, show_spinner=False)
def _shape_check(_settings: Settings, data_dir: str) -> ShapeCheck | None:
    return shape_check(_settings)  # an experiment's story: cached a minute per data folder


def answer_first(settings: Settings) -> None:
    """The question, the demo's answer in two sentences, the experiment and the way in."""
    answer = _answer(settings, str(settings.data_dir))
    with st.container(border=True):
        st.header(QUESTION, anchor="question")
        if answer is None:
            st.info(
                "The shipped demo that answers this (a 2×2 over CUDA graphs and the memory "
                "fraction) is not in this data folder, or has no results yet."
            )
        else:
            st.markdown(f"**{answer.sentences[0]}**\n\n{answer.sentences[1]}")
            trials = f"{answer.trials} trial{'s' if answer.trials != 1 else ''} per arm"
            trials += f", on {answer.gpus}"
            st.caption(f"From the experiment *{answer.experiment_name}* ({trials}).")
            if answer.shape:
                st.warning(shape_note(answer.shape), icon=":material/science:")
        realistic = _shape_check(settings, str(settings.data_dir))
        if realistic is not None:  # the same change on a realistic shape, where one shipped
            st.markdown(realistic.sentence)
        left, right = st.columns(2)
        if answer is not None:
            left.page_link(
                "pages/experiment.py",
                label="Open the experiment: every arm and trial",
                icon=":material/science:",
                query_params={"experiment": answer.experiment_id},
            )
        if realistic is not None:
            left.page_link(
                "pages/experiment.py",
                label=f"Open the one-restart A/B ({realistic.shape})",
                icon=":material/science:",
                query_params={"experiment": realistic.experiment_id},
            )
        right.page_link(
            "pages/launch.py",
            label="Launch your own A/B or grid",
            icon=":material/rocket_launch:",
        )
        st.caption(
            "Or from a terminal: `python -m core experiment PLAN.json`, or "
            "`python -m core explain RUN_A RUN_B` to split two runs' difference by knob."
        )
