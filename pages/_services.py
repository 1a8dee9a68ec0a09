"""The portal's long-lived services, built once per process and shared by all sessions.

Every page calls ``services()`` itself instead of relying on app.py having run first in
this session (a page URL opened cold must work too)."""

from __future__ import annotations

import streamlit as st

from core.executors.worker import Worker
from core.launch.adaptive import advance_experiments
from core.portal.demo import install_demo
from core.settings import Settings, load_settings

ROUTED_KEY = "_servelab_bootstrapped"  # app.py's st.navigation ran in this session


def mark_routed() -> None:
    """app.py calls this after ``st.navigation``: this session needs no bootstrap rerun."""
    st.session_state[ROUTED_KEY] = True


@st.cache_resource
def services() -> tuple[Settings, Worker]:
    settings = load_settings()
    install_demo(settings)  # first start: a real H200 CUDA-graph A/B to look at
    # on_change: the controller of trials: auto experiments, run by the worker that owns
    # the queue (its state is in experiment.json, so a restarted portal carries on).
    worker = Worker(settings, on_change=lambda: bool(advance_experiments(settings)))
    if settings.worker_enabled:
        worker.start()
    else:
        worker.keep_off("off in this portal (SERVELAB_WORKER=off): queued runs wait")
    return settings, worker


def bootstrap() -> tuple[Settings, Worker]:
    """Every page starts here. While no session has run app.py yet, Streamlit (because a
    ``pages/`` folder exists) serves a page URL opened cold in its legacy multipage mode,
    without app.py's ``st.navigation``; switch that mode off and rerun through app.py."""
    from streamlit.runtime.pages_manager import PagesManager

    if PagesManager.uses_pages_directory:
        PagesManager.uses_pages_directory = False
        # Rerun once per session only, and never in a session app.py has routed (whose
        # browser already sent a click meant for app.py's widgets, e.g. the sign-in form's),
        # so a rerun can never swallow a click.
        if not st.session_state.get(ROUTED_KEY):
            st.session_state[ROUTED_KEY] = True
            st.rerun()
    st.session_state[ROUTED_KEY] = True
    from pages._auth import require_login

    require_login(sidebar=False)  # a page opened cold is gated too
    return services()
