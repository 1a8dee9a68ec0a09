"""No URL alone reads anything (core/portal/gate.py, serve.py): with token sign-in on, every
URL the portal serves is fetched with plain HTTP and no cookie while a signed-in browser
holds its downloads open; only the sign-in page's own parts answer, and they carry no data.

The gate's rules first (a fake inner app at the ASGI boundary), then the real portal
(`streamlit run serve.py`, as ./servelab portal starts it) on the shipped demo, signed in
with Debian's chromium, which downloads a run's raw file, an experiment's report and its CSV
tables; then bare `streamlit run app.py` with tokens refuses to serve.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from core.portal.access import AccessConfig
from core.portal.demo import install_demo
from core.portal.gate import SignInGate, is_open_path
from core.portal.session import COOKIE_NAME, issue_cookie
from core.settings import Settings
from tests.helpers import chart_in_frames
from tests.test_e2e_portal import ARTIFACTS, DEMO_RUN, _browser, _portal

REPO = Path(__file__).resolve().parent.parent
VIEW_TOKEN = "view-token-urls-0123456789"
LAUNCH_TOKEN = "launch-token-urls-0123456789"
DEMO_EXP = "exp-20261130-045815-42d8"  # the CUDA-graph A/B of the demo
SECRET = "s" * 40
TOKENS = {
    "SERVELAB_TOKEN_VIEW": VIEW_TOKEN,
    "SERVELAB_TOKEN_LAUNCH": LAUNCH_TOKEN,
    "SERVELAB_SESSION_SECRET": SECRET,
}


# --- the gate's rules ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "base", "oidc", "is_open"),
    [
        ("/", "", False, True),
        ("/run", "", False, True),  # a page's shell: the same HTML for every page
        ("/favicon.png", "", False, True),
        ("/static/js/index.js", "", False, True),
        ("/_stcore/health", "", False, True),
        ("/_stcore/host-config", "", False, True),
        ("/_stcore/stream", "", False, True),
        ("/_stcore/metrics", "", False, False),
        ("/_stcore/upload_file/s/f", "", False, False),
        ("/_stcore/agent/interact", "", False, False),
        ("/_stcore/script-health-check", "", False, False),
        ("/media/abc.html", "", False, False),
        ("/component/pages._chart.servelab_chart/index.html", "", False, False),
        ("/app/static/x.csv", "", False, False),
        ("/_stcore/anything-new", "", False, False),  # closed until listed
        ("/auth/login", "", False, False),
        ("/auth/login", "", True, True),  # OIDC's own login flow
        ("/oauth2callback", "", True, True),
        ("/lab/run", "lab", False, True),
        ("/lab/media/abc", "/lab/", False, False),
        ("/media/abc", "lab", False, False),  # outside the base path
    ],
)
def test_open_paths_are_the_sign_in_pages_own_parts(
    path: str, base: str, oidc: bool, is_open: bool
) -> None:
    assert is_open_path(path, base, oidc) is is_open


async def _inner(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"inner"})


def _call(env: dict[str, str], path: str, cookie: str = "", kind: str = "http") -> list[Any]:
    """What a real gate in front of a fake app (answering 200 'inner') sends for a request."""
    sent: list[Any] = []

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    async def receive() -> MutableMapping[str, Any]:
        return {"type": "http.request"}

    scope = {"type": kind, "path": path, "headers": [(b"cookie", cookie.encode())]}
    asyncio.run(SignInGate(_inner, env=env)(scope, receive, send))
    return sent


def test_the_gate_answers_401_without_the_sign_in_the_pages_accept(tmp_path: Path) -> None:
    env = {"SERVELAB_DATA_DIR": str(tmp_path), **TOKENS}
    cfg = AccessConfig(token_view=VIEW_TOKEN, token_launch=LAUNCH_TOKEN)
    issued, other_secret = (
        issue_cookie(cfg, VIEW_TOKEN, SECRET),
        issue_cookie(cfg, VIEW_TOKEN, "t" * 40),
    )
    assert issued is not None and other_secret is not None
    good = f"{COOKIE_NAME}={issued[1]}"
    for cookie in ("", good[:-2] + "xx", f"{COOKIE_NAME}={other_secret[1]}", "a=b; c"):
        start, body = _call(env, "/media/abc", cookie)
        assert start["status"] == 401 and b"Sign in" in body["body"], cookie
    start, body = _call(env, "/media/abc", good)
    assert start["status"] == 200 and body["body"] == b"inner"
    assert _call(env, "/_stcore/health")[0]["status"] == 200
    assert _call(env, "/_stcore/metrics", kind="websocket") == [
        {"type": "websocket.close", "code": 1008}
    ]
    # a token removed since: its cookie no longer opens anything, as on the pages
    start, _ = _call(
        {**env, "SERVELAB_TOKEN_VIEW": "another-view-token-0123456789"}, "/media/a", good
    )
    assert start["status"] == 401
    # open mode (loopback, no tokens): nothing changes
    assert _call({"SERVELAB_DATA_DIR": str(tmp_path)}, "/media/abc")[0]["status"] == 200


def test_in_oidc_mode_the_gate_asks_streamlits_login_and_the_same_roles(tmp_path: Path) -> None:
    env = {"SERVELAB_DATA_DIR": str(tmp_path), "SERVELAB_VIEWERS": "@lab.org"}
    sent: list[Any] = []

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    async def receive() -> MutableMapping[str, Any]:
        return {"type": "http.request"}

    def status(path: str, user: str) -> int:
        gate = SignInGate(
            _inner, env=env, oidc=True, oidc_email=lambda cookies, _: cookies.get("user")
        )
        sent.clear()
        cookie = f"user={user}".encode() if user else b""
        scope = {"type": "http", "path": path, "headers": [(b"cookie", cookie)]}
        asyncio.run(gate(scope, receive, send))
        return int(sent[0]["status"])

    assert status("/media/a", "ana@lab.org") == 200
    assert status("/media/a", "eve@elsewhere.org") == 401  # logged in, but not a viewer
    assert status("/media/a", "") == 401
    assert status("/auth/login", "") == 200 and status("/oauth2callback", "") == 200


def test_serve_reads_streamlits_signed_login_cookie() -> None:
    """serve.oidc_email, run where serve.py runs (its own process: st.App pins config)."""
    script = """
import json
from streamlit import config
config.set_option("server.cookieSecret", "c" * 40)
from streamlit.web.server.starlette.starlette_app_utils import create_signed_value
import serve
def cookie(payload, secret="c" * 40):
    value = create_signed_value(secret, "_streamlit_user", json.dumps(payload))
    return {"_streamlit_user": value.decode("latin-1")}
user = {"is_logged_in": True, "email": "ana@lab.org", "origin": "http://x"}
print(serve.oidc_email(cookie(user), {}))
print(serve.oidc_email(cookie(user, secret="d" * 40), {}))
print(serve.oidc_email(cookie({**user, "is_logged_in": False}), {}))
print(serve.oidc_email({}, {}))
"""
    out = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        env={k: v for k, v in os.environ.items() if not k.startswith("SERVELAB_")},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert out.stdout.split() == ["ana@lab.org", "None", "None", "None"], out.stderr


# --- the real portal, every URL without a cookie -----------------------------------------------


@pytest.fixture(scope="module")
def portal(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    data = tmp_path_factory.mktemp("urls") / "data"
    data.mkdir()
    install_demo(
        Settings(data_dir=data, sglang_python=sys.executable, transformers_python=sys.executable)
    )
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SERVELAB_")},
        "SERVELAB_DATA_DIR": str(data),
        "SERVELAB_WORKER": "off",
        **TOKENS,
    }
    with _portal(env, data.parent / "portal.log") as base:
        yield base, data


def _download(page: Any, name: str, cookie: str) -> tuple[str, bytes]:
    """Click a download button; its /media URL and the bytes the browser saved. At once,
    while the file exists (Streamlit drops a generated download after a later script run):
    the URL alone reads nothing, the URL with the session's cookie reads the same bytes."""
    button = page.get_by_role("button", name=name).first
    button.wait_for(timeout=90_000)
    with page.expect_download(timeout=60_000) as info:
        button.click()
    url, content = info.value.url, Path(info.value.path()).read_bytes()
    with httpx.Client(timeout=30) as client:
        alone = client.get(url)
        assert alone.status_code == 401 and content not in alone.content, url
        signed = client.get(url, headers={"Cookie": f"{COOKIE_NAME}={cookie}"})
        assert signed.status_code == 200 and signed.content == content, url
    return url, content


@contextlib.contextmanager
def _signed_in_browser(base: str) -> Iterator[tuple[dict[str, bytes], set[str], str]]:
    """A signed-in browser with three tabs open while the caller runs: the Run page (a raw
    file downloaded), the Experiment page (its report and CSV tables downloaded), Import (a
    file uploaded). Yields the downloads by URL, every URL the browser asked for, and the
    session cookie's value."""
    asked: set[str] = set()
    downloads: dict[str, bytes] = {}
    pw, browser = _browser()
    try:
        context = browser.new_context(viewport={"width": 1400, "height": 1200})
        context.on("request", lambda r: asked.add(r.url))
        context.on("page", lambda p: p.on("websocket", lambda ws: asked.add(ws.url)))
        run = context.new_page()
        run.goto(f"{base}/run?run={DEMO_RUN}")
        run.get_by_label("Access token").fill(VIEW_TOKEN)
        run.get_by_role("button", name="Sign in").click()
        run.get_by_text("Signed in: view only").wait_for(timeout=90_000)
        run.wait_for_function(f"document.cookie.includes('{COOKIE_NAME}=')", timeout=30_000)
        (cookie,) = [c["value"] for c in context.cookies() if c["name"] == COOKIE_NAME]
        url, data = _download(run, "spec.json", cookie)
        downloads[url] = data
        exp = context.new_page()
        exp.goto(f"{base}/experiment?experiment={DEMO_EXP}")
        chart_in_frames(exp, "", timeout=90)  # the chart component's files pass the gate
        for name in ("Report (HTML, opens offline)", "Tables as CSV (zip)"):
            url, data = _download(exp, name, cookie)
            downloads[url] = data
        ARTIFACTS.mkdir(exist_ok=True)
        exp.screenshot(path=str(ARTIFACTS / "urls-01-signed-in.png"))
        imp = context.new_page()  # an upload passes the gate with the cookie
        imp.goto(f"{base}/import_export")
        imp.get_by_text("Bring in results you already have").wait_for(timeout=90_000)
        imp.locator('input[type="file"]').first.set_input_files(
            files=[{"name": "bench.txt", "mimeType": "text/plain", "buffer": b"x\n"}]
        )
        imp.get_by_text("bench.txt").first.wait_for(timeout=60_000)
        yield downloads, {"http" + u[2:] if u.startswith("ws") else u for u in asked}, cookie
    finally:
        browser.close()
        pw.stop()


def _fetch_alone(url: str, client: httpx.Client, ids: list[str], saved: list[bytes]) -> bool:
    """Fetch ``url`` with no cookie: True when it answered 200 (then only a part of the
    sign-in page, holding no run or experiment id and no download); False when refused."""
    r = client.get(url)
    path = urlsplit(url).path
    if path.startswith("/media/") or path == "/_stcore/metrics":
        assert r.status_code == 401, (url, r.status_code)
    leaked = [i for i in ids if i.encode() in r.content]
    assert not leaked and r.content not in saved, (url, leaked)
    if r.status_code == 200:
        assert is_open_path(path), url
        return True
    assert r.status_code in (301, 307, 401, 403, 404), (url, r.status_code)
    assert r.status_code != 404 or not is_open_path(path), url  # 404 only behind the gate
    return False


@pytest.mark.browser  # chromium: tests/helpers.require_chromium
def test_no_url_the_portal_serves_reads_anything_without_the_cookie(
    portal: tuple[str, Path],
) -> None:
    base, data = portal
    ids = [p.name for kind in ("runs", "experiments") for p in (data / kind).iterdir()]
    pages = ["/", "/launch", "/run", "/compare", "/experiment", "/history", "/import_export"]
    stcore = ["metrics", "host-config", "health", "stream", "script-health-check"]
    more = ["/_stcore/upload_file/x/y", "/_stcore/agent/interact", "/component/x/index.html"]
    fixed = {base + p for p in [*pages, *(f"/_stcore/{s}" for s in stcore), *more]}
    fixed |= {base + f"/run?run={DEMO_RUN}", base + f"/experiment?experiment={DEMO_EXP}"}
    kinds = ["/media/", "/_stcore/upload_file/", "/_stcore/metrics", "/_stcore/stream"]
    kinds += ["/static/", "/component/", "/_stcore/host-config"]
    with _signed_in_browser(base) as (downloads, asked, cookie):
        assert len(downloads) == 3 and b'"run_id"' in next(iter(downloads.values()))
        tried = fixed | {u for u in asked if u.startswith(base)}
        assert all(any(k in u for u in tried) for k in kinds), sorted(tried)
        with httpx.Client(timeout=30) as client:  # no cookie jar: nothing sent but the URL
            saved = list(downloads.values())
            answered = [urlsplit(u).path for u in tried if _fetch_alone(u, client, ids, saved)]
            for url in [u for u in tried if "/_stcore/upload_file/" in u]:
                assert client.put(url, files={"file": ("x.txt", b"x")}).status_code == 401
            # with the cookie, metrics answer (the downloads did, in _download)
            jar = {"Cookie": f"{COOKIE_NAME}={cookie}"}
            assert client.get(base + "/_stcore/metrics", headers=jar).status_code == 200
    assert "/_stcore/health" in answered and "/" in answered


def test_bare_streamlit_run_app_py_with_tokens_refuses_to_serve(tmp_path: Path) -> None:
    """Without serve.py's gate, /media would answer anyone: the pages refuse sign-in modes."""
    data = tmp_path / "data"
    script = (
        "from streamlit.testing.v1 import AppTest\n"
        "a = AppTest.from_file('app.py', default_timeout=60)\n"
        "a.run()\n"
        "print('|'.join(e.value for e in a.error))\n"
    )
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SERVELAB_")},
        "SERVELAB_DATA_DIR": str(data),
        "SERVELAB_WORKER": "off",
        **TOKENS,
    }
    out = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert "no sign-in gate" in out.stdout and "serve.py" in out.stdout, out.stdout
