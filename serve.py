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


app = st.App(
    "app.py",
    middleware=[Middleware(SignInGate, base_path=_base_path, oidc_email=oidc_email)],
)
