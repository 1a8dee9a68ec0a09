"""ServeLab portal: the router. Builds the long-lived services once and lists the pages."""

from __future__ import annotations

import streamlit as st

from pages._auth import require_login, session_role
from pages._services import mark_routed, services

st.set_page_config(page_title="ServeLab", page_icon=":material/speed:", layout="wide")
services()  # start the worker with the portal, before any page is opened

pages = [
    st.Page("pages/runs.py", title="Runs", icon=":material/list:", default=True),
    st.Page("pages/launch.py", title="Launch", icon=":material/rocket_launch:", url_path="launch"),
    st.Page("pages/run.py", title="Run", icon=":material/description:", url_path="run"),
    st.Page(
        "pages/compare.py", title="Compare", icon=":material/compare_arrows:", url_path="compare"
    ),
    st.Page(
        "pages/experiment.py", title="Experiments", icon=":material/science:", url_path="experiment"
    ),
    st.Page("pages/history.py", title="History", icon=":material/timeline:", url_path="history"),
    st.Page("pages/import_export.py", title="Import / Export", url_path="import_export"),
]
# st.navigation comes before the gate: a script that stops before calling it leaves
# Streamlit listing every file of pages/ by its module name (the _helpers too). Before
# sign-in the list is hidden, and the page a shared link names is run once signed in.
page = st.navigation(pages, position="sidebar" if session_role() else "hidden")
mark_routed()
require_login()  # sign-in when the portal is served to a team (core/portal/access.py)
page.run()
