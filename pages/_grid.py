"""The Launch page's "Grid / sweep" mode: knob rows inside the form, and the queueing
(core/launch/grid.py checks everything)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import streamlit as st

from core.errors import ConfigError, StoreError
from core.executors import runs_here
from core.experiments.design import GRID_KNOB_FIELDS
from core.launch.forms import is_grid_field, refusal_errors
from core.launch.grid import GRID_ROWS, grid_estimate, grid_from_form
from core.launch.host import HostInfo, launch_host
from core.launch.queue import queue_launch
from core.settings import Settings
from core.store import Catalog
from pages._auth import can_launch

DESIGNS = ("auto", "factorial", "one-at-a-time")


def _rows() -> list[tuple[str, str]]:
    return [
        (
            str(st.session_state.get(f"grid_knob_{i}") or ""),
            str(st.session_state.get(f"grid_values_{i}") or ""),
        )
        for i in range(GRID_ROWS)
    ]


def grid_fields(err: Callable[[str], None], errors: dict[str, str]) -> tuple[bool, bool]:
    """The grid rows (inside the launch form); (check pressed, queue pressed). Open when a
    knob is chosen or the grid check found a problem: its message is beside its field, and
    a closed section hid it."""
    with st.expander(
        "Grid / sweep: vary up to 4 knobs around the configuration above",
        expanded=any(k for k, _ in _rows()) or any(is_grid_field(k) for k in errors),
    ):
        st.caption(
            "Each knob's first value is the baseline. Up to 16 arms run as the full "
            "factorial (every combination), more as one-at-a-time from the baseline; "
            "one knob with many values is a sweep. Every arm runs on a fresh server "
            "per trial, in a shuffled order, on the same prompts."
        )
        for i in range(GRID_ROWS):
            c1, c2 = st.columns([1, 2])
            c1.selectbox(f"Knob {i + 1}", ["", *GRID_KNOB_FIELDS], key=f"grid_knob_{i}")
            with c1:
                err(f"grid_knob_{i}")
            c2.text_input(
                f"Values {i + 1} (comma-separated)",
                "",
                key=f"grid_values_{i}",
                placeholder="false, true   or   0.85, 0.92",
            )
            with c2:
                err(f"grid_values_{i}")
        st.radio("Design", DESIGNS, horizontal=True, key="grid_design")
        err("grid_design")
        err("grid")
        if estimate := st.session_state.get("grid_estimate"):
            st.caption("Estimate: " + estimate)
        g1, g2 = st.columns(2)
        checked = g1.form_submit_button(
            "Check grid / sweep and estimate (queues nothing)", key="check_grid"
        )
        queued = g2.form_submit_button(
            "Queue grid / sweep", key="submit_grid", disabled=not can_launch()
        )
        return checked, queued


def queue_grid(settings: Settings, host: HostInfo, defaults: dict[str, Any], submit: bool) -> None:
    """Check the form with its grid: the run count and estimate, or the problems beside
    their fields; ``submit``: queue the experiment if every field is fine."""
    form = {k: st.session_state[k] for k in defaults if k in st.session_state}
    executor = st.session_state.get("executor") or settings.executor
    local = runs_here(executor)  # a Ray run's engine and model are checked on its node
    where = launch_host(settings, host, executor)
    exp, errors = grid_from_form(
        form,
        _rows(),
        str(st.session_state.get("grid_design") or "auto"),
        where,
        settings=settings,
        local=local,
    )
    st.session_state["launched"], st.session_state["experiment"] = [], None
    st.session_state["grid_estimate"] = (
        None
        if exp is None
        else grid_estimate(
            exp,
            Catalog(settings.catalog_path, settings.runs_dir).recent_durations_s(
                exp.base.server.engine, exp.base.server.model
            ),
            parallel=not local,
        )
    )
    if exp is not None and submit and can_launch():  # never trust a disabled button alone
        try:
            queued = queue_launch(settings, exp, executor=executor, host=where)
            st.session_state["experiment"] = queued.experiment_id
        except StoreError as exc:
            errors = {"submit": f"could not queue: {exc}"}
        except ConfigError as exc:  # the queue's gate: every problem beside its field
            errors = refusal_errors(exc, exp.base)
    st.session_state["launch_errors"] = errors
    st.rerun()
