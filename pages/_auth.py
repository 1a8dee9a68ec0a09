"""The portal's gate: sign-in and roles (the rules are in core/portal/access.py).

``require_login()`` runs before any page content (app.py and ``bootstrap()``): with no
authentication configured on a loopback address it lets everyone in as a launcher; with
tokens it shows a sign-in form; with Streamlit's OIDC ``[auth]`` it shows the login button.
It stops the script until the session has a role. ``can_launch()`` is what the Launch,
Run, Runs and Import pages check before launching, cancelling or importing anything.
"""

from __future__ import annotations

import streamlit as st

from core.portal.access import (
    LAUNCH,
    is_loopback,
    load_access,
    problems,
    role_for_token,
    role_for_user,
)

ROLE_KEY = "servelab_role"
MODE_KEY = "servelab_role_mode"  # a role granted in one mode never carries to another


def _oidc_configured() -> bool:
    try:
        return "auth" in st.secrets
    except Exception:  # no secrets file at all
        return False


def require_login(sidebar: bool = True) -> str:
    """The session's role ("view" or "launch"); renders the sign-in and stops otherwise.
    ``sidebar``: show who is signed in (app.py does; the pages' second check does not)."""
    # The address Streamlit really binds (./servelab passes it; a direct `streamlit run
    # --server.address` too), else SERVELAB_BIND.
    bind = st.get_option("server.address")
    cfg = load_access(oidc=_oidc_configured(), bind=str(bind) if bind else None)
    refused = problems(cfg)
    ip = st.context.ip_address  # None for a connection from this machine
    if not refused and cfg.mode == "open" and isinstance(ip, str) and not is_loopback(ip):
        # e.g. `streamlit run app.py` with Streamlit's default of every interface
        refused = [
            f"a connection from {ip}, but no authentication is configured, so this "
            "portal serves only its own machine (see README, Access)"
        ]
    if refused:  # e.g. bound to 0.0.0.0 with no authentication: serve nothing
        st.error(
            "ServeLab refuses to serve with these access settings: " + "; ".join(refused),
            icon=":material/lock:",
        )
        st.stop()
    if st.session_state.get(MODE_KEY) != cfg.mode:
        st.session_state.pop(ROLE_KEY, None)
        st.session_state[MODE_KEY] = cfg.mode
    if cfg.mode == "open":
        st.session_state[ROLE_KEY] = LAUNCH
        return LAUNCH
    if not sidebar and st.session_state.get(ROLE_KEY) is not None:
        return str(st.session_state[ROLE_KEY])
    if cfg.mode == "oidc":
        if not st.user.is_logged_in:
            st.title("ServeLab")
            st.button(
                "Log in", on_click=st.login, key="servelab_oidc_login", icon=":material/login:"
            )
            st.stop()
        role = role_for_user(cfg, str(st.user.get("email") or ""))
        if role is None:
            st.error(f"{st.user.get('email')} may not use this portal.")
            st.button("Log out", on_click=st.logout, key="servelab_oidc_logout")
            st.stop()
        st.session_state[ROLE_KEY] = role
    role = st.session_state.get(ROLE_KEY)
    if role is None:
        st.title("ServeLab")
        with st.form("servelab_sign_in", clear_on_submit=True):
            token = st.text_input("Access token", type="password", key="servelab_token")
            signed = st.form_submit_button("Sign in", key="servelab_login")
        if signed:
            role = role_for_token(cfg, token or "")
            if role is None:
                st.error("That token is not valid here.")
            else:
                st.session_state[ROLE_KEY] = role
                st.rerun()
        st.stop()
    with st.sidebar:
        st.caption(f"Signed in: {'launch and view' if role == LAUNCH else 'view only'}")
        if cfg.mode == "token" and st.button("Sign out", key="servelab_sign_out"):
            st.session_state.pop(ROLE_KEY, None)
            st.rerun()
    return str(role)


def can_launch() -> bool:
    """Whether this session may launch, cancel or import runs."""
    return st.session_state.get(ROLE_KEY) == LAUNCH
