"""core/portal/session.py: a remembered token sign-in is a signed, expiring cookie with the
role and a token id (never the token); it ends with its term, with its token's removal,
and with a new secret. The clock is injected: no test waits."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from core.errors import ConfigError
from core.portal.access import LAUNCH, VIEW, AccessConfig
from core.portal.session import (
    SECRET_FILE,
    SignIn,
    issue_cookie,
    max_age_s,
    read_cookie,
    session_secret,
    token_id,
)
from core.settings import Settings, load_settings

VIEW_TOKEN = "view-token-0123456789abcdef"
LAUNCH_TOKEN = "launch-token-0123456789abcdef"
SECRET = "s" * 40
CFG = AccessConfig(token_view=VIEW_TOKEN, token_launch=LAUNCH_TOKEN)
T0 = 1_800_000_000.0
HOUR_S = 3600


class Clock:
    def __init__(self, now_s: float = T0) -> None:
        self.now_s = now_s

    def __call__(self) -> float:
        return self.now_s


def _settings(tmp_path: Path, **kw: object) -> Settings:
    return Settings(
        data_dir=tmp_path / "data",
        sglang_python=sys.executable,
        transformers_python=sys.executable,
        **kw,  # type: ignore[arg-type]
    )


def test_a_cookie_grants_its_role_for_its_term_and_not_a_second_longer() -> None:
    clock = Clock()
    issued = issue_cookie(CFG, LAUNCH_TOKEN, SECRET, clock)
    assert issued is not None
    role, value = issued
    assert role == LAUNCH and LAUNCH_TOKEN not in value
    clock.now_s = T0 + 12 * HOUR_S
    assert read_cookie(CFG, value, SECRET, 12 * HOUR_S, clock) == SignIn(LAUNCH, T0 + 12 * HOUR_S)
    clock.now_s = T0 + 12 * HOUR_S + 1
    assert read_cookie(CFG, value, SECRET, 12 * HOUR_S, clock) is None
    # a longer setting on the server lengthens what it accepts, the signature is unchanged
    assert read_cookie(CFG, value, SECRET, 24 * HOUR_S, clock) is not None


def test_the_view_token_signs_in_as_a_viewer_and_a_bad_token_gets_no_cookie() -> None:
    clock = Clock()
    issued = issue_cookie(CFG, VIEW_TOKEN + "\n", SECRET, clock)  # pasted with a newline
    assert issued is not None and issued[0] == VIEW
    sign_in = read_cookie(CFG, issued[1], SECRET, HOUR_S, clock)
    assert sign_in is not None and sign_in.role == VIEW
    assert issue_cookie(CFG, "guess-guess-guess-guess", SECRET, clock) is None


def test_removing_or_changing_the_token_ends_its_sign_ins() -> None:
    clock = Clock()
    view = issue_cookie(CFG, VIEW_TOKEN, SECRET, clock)
    launch = issue_cookie(CFG, LAUNCH_TOKEN, SECRET, clock)
    assert view is not None and launch is not None
    without_view = AccessConfig(token_launch=LAUNCH_TOKEN)
    assert read_cookie(without_view, view[1], SECRET, HOUR_S, clock) is None
    assert read_cookie(without_view, launch[1], SECRET, HOUR_S, clock) is not None
    rotated = AccessConfig(token_view=VIEW_TOKEN, token_launch="launch-token-rotated-0123456")
    assert read_cookie(rotated, launch[1], SECRET, HOUR_S, clock) is None
    # the same token moved to the other role: the cookie's role no longer holds
    swapped = AccessConfig(token_view=LAUNCH_TOKEN, token_launch=VIEW_TOKEN)
    assert read_cookie(swapped, launch[1], SECRET, HOUR_S, clock) is None
    # OIDC or open mode: a token cookie grants nothing
    oidc = AccessConfig(token_view=VIEW_TOKEN, token_launch=LAUNCH_TOKEN, oidc=True)
    assert read_cookie(oidc, launch[1], SECRET, HOUR_S, clock) is None


def test_a_new_secret_or_a_tampered_cookie_is_refused() -> None:
    clock = Clock()
    issued = issue_cookie(CFG, VIEW_TOKEN, SECRET, clock)
    assert issued is not None
    value = issued[1]
    assert read_cookie(CFG, value, "t" * 40, HOUR_S, clock) is None
    payload, _, rest = value.partition(".")
    assert read_cookie(CFG, payload[:-2] + "xx." + rest, SECRET, HOUR_S, clock) is None
    assert read_cookie(CFG, "", SECRET, HOUR_S, clock) is None
    assert read_cookie(CFG, "not-a-cookie", SECRET, HOUR_S, clock) is None
    # a cookie stamped in the future (a clock set back) is not accepted either
    clock.now_s = T0 - 60
    assert read_cookie(CFG, value, SECRET, HOUR_S, clock) is None


def test_the_token_id_is_keyed_and_short() -> None:
    tid = token_id(SECRET, VIEW_TOKEN)
    assert len(tid) == 16 and tid != token_id("t" * 40, VIEW_TOKEN)
    assert tid != token_id(SECRET, LAUNCH_TOKEN) and VIEW_TOKEN not in tid


def test_the_secret_is_generated_once_into_the_data_folder_owner_only(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    first = session_secret(settings)
    path = settings.data_dir / SECRET_FILE
    assert oct(path.stat().st_mode & 0o777) == "0o600" and len(first) >= 32
    assert session_secret(settings) == first  # the next portal start, the next session
    assert [p.name for p in settings.data_dir.iterdir()] == [SECRET_FILE]  # no temp file left
    path.chmod(0o644)
    with pytest.raises(ConfigError, match="readable by other users: `chmod 600`"):
        session_secret(settings)
    path.chmod(0o600)
    path.write_text("short\n")
    with pytest.raises(ConfigError, match="delete it so a new one is made"):
        session_secret(settings)
    # the setting wins over the file
    assert session_secret(_settings(tmp_path, session_secret="x" * 32)) == "x" * 32


def test_the_term_and_secret_come_from_the_environment() -> None:
    assert load_settings({}).session_hours == 12.0
    assert max_age_s(load_settings({})) == 12 * HOUR_S
    s = load_settings({"SERVELAB_SESSION_HOURS": "0.5", "SERVELAB_SESSION_SECRET": "k" * 32})
    assert max_age_s(s) == 1800 and s.session_secret == "k" * 32
    for bad in ("0", "-3", "twelve", "nan", "inf"):
        with pytest.raises(ConfigError, match="SERVELAB_SESSION_HOURS: must be a positive"):
            load_settings({"SERVELAB_SESSION_HOURS": bad})
    with pytest.raises(ConfigError, match="SERVELAB_SESSION_SECRET: must be at least 32"):
        load_settings({"SERVELAB_SESSION_SECRET": "short"})
