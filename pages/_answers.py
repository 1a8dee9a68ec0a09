"""The answers check on the Compare and Experiment pages: one row per arm (same / differs /
broken, beside the verdict that says it in words) and, when opened, each arm's prompts with
the baseline's tokens and the arm's, the first divergence marked. Computed in core
(core/analysis/same_answers.py), worded in core/views/answers.py; this only draws it."""

from __future__ import annotations

import streamlit as st

from core.analysis.card import Story
from core.views.answers import answers_frame, prompt_frame
from pages._details import details


def answers_section(story: Story, key: str) -> None:
    """Nothing when no run of the comparison answered the check."""
    if not story.answers:
        return
    st.subheader("Answers")
    st.table(answers_frame(story.answers))
    checked = [v for v in story.answers.values() if v.pairs]
    if not checked:
        return
    with details("Answers per prompt (baseline vs arm, first divergence in ⟦ ⟧)", key) as shown:
        if shown:
            for v in checked:
                st.markdown(f"**{v.arm}** vs **{v.baseline}**: {v.outcome}")
                st.dataframe(prompt_frame(v), hide_index=True)
