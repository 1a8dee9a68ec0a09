"""The portal's gate: sign-in and roles (the rules are in core/portal/access.py, the
remembered sign-in in core/portal/session.py).

``session_role()`` says, without drawing anything, whether this session may see pages (app.py
asks it before ``st.navigation``, so that no page list is drawn before sign-in).
``require_login()`` runs before any page content (app.py and ``bootstrap()``): with no
authentication configured on a loopback address it lets everyone in as a launcher; with
tokens it shows a sign-in form, and remembers a sign-in in a signed cookie; with Streamlit's
OIDC ``[auth]`` it shows the login button. It stops the script until the session has a role.
Streamlit's own URLs (``/media`` downloads, ``/_stcore/metrics``) are gated by the same
sign-in in core/portal/gate.py, which serve.py puts in front of the server; with sign-in on,
the pages refuse to serve where that gate is missing (bare ``streamlit run app.py``).
``can_launch()`` is what the Launch, Run, Runs and Import pages check before launching,
cancelling or importing anything.

The cookie is written by a two-line script in ``st.html(unsafe_allow_javascript=True)``:
Streamlit reads cookies (``st.context.cookies``, from the page's connection) but has no
call that sets one, and its own ``st.login`` cookie is only for OIDC. That script is
ours and carries no input from a user; the cookie is SameSite=Strict, Secure over https,
and holds a signed role and token id, never the token (so nothing secret ever sits in a URL).
"""

from __future__ import annotations

import json
import time

import streamlit as st

from core.errors import ConfigError
from core.portal import gate
from core.portal.access import (
    LAUNCH,
    AccessConfig,
    is_loopback,
    load_access,
    problems,
    role_for_user,
)
from core.portal.session import (
    COOKIE_NAME,
    issue_cookie,
    max_age_s,
    read_cookie,
    session_secret,
)
from core.settings import load_settings

ROLE_KEY = "servelab_role"
MODE_KEY = "servelab_role_mode"  # a role granted in one mode never carries to another
UNTIL_KEY = "servelab_role_until_s"  # a token sign-in ends with its cookie, even in an open tab
COOKIE_WRITE_KEY = "servelab_cookie_write"  # set or clear the cookie on the next run
SIGNED_OUT_KEY = "servelab_signed_out"  # this tab's connection still sends the old cookie


def _oidc_configured() -> bool:
    try:
        return "auth" in st.secrets
    except Exception:  # no secrets file at all
        return False


def _access() -> tuple[AccessConfig | None, list[str]]:
    """The access settings and why they are refused (empty: they may serve)."""
    # The address Streamlit really binds (./servelab passes it; a direct `streamlit run
    # --server.address` too), else SERVELAB_BIND.
    bind = st.get_option("server.address")
    try:
        cfg = load_access(oidc=_oidc_configured(), bind=str(bind) if bind else None)
    except ConfigError as exc:
        return None, [str(exc)]
    refused = problems(cfg)
    if not refused and cfg.mode != "open" and not gate.active():
        # bare `streamlit run app.py`: the pages would ask for a sign-in, but Streamlit's own
        # URLs (/media downloads, /_stcore/metrics) would answer anyone
        refused = [
            "sign-in is configured but this server has no sign-in gate in front of its "
            "downloads: start it with ./servelab portal (streamlit run serve.py)"
        ]
    ip = st.context.ip_address  # None for a connection from this machine
    if not refused and cfg.mode == "open" and isinstance(ip, str) and not is_loopback(ip):
        # e.g. `streamlit run app.py` with Streamlit's default of every interface
        refused = [
            f"a connection from {ip}, but no authentication is configured, so this "
            "portal serves only its own machine (see README, Access)"
        ]
    return cfg, refused


def _remembered_role(cfg: AccessConfig) -> str | None:
    """The role of a sign-in this browser remembers (token mode), or None."""
    value = st.context.cookies.get(COOKIE_NAME)
    if not value or st.session_state.get(SIGNED_OUT_KEY):
        return None
    settings = load_settings()
    remembered = read_cookie(cfg, value, session_secret(settings), max_age_s(settings))
    if remembered is None:
        return None
    st.session_state[UNTIL_KEY] = remembered.expires_s  # an open tab ends with its cookie
    return remembered.role


def session_role() -> str | None:
    """This session's role, drawing nothing: None before sign-in or when refused."""
    cfg, refused = _access()
    if cfg is None or refused:
        return None
    if st.session_state.get(MODE_KEY) != cfg.mode:
        st.session_state.pop(ROLE_KEY, None)
        st.session_state[MODE_KEY] = cfg.mode
    if cfg.mode == "open":
        st.session_state[ROLE_KEY] = LAUNCH
        return LAUNCH
    until = st.session_state.get(UNTIL_KEY)
    if cfg.mode == "token" and isinstance(until, float) and time.time() > until:
        st.session_state.pop(ROLE_KEY, None)
    role = st.session_state.get(ROLE_KEY)
    if cfg.mode == "oidc":  # Streamlit's login cookie decides, on every run
        role = role_for_user(cfg, str(st.user.get("email") or "")) if st.user.is_logged_in else None
    elif role is None:
        role = _remembered_role(cfg)
    if role is None:
        st.session_state.pop(ROLE_KEY, None)
        return None
    st.session_state[ROLE_KEY] = role
    return str(role)


def _write_pending_cookie() -> None:
    """Set or clear the sign-in cookie in this browser (queued by sign-in / sign-out, which
    rerun first: an element drawn just before ``st.rerun()`` may never reach the browser)."""
    pending = st.session_state.pop(COOKIE_WRITE_KEY, None)
    if pending is None:
        return
    value, max_age = pending
    path = "/" + str(st.get_option("server.baseUrlPath") or "").strip("/")
    cookie = f"{COOKIE_NAME}={value}; Max-Age={int(max_age)}; Path={path}; SameSite=Strict"
    st.html(
        "<script>document.cookie = "
        f"{json.dumps(cookie)} + (location.protocol === 'https:' ? '; Secure' : '');</script>",
        unsafe_allow_javascript=True,
        width="content",
    )


def require_login(sidebar: bool = True) -> str:
    """The session's role ("view" or "launch"); renders the sign-in and stops otherwise.
    ``sidebar``: show who is signed in (app.py does; the pages' second check does not)."""
    cfg, refused = _access()
    if cfg is None or refused:  # e.g. bound to 0.0.0.0 with no authentication: serve nothing
        st.error(
            "ServeLab refuses to serve with these access settings: " + "; ".join(refused),
            icon=":material/lock:",
        )
        st.stop()
    role = session_role()
    _write_pending_cookie()
    if cfg.mode == "open":
        return LAUNCH
    if not sidebar and role is not None:
        return role
    if cfg.mode == "oidc" and role is None:
        if not st.user.is_logged_in:
            st.title("ServeLab")
            st.button(
                "Log in", on_click=st.login, key="servelab_oidc_login", icon=":material/login:"
            )
            st.stop()
        st.error(f"{st.user.get('email')} may not use this portal.")
        st.button("Log out", on_click=st.logout, key="servelab_oidc_logout")
        st.stop()
    if role is None:
        _sign_in_form(cfg)
        st.stop()
    with st.sidebar:
        st.caption(f"Signed in: {'launch and view' if role == LAUNCH else 'view only'}")
        if cfg.mode == "token" and st.button("Sign out", key="servelab_sign_out"):
            st.session_state.pop(ROLE_KEY, None)
            st.session_state[SIGNED_OUT_KEY] = True
            st.session_state[COOKIE_WRITE_KEY] = ("", 0)
            st.rerun()
    return str(role)


def _sign_in_form(cfg: AccessConfig) -> None:
    settings = load_settings()
    st.title("ServeLab")
    with st.form("servelab_sign_in", clear_on_submit=True):
        token = st.text_input("Access token", type="password", key="servelab_token")
        signed = st.form_submit_button("Sign in", key="servelab_login")
    hours = settings.session_hours
    st.caption(f"This browser stays signed in for {hours:g} hour{'' if hours == 1 else 's'}.")
    if not signed:
        return
    issued = issue_cookie(cfg, token or "", session_secret(settings))
    if issued is None:
        st.error("That token is not valid here.")
        return
    role, value = issued
    st.session_state[ROLE_KEY] = role
    st.session_state[UNTIL_KEY] = time.time() + max_age_s(settings)
    st.session_state[COOKIE_WRITE_KEY] = (value, max_age_s(settings))
    st.session_state.pop(SIGNED_OUT_KEY, None)
    st.rerun()


def can_launch() -> bool:
    """Whether this session may launch, cancel or import runs."""
    return st.session_state.get(ROLE_KEY) == LAUNCH
