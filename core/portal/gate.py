"""The sign-in gate in front of every URL the portal serves (an ASGI middleware; serve.py puts
it in front of Streamlit's own server).

The pages check the sign-in themselves (pages/_auth.py), but Streamlit also serves data
outside them: a download button's bytes at ``/media/<id>``, ``/_stcore/metrics``, uploads,
the chart component's files. With sign-in on, this gate answers 401 to any of those that
arrives without a sign-in the pages would accept: the same signed cookie
(core/portal/session.py) in token mode; in OIDC mode Streamlit's login cookie, read by a
function serve.py hands in (it needs Streamlit's cookie secret), and then the same roles
(``role_for_user``). Open mode (loopback, no authentication) passes everything.

Open without a sign-in, because the sign-in page itself needs them and none carries
ServeLab data: a page's HTML shell (the same file for every page path), Streamlit's frontend
bundle (``/static/...``), ``/_stcore/health`` (liveness), ``/_stcore/host-config`` (the
frontend's settings), ``/_stcore/stream`` (the page's WebSocket: the script behind it shows
the sign-in form until the session is signed in) and, in OIDC mode, Streamlit's login routes.
Everything else is closed: a route Streamlit adds later is closed until listed here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from http.cookies import CookieError, SimpleCookie
from typing import Any

from core.errors import ConfigError
from core.portal.access import AccessConfig, load_access, role_for_user
from core.portal.session import COOKIE_NAME, max_age_s, read_cookie, session_secret
from core.settings import load_settings

__all__ = ["OidcEmail", "SignInGate", "active", "is_open_path"]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
# OIDC mode: the e-mail of the user Streamlit's login cookie names, or None (no or bad cookie)
OidcEmail = Callable[[Mapping[str, str], Mapping[str, str]], "str | None"]

# Paths under the base URL, without their leading "/".
_OPEN = frozenset({"", "_stcore/health", "_stcore/host-config", "_stcore/stream"})
_OIDC_ROUTES = frozenset({"auth/login", "auth/logout", "oauth2callback"})
_FRONTEND = "static/"

_gates_built = 0  # SignInGate instances in this process (pages/_auth.py asks active())


def active() -> bool:
    """Whether this process serves through a SignInGate (the pages refuse sign-in modes
    without one: a bare `streamlit run app.py` would leave /media open)."""
    return _gates_built > 0


def is_open_path(path: str, base: str = "", oidc: bool = False) -> bool:
    """Whether ``path`` may be fetched without a sign-in: the sign-in page's own parts."""
    prefix = "/" + base.strip("/") if base.strip("/") else ""
    if prefix and not (path == prefix or path.startswith(prefix + "/")):
        return False
    rel = path[len(prefix) :].lstrip("/")
    if rel in _OPEN or rel.startswith(_FRONTEND) or (oidc and rel in _OIDC_ROUTES):
        return True
    # one segment: a page's shell (/run, /compare) or a root file of the frontend (favicon)
    return "/" not in rel and not rel.startswith("_")


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}


def _cookies(headers: Mapping[str, str]) -> dict[str, str]:
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(headers.get("cookie", ""))
    except CookieError:  # a malformed header: treated as no cookie at all
        return {}
    return {name: morsel.value for name, morsel in jar.items()}


class SignInGate:
    """ASGI middleware: 401 for a closed path without a sign-in (see the module's doc)."""

    def __init__(
        self,
        app: ASGIApp,
        base_path: Callable[[], str] = lambda: "",
        oidc_email: OidcEmail | None = None,
        env: Mapping[str, str] | None = None,
        oidc: bool | None = None,
    ) -> None:
        """``env``, ``oidc``: as ``load_access`` takes them (None: this process's settings,
        and OIDC when a Streamlit secrets file has ``[auth]``)."""
        global _gates_built
        self._app = app
        self._base_path = base_path
        self._oidc_email = oidc_email
        self._env = env
        self._oidc = oidc
        _gates_built += 1

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or self._admits(scope):
            await self._app(scope, receive, send)
        elif scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})  # policy violation
        else:
            await _refuse(send)

    def _admits(self, scope: Scope) -> bool:
        path, base = str(scope["path"]), self._base_path()
        if is_open_path(path, base):  # open in every mode: no settings read for these
            return True
        # The settings are read on each request, as the pages read them on each run: both
        # judge a cookie by the same tokens and secret.
        try:
            cfg = load_access(env=self._env, oidc=self._oidc)
        except ConfigError:
            return False
        if cfg.mode == "open" or (cfg.mode == "oidc" and is_open_path(path, base, oidc=True)):
            return True
        headers = _headers(scope)
        return self._signed_in(cfg, headers, _cookies(headers))

    def _signed_in(
        self, cfg: AccessConfig, headers: Mapping[str, str], cookies: Mapping[str, str]
    ) -> bool:
        if cfg.mode == "oidc":
            email = self._oidc_email(cookies, headers) if self._oidc_email else None
            return role_for_user(cfg, email) is not None
        value = cookies.get(COOKIE_NAME)
        if not value:
            return False
        try:
            settings = load_settings(self._env)
            secret = session_secret(settings)
        except ConfigError:
            return False
        return read_cookie(cfg, value, secret, max_age_s(settings)) is not None


async def _refuse(send: Send) -> None:
    body = b"Sign in to ServeLab first (open the portal's page and sign in).\n"
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
                (b"cache-control", b"no-store"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
