"""Who may use the portal, and from where (plain Python: the pages and ./servelab ask here).

By default the portal listens on 127.0.0.1 only and asks nobody for anything: whoever can
reach it is the person at this machine. Serving it to a team is explicit, and then it
requires authentication and separates two roles:

* ``view``: the Runs, Run, Compare and Experiments pages, exports;
* ``launch``: all of that, plus launching, cancelling and importing runs.

Settings (environment, read by core/settings.py):

``SERVELAB_BIND``          the address the portal listens on (default ``127.0.0.1``)
``SERVELAB_TOKEN_VIEW``    shared token that grants ``view`` (optional)
``SERVELAB_TOKEN_LAUNCH``  shared token that grants ``launch`` (token mode needs it)
``SERVELAB_LAUNCHERS``     OIDC mode: comma-separated e-mail addresses, or ``@domain``, that
                           may launch (default: nobody; everyone else logged in may view)
``SERVELAB_VIEWERS``       OIDC mode: who may view (default: anyone who can log in)

OIDC mode is Streamlit's ``st.login``: an ``[auth]`` section in ``.streamlit/secrets.toml``
(Streamlit's own format; needs ``pip install Authlib``). The portal refuses to start bound
to anything but a loopback address unless one of the two modes is configured.
``python -m core.portal.access`` prints the mode and exits 2 when the settings are refused
(``./servelab portal`` runs it before starting Streamlit).
"""

from __future__ import annotations

import hmac
import importlib.util
import ipaddress
import sys
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from core.errors import ConfigError
from core.settings import REPO_ROOT, load_settings

__all__ = [
    "LAUNCH",
    "MIN_TOKEN_LEN",
    "VIEW",
    "AccessConfig",
    "Role",
    "is_loopback",
    "load_access",
    "main",
    "oidc_configured",
    "problems",
    "role_for_token",
    "role_for_user",
]

Role = Literal["view", "launch"]
VIEW: Role = "view"
LAUNCH: Role = "launch"
MIN_TOKEN_LEN = 16


def is_loopback(address: str) -> bool:
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        return False


def oidc_configured(paths: Sequence[Path] | None = None) -> bool:
    """Whether a Streamlit secrets file has an ``[auth]`` section (st.login's settings)."""
    for path in (
        paths
        if paths is not None
        else (
            REPO_ROOT / ".streamlit" / "secrets.toml",
            Path.home() / ".streamlit" / "secrets.toml",
        )
    ):
        try:
            if isinstance(tomllib.loads(path.read_text()).get("auth"), dict):
                return True
        except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
            continue
    return False


@dataclass(frozen=True)
class AccessConfig:
    bind: str = "127.0.0.1"
    token_view: str | None = None
    token_launch: str | None = None
    oidc: bool = False
    launchers: tuple[str, ...] = ()
    viewers: tuple[str, ...] = ()

    @property
    def mode(self) -> Literal["open", "token", "oidc"]:
        if self.oidc:
            return "oidc"
        if self.token_view or self.token_launch:
            return "token"
        return "open"

    def describe(self) -> str:
        where = f"on {self.bind}" + (" (this machine only)" if is_loopback(self.bind) else "")
        return {
            "open": f"open to whoever reaches it {where}",
            "token": f"token sign-in {where}: view and launch tokens",
            "oidc": f"OIDC login (st.login) {where}",
        }[self.mode]


def load_access(
    env: Mapping[str, str] | None = None, oidc: bool | None = None, bind: str | None = None
) -> AccessConfig:
    """The access settings of this environment (``env``: another one); ``bind``: the address
    really bound, when it is known (Streamlit's ``server.address``), over ``SERVELAB_BIND``."""
    s = load_settings(env)
    return AccessConfig(
        bind=(bind or "").strip() or s.bind,
        token_view=s.token_view,
        token_launch=s.token_launch,
        oidc=oidc_configured() if oidc is None else oidc,
        launchers=s.launchers,
        viewers=s.viewers,
    )


def problems(cfg: AccessConfig) -> list[str]:
    """Why the portal must not start with these settings (empty when it may)."""
    out = []
    if cfg.mode == "open" and not is_loopback(cfg.bind):
        out.append(
            f"refusing to serve on {cfg.bind} without authentication: set "
            "SERVELAB_TOKEN_LAUNCH (and SERVELAB_TOKEN_VIEW for read-only users), or "
            "configure Streamlit's OIDC login ([auth] in .streamlit/secrets.toml); "
            "or keep SERVELAB_BIND=127.0.0.1"
        )
    if cfg.mode == "token":
        if not cfg.token_launch:
            out.append(
                "SERVELAB_TOKEN_VIEW is set but SERVELAB_TOKEN_LAUNCH is not: set both "
                "(nobody could launch or cancel)"
            )
        for name, token in (
            ("SERVELAB_TOKEN_VIEW", cfg.token_view),
            ("SERVELAB_TOKEN_LAUNCH", cfg.token_launch),
        ):
            if token is not None and (
                len(token) < MIN_TOKEN_LEN or not token.isprintable() or token != token.strip()
            ):
                out.append(
                    f"{name} must be at least {MIN_TOKEN_LEN} printable characters "
                    "without surrounding spaces (e.g. `python -c 'import secrets; "
                    "print(secrets.token_urlsafe(24))'`)"
                )
        if cfg.token_view and cfg.token_view == cfg.token_launch:
            out.append("SERVELAB_TOKEN_VIEW and SERVELAB_TOKEN_LAUNCH must differ")
    if cfg.mode == "oidc" and importlib.util.find_spec("authlib") is None:
        out.append(
            "OIDC login is configured ([auth] in .streamlit/secrets.toml) but Authlib "
            "is not installed: pip install 'Authlib>=1.3.2'"
        )
    return out


def _eq(given: str, expected: str | None) -> bool:
    return expected is not None and hmac.compare_digest(given.encode(), expected.encode())


def role_for_token(cfg: AccessConfig, token: str) -> Role | None:
    """The role a shared token grants (compared in constant time), or None."""
    token = token.strip()
    if _eq(token, cfg.token_launch):
        return LAUNCH
    if _eq(token, cfg.token_view):
        return VIEW
    return None


def _listed(email: str, names: tuple[str, ...]) -> bool:
    email = email.strip().lower()
    return any(email == n or (n.startswith("@") and email.endswith(n)) for n in names)


def role_for_user(cfg: AccessConfig, email: str | None) -> Role | None:
    """OIDC mode: the role of a logged-in user, or None when they may not use the portal."""
    if not email:
        return None
    if _listed(email, cfg.launchers):
        return LAUNCH
    if not cfg.viewers or _listed(email, cfg.viewers):
        return VIEW
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m core.portal.access [--bind ADDRESS]``: the mode, or why it is refused
    (exit 2)."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        cfg = load_access(bind=args[1] if len(args) == 2 and args[0] == "--bind" else None)
    except ConfigError as exc:  # e.g. SERVELAB_SESSION_HOURS=abc
        print(f"servelab: {exc}", file=sys.stderr)
        return 2
    found = problems(cfg)
    for problem in found:
        print(f"servelab: {problem}", file=sys.stderr)
    if found:
        return 2
    print(f"servelab portal: {cfg.describe()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
