"""A picker instead of a dead end: Run, Compare and History opened without a query string
(from the sidebar) list the stored runs to choose from, and open the choice as its link."""

from __future__ import annotations

from typing import NoReturn

import streamlit as st

from core.errors import StoreError
from core.settings import Settings
from core.store import Catalog
from core.views.pickers import run_options

LIMIT = 300  # the newest runs offered


def _options(settings: Settings, states: tuple[str, ...]) -> dict[str, str]:
    catalog = Catalog(settings.catalog_path, settings.runs_dir)
    try:
        catalog.sync()
        rows = catalog.list_runs(limit=LIMIT)
    except StoreError as exc:
        st.error(f"The catalog cannot be read, so no runs are listed: {exc}")
        return {}
    return run_options(rows, states)


def pick_run(settings: Settings, param: str, what: str, states: tuple[str, ...] = ()) -> NoReturn:
    """One run, opened as ``?param=RUN_ID``; stops the page until one is chosen."""
    options = _options(settings, states)
    if not options:
        st.info("No runs stored yet: launch one from the Launch page.")
        st.stop()
    chosen = st.selectbox(what, ["", *options], format_func=lambda r: options.get(r, "—"))
    if chosen:
        st.query_params[param] = chosen
        st.rerun()
    st.stop()


def pick_runs(settings: Settings) -> NoReturn:
    """Two or more runs, opened as ``?runs=ID1,ID2``; the first chosen is the baseline."""
    options = _options(settings, ())
    if len(options) < 2:
        st.info("Fewer than two runs stored: launch some from the Launch page.")
        st.stop()
    chosen = st.multiselect(
        "Runs to compare (the first is the baseline)",
        list(options),
        format_func=lambda r: options.get(r, r),
        max_selections=8,
    )
    if st.button("Compare", type="primary", disabled=len(chosen) < 2):
        st.query_params["runs"] = ",".join(chosen)
        st.rerun()
    st.stop()
