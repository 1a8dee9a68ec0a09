"""The portal's server: Streamlit serving app.py, with the sign-in gate (core/portal/gate.py)
in front of every URL, downloads (/media) and /_stcore/* included.

``./servelab portal`` runs ``streamlit run serve.py``: Streamlit finds ``app`` below (an
``st.App``) and serves it on its own server, with the same command-line options. Run bare
``streamlit run app.py`` only on loopback with no sign-in configured: with tokens or OIDC
the pages refuse to serve without this gate (pages/_auth.py).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import streamlit as st
from starlette.middleware import Middleware

from core.portal.gate import SignInGate


def _base_path() -> str:
    return str(st.get_option("server.baseUrlPath") or "")


def oidc_email(cookies: Mapping[str, str], headers: Mapping[str, str]) -> str | None:
    """The e-mail in Streamlit's OIDC login cookie, when its signature holds (Streamlit's own
    reading of it, from its websocket handler); None otherwise."""
    from streamlit.auth_util import get_cookie_with_chunks
    from streamlit.web.server.server_util import get_cookie_secret
    from streamlit.web.server.starlette.starlette_app_utils import decode_signed_value
    from streamlit.web.server.starlette.starlette_server_config import USER_COOKIE_NAME

    secret = get_cookie_secret()

    def one(name: str) -> bytes | None:
        raw = cookies.get(name)
        # HTTP cookies are latin-1, as Streamlit reads them
        return None if raw is None else decode_signed_value(secret, name, raw.encode("latin-1"))

    raw = get_cookie_with_chunks(one, USER_COOKIE_NAME)
    try:
        payload = json.loads(raw or b"null")
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(payload, dict) or not payload.get("is_logged_in"):
        return None
    email = payload.get("email")
    return email if isinstance(email, str) else None


def _no_pages_folder_navigation() -> None:
    """No sidebar of module names, ever. Streamlit treats an app with a pages/ folder beside
    its main script as a version-1 multipage app until its first script run reaches
    st.navigation: that first run lists every file of pages/ (the _helpers too: "attribution",
    "auth", "chart", ...) in the sidebar for the seconds app.py takes to start the services
    (bench/first_paint.py measured 20 names for 8 s and more). app.py declares its pages with
    st.navigation, so the folder is never the list: Streamlit's own flag for it says so from
    the start (it sets the same flag itself once st.navigation has run)."""
    from streamlit.runtime.pages_manager import PagesManager

    PagesManager.uses_pages_directory = False


_no_pages_folder_navigation()

app = st.App(
    "app.py",
    middleware=[Middleware(SignInGate, base_path=_base_path, oidc_email=oidc_email)],
)
