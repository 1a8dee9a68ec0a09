"""Detail tables and texts drawn only when the user opens them.

A collapsed ``st.expander`` still sends and draws its content; with ``on_change="rerun"``
and a key, Streamlit runs the block only while the expander is open. Each table or code
block kept off the first paint saves the browser a data-grid or highlighter chunk
(docs/BENCHMARKS.md §7.1: those, not our data, are where a page's seconds go)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import streamlit as st


@contextmanager
def details(label: str, key: str, expanded: bool = False) -> Iterator[bool]:
    """``with details("All metrics", "cmp_all") as shown: if shown: st.dataframe(...)``."""
    with st.expander(label, expanded=expanded, key=key, on_change="rerun") as box:
        yield bool(box.open)
