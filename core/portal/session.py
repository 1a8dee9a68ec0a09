"""A token sign-in remembered in the browser: a signed, expiring cookie, never the token.

The cookie's value is ``itsdangerous.URLSafeTimedSerializer`` over ``{"role", "tid"}``:
the role the token granted and ``tid``, a keyed hash of the token (HMAC-SHA256 with the
signing secret, 16 hex digits), so a copied cookie says nothing about the token itself.
It is accepted while

* its signature verifies with the current secret (a new secret signs everyone out),
* it is younger than ``SERVELAB_SESSION_HOURS`` (default 12),
* a token configured now has that ``tid`` and grants that role (removing or changing a
  token signs out whoever signed in with it).

The secret is ``SERVELAB_SESSION_SECRET``, else one generated once into
``data_dir/session-secret`` (mode 0600). Writing the cookie is the page's job
(pages/_auth.py); this module only signs and checks.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import secrets
import stat
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from itsdangerous import BadData, TimestampSigner, URLSafeTimedSerializer

from core.errors import ConfigError
from core.portal.access import AccessConfig, Role, role_for_token
from core.settings import Settings

__all__ = [
    "COOKIE_NAME",
    "SECRET_FILE",
    "Clock",
    "SignIn",
    "issue_cookie",
    "max_age_s",
    "read_cookie",
    "session_secret",
    "token_id",
]

COOKIE_NAME = "servelab_session"
SECRET_FILE = "session-secret"
# Scopes the signature to this use: a value signed with the same secret for anything else
# never verifies as a session.
_SALT = "servelab.portal.session.v1"

Clock = Callable[[], float]


def max_age_s(settings: Settings) -> int:
    """How long a sign-in is remembered, in whole seconds (the cookie's Max-Age too)."""
    return max(1, round(settings.session_hours * 3600))


def session_secret(settings: Settings) -> str:
    """The signing secret: ``SERVELAB_SESSION_SECRET``, else ``data_dir/session-secret``,
    generated on first use. Raises ``ConfigError`` when that file is readable by others."""
    if settings.session_secret:
        return settings.session_secret
    path = settings.data_dir / SECRET_FILE
    if not path.exists():
        _create_secret(path)
    return _read_secret(path)


def _create_secret(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # mkstemp creates the file 0600; link() then publishes it whole, or loses to another
    # process (a second portal session, the CLI) that made one first: both read the winner.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{SECRET_FILE}.")
    try:
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(secrets.token_urlsafe(32) + "\n")
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def _read_secret(path: Path) -> str:
    if stat.S_IMODE(path.stat().st_mode) & 0o077:
        raise ConfigError(
            "SERVELAB_SESSION_SECRET",
            f"{path} is readable by other users: `chmod 600` it, or delete it so a new "
            "one is made (everyone signs in again)",
        )
    text = path.read_text(encoding="ascii").strip()
    if len(text) < 32:
        raise ConfigError(
            "SERVELAB_SESSION_SECRET",
            f"{path} holds no usable secret: delete it so a new one is made",
        )
    return text


def token_id(secret: str, token: str) -> str:
    """Which token a cookie was issued for, without the token: a keyed hash (a plain hash
    of a short token could be reversed by guessing)."""
    digest = hmac.new(secret.encode(), b"token-id\0" + token.encode(), hashlib.sha256)
    return digest.hexdigest()[:16]


def _serializer(secret: str, clock: Clock) -> URLSafeTimedSerializer:
    class _ClockedSigner(TimestampSigner):
        # itsdangerous reads the time through this method, both to stamp and to check the
        # age: the tests' clock goes in here.
        def get_timestamp(self) -> int:
            return int(clock())

    return URLSafeTimedSerializer(secret, salt=_SALT, signer=_ClockedSigner)


def issue_cookie(
    cfg: AccessConfig, token: str, secret: str, clock: Clock = time.time
) -> tuple[Role, str] | None:
    """The role ``token`` grants and the cookie value that remembers it; None for a token
    that is not valid here."""
    role = role_for_token(cfg, token)
    if role is None:
        return None
    payload = {"role": role, "tid": token_id(secret, token.strip())}
    return role, str(_serializer(secret, clock).dumps(payload))


@dataclass(frozen=True)
class SignIn:
    """A remembered sign-in that still holds: its role, and when it ends (Unix seconds)."""

    role: Role
    expires_s: float


def read_cookie(
    cfg: AccessConfig, value: str, secret: str, max_age: int, clock: Clock = time.time
) -> SignIn | None:
    """The sign-in a cookie still grants, or None (bad signature, expired, issued for a
    token no longer configured, or for another role than that token grants now)."""
    if cfg.mode != "token":  # OIDC has Streamlit's own cookie; open mode asks nothing
        return None
    try:
        payload, signed_at = _serializer(secret, clock).loads(
            value, max_age=max_age, return_timestamp=True
        )
    except BadData:  # bad signature, expired, malformed
        return None
    if not isinstance(payload, dict):
        return None
    tid = payload.get("tid")
    for token in (cfg.token_launch, cfg.token_view):
        if token and isinstance(tid, str) and hmac.compare_digest(tid, token_id(secret, token)):
            role = role_for_token(cfg, token)
            if role is None or payload.get("role") != role:
                return None
            return SignIn(role=role, expires_s=signed_at.timestamp() + max_age)
    return None
