"""ServeLab portal: the router. Builds the long-lived services once and lists the pages."""

from __future__ import annotations

import streamlit as st

from pages._auth import require_login
from pages._services import services

st.set_page_config(page_title="ServeLab", page_icon=":material/speed:", layout="wide")
services()  # start the worker with the portal, before any page is opened
require_login()  # sign-in when the portal is served to a team (core/portal/access.py)

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
    st.Page("pages/import_export.py", title="Import / Export", url_path="import_export"),
]
st.navigation(pages).run()
