"""The summary card and verdict shared by the Compare and Experiment pages: the story is
computed in core (core/analysis/card.py); this only draws it, the same way on both pages."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from core.analysis.card import (
    Story,
    card_grid,
    no_interval_text,
    regression_lines,
    worse_alone_lines,
)
from core.analysis.stats import NOT_TESTED
from core.views.cells import CARD_LEGEND, column_groups

# only better / worse are coloured (core.analysis.words); every other word is grey
_CELL = {
    "better": "background-color: #d4edda",
    "worse": "background-color: #f8d7da",
    NOT_TESTED: "color: #555; font-style: italic",
}
_GREY = "color: #555"


def summary_card(story: Story) -> None:
    """Regressions first (in words), then per arm a grid: metric × concurrency, each cell
    the change, its interval and its word (core.analysis.words)."""
    st.subheader("Summary")
    if not any(r.change is not None for r in story.card):
        st.info("No comparable results yet: the card fills in as the arms' runs succeed.")
        return
    regs = regression_lines(story.card)
    if regs:
        st.error(
            "**Regressions**\n\n"
            + "\n".join(f"- {r}" for r in regs)
            + (f"\n\n{story.family}" if story.family else ""),
            icon=":material/trending_down:",
        )
    elif not any(r.confirmed for r in story.card):
        st.info(no_interval_text(story.card), icon=":material/info:")
    elif story.family and (watch := worse_alone_lines(story.card)):
        # not green: a contrast whose own interval says worse is no all-clear, and not red:
        # its family does not confirm it
        st.info(
            "**No confirmed regression; worse alone** (its own interval excludes zero, its "
            "family does not confirm it)\n\n"
            + "\n".join(f"- {w}" for w in watch)
            + f"\n\n{story.family}",
            icon=":material/info:",
        )
    elif story.family:
        st.success(
            "No regression among the confirmatory contrasts. " + story.family,
            icon=":material/check_circle:",
        )
    if story.caveats:  # suspect points (core.analysis.card.caveats), as in the verdict
        st.warning(
            "**Read with care**\n\n" + "\n".join(f"- {c.sentence()}" for c in story.caveats),
            icon=":material/warning:",
        )
    for arm in dict.fromkeys(r.arm for r in story.card):
        text, verdicts = card_grid(story.card, arm)
        st.markdown(f"**{arm}** vs **{story.baseline}** (baseline)")

        def colour(col: pd.Series, verdicts: pd.DataFrame = verdicts) -> list[str]:
            return [_CELL.get(str(verdicts.loc[i, col.name]), _GREY) for i in col.index]

        # static tables: a few cells, no grid component to load (docs/BENCHMARKS.md §7.1);
        # a wide card is split so no concurrency leaves a narrow screen (column_groups)
        for columns in column_groups(list(text.columns)):
            st.table(text[columns].style.apply(colour, axis=0))
    st.caption(
        "Change vs the baseline, [95% interval] over trials (ratio of means on the "
        "log scale, so never below −100%); " + CARD_LEGEND + " " + story.noise
    )


def verdict(story: Story, title: str | None = None) -> None:
    """One paragraph per verdict line, only its lead in bold (the knob and its values,
    "Regressions", "Read with care", the experiment's ``title``): whole paragraphs in bold
    read as a wall of bold, on a 400 px screen most of all."""
    st.subheader("Verdict")
    for line in story.verdict:
        if title and line.startswith(f"{title}: "):  # a title may hold ": " itself
            head, sep, rest = title, ": ", line[len(title) + 2 :]
        else:
            head, sep, rest = line.partition(": ")
        # a lead is a name (a knob, "Regressions", the experiment's title), never a sentence
        st.markdown(f"**{head}:** {rest}" if sep and len(head) <= 160 else line)
