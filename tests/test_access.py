"""Access: loopback by default, authentication required to serve a team, view vs launch
(core/portal/access.py, pages/_auth.py, ./servelab), and no secrets in the repository."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import streamlit as st
from streamlit import config as st_config
from streamlit.testing.v1 import AppTest

from core.portal.access import (
    LAUNCH,
    VIEW,
    AccessConfig,
    is_loopback,
    load_access,
    oidc_configured,
    problems,
    role_for_token,
    role_for_user,
)
from core.portal.gate import SignInGate

REPO = Path(__file__).resolve().parent.parent
VIEW_TOKEN = "view-token-0123456789abcdef"
LAUNCH_TOKEN = "launch-token-0123456789abcdef"


# --- the rules ---------------------------------------------------------------------------------


def test_loopback_is_the_default_and_needs_nothing() -> None:
    cfg = load_access({}, oidc=False)
    assert cfg.bind == "127.0.0.1" and cfg.mode == "open" and problems(cfg) == []
    assert all(is_loopback(a) for a in ("127.0.0.1", "::1", "localhost", "127.0.1.1"))
    assert not any(is_loopback(a) for a in ("0.0.0.0", "::", "10.0.0.5", "example.com"))


def test_serving_a_team_without_authentication_is_refused() -> None:
    for bind in ("0.0.0.0", "::", "10.1.2.3"):
        (why,) = problems(load_access({"SERVELAB_BIND": bind}, oidc=False))
        assert f"refusing to serve on {bind} without authentication" in why
    ok = load_access(
        {
            "SERVELAB_BIND": "0.0.0.0",
            "SERVELAB_TOKEN_VIEW": VIEW_TOKEN,
            "SERVELAB_TOKEN_LAUNCH": LAUNCH_TOKEN,
        },
        oidc=False,
    )
    assert ok.mode == "token" and problems(ok) == []


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"SERVELAB_TOKEN_LAUNCH": "short"}, "at least 16"),
        ({"SERVELAB_TOKEN_VIEW": VIEW_TOKEN}, "SERVELAB_TOKEN_LAUNCH is not"),
        (
            {"SERVELAB_TOKEN_VIEW": LAUNCH_TOKEN, "SERVELAB_TOKEN_LAUNCH": LAUNCH_TOKEN},
            "must differ",
        ),
        ({"SERVELAB_TOKEN_LAUNCH": " " + LAUNCH_TOKEN}, "without surrounding spaces"),
    ],
)
def test_weak_token_settings_are_refused(env: dict[str, str], words: str) -> None:
    assert any(words in p for p in problems(load_access(env, oidc=False)))


def test_roles() -> None:
    cfg = AccessConfig(token_view=VIEW_TOKEN, token_launch=LAUNCH_TOKEN)
    assert role_for_token(cfg, LAUNCH_TOKEN) == LAUNCH
    assert role_for_token(cfg, VIEW_TOKEN + "\n") == VIEW
    assert role_for_token(cfg, "") is None and role_for_token(cfg, VIEW_TOKEN[:-1]) is None
    oidc = AccessConfig(oidc=True, launchers=("ana@lab.org", "@ops.lab.org"))
    assert role_for_user(oidc, "Ana@lab.org") == LAUNCH
    assert role_for_user(oidc, "bob@ops.lab.org") == LAUNCH
    assert role_for_user(oidc, "eve@elsewhere.com") == VIEW  # anyone the IdP lets in views
    strict = AccessConfig(oidc=True, viewers=("@lab.org",))
    assert role_for_user(strict, "eve@elsewhere.com") is None
    assert role_for_user(strict, None) is None


def test_oidc_is_detected_from_streamlit_secrets(tmp_path: Path) -> None:
    secrets = tmp_path / "secrets.toml"
    secrets.write_text('[auth]\nredirect_uri = "http://x/oauth2callback"\n')
    assert oidc_configured([secrets])
    secrets.write_text("[other]\nx = 1\n")
    assert not oidc_configured([secrets, tmp_path / "missing.toml"])


def test_servelab_portal_checks_access_before_streamlit_starts() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SERVELAB_TOKEN")}
    refused = subprocess.run(
        [sys.executable, "-m", "core.portal.access", "--bind", "0.0.0.0"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2 and "refusing to serve on 0.0.0.0" in refused.stderr
    ok = subprocess.run(
        [sys.executable, "-m", "core.portal.access"],
        cwd=REPO,
        env={
            **env,
            "SERVELAB_BIND": "0.0.0.0",
            "SERVELAB_TOKEN_VIEW": VIEW_TOKEN,
            "SERVELAB_TOKEN_LAUNCH": LAUNCH_TOKEN,
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ok.returncode == 0 and "token sign-in on 0.0.0.0" in ok.stdout
    bad_term = subprocess.run(
        [sys.executable, "-m", "core.portal.access"],
        cwd=REPO,
        env={**env, "SERVELAB_TOKEN_LAUNCH": LAUNCH_TOKEN, "SERVELAB_SESSION_HOURS": "twelve"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad_term.returncode == 2 and "SERVELAB_SESSION_HOURS: must be a positive" in (
        bad_term.stderr
    )
    script = (REPO / "servelab").read_text()
    portal = script[script.index("  portal)") : script.index("  test)")]
    check = portal.index('"$PY" -m core.portal.access || exit 2')
    assert check < portal.index("exec") and '--server.address "$BIND"' in portal
    assert "streamlit run serve.py" in portal  # app.py behind the sign-in gate
    assert "BIND=${SERVELAB_BIND:-127.0.0.1}" in portal


# --- the portal ----------------------------------------------------------------------------------


@pytest.fixture
def portal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    data = tmp_path / "data"
    monkeypatch.setenv("SERVELAB_DATA_DIR", str(data))
    monkeypatch.setenv("SERVELAB_WORKER", "off")
    for var in ("SERVELAB_BIND", "SERVELAB_TOKEN_VIEW", "SERVELAB_TOKEN_LAUNCH"):
        monkeypatch.delenv(var, raising=False)
    st.cache_resource.clear()
    # AppTest runs app.py without a server: build the gate serve.py puts in front of the real
    # one (the pages refuse sign-in modes without it)
    SignInGate(_no_app)
    yield data
    st_config.set_option("server.address", None)


async def _no_app(scope: object, receive: object, send: object) -> None:
    raise AssertionError("AppTest sends no request through the gate")


def app() -> AppTest:
    return AppTest.from_file(str(REPO / "app.py"), default_timeout=60)


def at_sign_in(a: AppTest) -> AppTest:
    """The sign-in form, ready for a click. AppTest resets Streamlit's legacy pages/ mode
    before every run, so from its second run on it runs the page st.navigation chose
    (whose bootstrap() gates it) instead of app.py, which a browser keeps running; widget
    ids differ between the two, so the form is drawn there once before it is used."""
    a.run()
    a.run()
    return a


def sign_in(a: AppTest, token: str) -> AppTest:
    at_sign_in(a)
    a.text_input(key="servelab_token").set_value(token)
    a.button(key="servelab_login").click().run()
    assert not a.exception, a.exception
    return a


def runs_in(data: Path) -> list[str]:
    return sorted(p.name for p in (data / "runs").iterdir()) if (data / "runs").is_dir() else []


def test_open_on_loopback_lets_the_local_user_launch(portal: Path) -> None:
    a = app()
    a.run()
    assert not a.exception and any(t.value == "Runs" for t in a.title)
    assert not [w for w in a.text_input if w.key == "servelab_token"]  # no sign-in
    a.switch_page("pages/launch.py").run()
    assert not a.button(key="submit_launch").disabled


def test_bound_to_every_interface_without_auth_serves_nothing(portal: Path) -> None:
    st_config.set_option("server.address", "0.0.0.0")
    a = app()
    a.run()
    assert not a.exception
    assert "refusing to serve on 0.0.0.0" in " ".join(e.value for e in a.error)
    assert not any(t.value == "Runs" for t in a.title) and not a.dataframe


def test_oidc_without_authlib_is_refused_not_opened(portal: Path) -> None:
    pytest.importorskip("tomllib")
    try:
        import authlib  # noqa: F401

        pytest.skip("Authlib is installed here")
    except ImportError:
        pass
    a = app()
    a.secrets["auth"] = {
        "redirect_uri": "http://localhost:8501/oauth2callback",
        "cookie_secret": "x" * 32,
    }
    a.run()
    assert "Authlib is not installed" in " ".join(e.value for e in a.error)
    assert not any(t.value == "Runs" for t in a.title)


def test_tokens_gate_the_portal_and_separate_view_from_launch(
    portal: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SERVELAB_BIND", "0.0.0.0")
    monkeypatch.setenv("SERVELAB_TOKEN_VIEW", VIEW_TOKEN)
    monkeypatch.setenv("SERVELAB_TOKEN_LAUNCH", LAUNCH_TOKEN)

    # No token: a sign-in prompt and nothing else.
    a = at_sign_in(app())
    assert not a.exception
    assert a.text_input(key="servelab_token") is not None
    assert not any(t.value == "Runs" for t in a.title) and not a.dataframe
    a.text_input(key="servelab_token").set_value("guess-guess-guess-guess")
    a.button(key="servelab_login").click().run()
    assert "not valid" in " ".join(e.value for e in a.error)
    assert not any(t.value == "Runs" for t in a.title)

    # The view token: the Runs page, but Launch is disabled, and refused if forced.
    viewer = sign_in(app(), VIEW_TOKEN)
    assert any(t.value == "Runs" for t in viewer.title)
    viewer.switch_page("pages/launch.py").run()
    assert not viewer.exception, viewer.exception
    assert viewer.button(key="submit_launch").disabled
    assert "view: launching runs needs the launch token" in " ".join(i.value for i in viewer.info)
    before = runs_in(portal)
    forged = viewer.button(key="submit_launch")
    forged.proto.disabled = False  # what a tampered browser could send anyway: Streamlit
    forged.click().run()  # drops it, and the page checks the role again
    assert runs_in(portal) == before
    assert not viewer.success

    # The launch token: can queue.
    launcher = sign_in(app(), LAUNCH_TOKEN)
    launcher.switch_page("pages/launch.py").run()
    assert not launcher.button(key="submit_launch").disabled
    launcher.selectbox(key="preset").set_value("Single run")
    launcher.button(key="submit_launch").click().run()
    assert not launcher.exception, launcher.exception
    new = sorted(set(runs_in(portal)) - set(before))
    assert len(new) == 1 and any(s.value.startswith("Queued 1 run") for s in launcher.success)

    # The viewer cannot cancel it from its page; the launcher can.
    viewer.switch_page("pages/run.py")
    viewer.query_params["run"] = new[0]
    viewer.run()
    assert viewer.button(key="cancel_run").disabled
    launcher.switch_page("pages/run.py")
    launcher.query_params["run"] = new[0]
    launcher.run()
    assert not launcher.button(key="cancel_run").disabled
    launcher.button(key="cancel_run").click().run()
    assert (portal / "runs" / new[0] / "CANCEL").exists()


# --- no secrets in the repository ------------------------------------------------------------

SECRET_PATTERNS = [
    re.compile(rb"-----BEGIN (?:RSA |EC |OPENSSH )?PRIVATE KEY-----"),
    re.compile(rb"\bsk-[A-Za-z0-9]{32,}"),  # OpenAI-style API keys
    re.compile(rb"\bhf_[A-Za-z0-9]{30,}"),  # Hugging Face tokens
    re.compile(rb"\bgh[pousr]_[A-Za-z0-9]{36,}"),  # GitHub tokens
    re.compile(rb"\bAKIA[0-9A-Z]{16}\b"),  # AWS access keys
    re.compile(rb"SERVELAB_TOKEN_(?:VIEW|LAUNCH)=[\"']?[A-Za-z0-9_\-]{16,}"),
]


def test_no_secrets_in_the_repository() -> None:
    files = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True
    ).stdout.split(b"\0")
    found = []
    for name in filter(None, files):
        path = REPO / name.decode()
        if not path.is_file() or path.stat().st_size > 5_000_000:
            continue
        data = path.read_bytes()
        found += [f"{name.decode()}: {p.pattern!r}" for p in SECRET_PATTERNS if p.search(data)]
    assert found == []
    assert (
        not (REPO / ".streamlit" / "secrets.toml").exists()
        or subprocess.run(
            ["git", "check-ignore", "-q", ".streamlit/secrets.toml"], cwd=REPO
        ).returncode
        == 0
    )


def test_secrets_an_engine_echoed_are_scrubbed_when_the_run_ends(tmp_path: Path) -> None:
    from core.config import RunSpec, ServerConfig
    from core.run_folder import RunFolder
    from core.safety import redact_env
    from core.settings import Settings

    secret = "sk-echoed-0123456789abcdef"
    settings = Settings(
        data_dir=tmp_path / "data", sglang_python=sys.executable, transformers_python=sys.executable
    )
    spec = RunSpec(
        server=ServerConfig(engine="sglang", model="/models/m", extra_args=(f"--api-key={secret}",))
    )
    folder = RunFolder.prepare(settings.runs_dir, spec)
    assert folder.read("spec.json")["server"]["extra_args"] == ["--api-key=***"]
    assert oct(folder.secrets_path.stat().st_mode & 0o777) == "0o600"
    folder.log_path.write_text(f"server_args=ServerArgs(api_key='{secret}')\n")
    folder.write("facts.json", {"launch_command": f"x --api-key={secret}"})
    folder.update_status(state="interrupted")  # any final state, by whoever records it
    assert not folder.secrets_path.exists()
    for path in folder.path.rglob("*"):
        assert not path.is_file() or secret.encode() not in path.read_bytes(), path
    assert "api_key='***'" in folder.log_path.read_text()
    assert redact_env({"HF_TOKEN": "hf_x", "OPENAI_API_KEY": "k", "PATH": "/bin"}) == {
        "HF_TOKEN": "***",
        "OPENAI_API_KEY": "***",
        "PATH": "/bin",
    }


def test_experiment_records_hold_no_api_key(tmp_path: Path) -> None:
    from core.config import RunSpec, ServerConfig
    from core.experiments.design import experiment_from_preset
    from core.launch.queue import queue_experiment
    from core.settings import Settings

    secret = "sk-experiment-0123456789abcdef"
    settings = Settings(
        data_dir=tmp_path / "data", sglang_python=sys.executable, transformers_python=sys.executable
    )
    base = RunSpec(
        server=ServerConfig(engine="sglang", model="/models/m", extra_args=("--api-key", secret))
    )
    exp = experiment_from_preset(
        "A/B", base, [("on", {"cuda_graphs": True}), ("off", {"cuda_graphs": False})], trials=2
    )
    queue_experiment(settings, exp)
    stored = [p for p in settings.data_dir.rglob("*") if p.is_file()]
    assert len([p for p in stored if p.name == "spec.json"]) == 4
    assert [p.name for p in stored if secret.encode() in p.read_bytes()] == [
        ".secrets.json"
    ] * 4  # the owner-only files the run processes read, deleted at the end
