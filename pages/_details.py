"""Detail tables and texts drawn only when the user opens them, and one-line code drawn
without the syntax highlighter.

A collapsed ``st.expander`` still sends and draws its content; with ``on_change="rerun"``
and a key, Streamlit runs the block only while the expander is open. Each table or code
block kept off the first paint saves the browser a data-grid or highlighter chunk
(docs/BENCHMARKS.md §7.1: those, not our data, are where a page's seconds go)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

import streamlit as st


@contextmanager
def details(label: str, key: str, expanded: bool = False) -> Iterator[bool]:
    """``with details("All metrics", "cmp_all") as shown: if shown: st.dataframe(...)``."""
    with st.expander(label, expanded=expanded, key=key, on_change="rerun") as box:
        yield bool(box.open)


def code_line(text: str) -> None:
    """One line of code (a launch command, a link to copy) as monospace text. ``st.code``
    would load the 1.5 MB syntax-highlighter chunk, whose evaluation holds back every other
    element of the first paint (the Run page's steps table: 3.8-5.2 s -> 3.2-3.5 s from
    navigation on an idle host, docs/BENCHMARKS.md §7.4)."""
    # a code span's fence is longer than any run of backticks inside it (CommonMark)
    fence = "`" * (max((len(r) for r in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    st.markdown(f"{fence}{pad}{text}{pad}{fence}")
