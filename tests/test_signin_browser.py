"""Token sign-in in a real browser (Debian's chromium driven by Playwright): before sign-in
the sidebar lists nothing (no pages/_helper module names); a sign-in is remembered across a
reload and in a new tab opened on a shared link, by a signed cookie that holds no token;
"Sign out" ends it. The portal runs on the shipped demo with its worker off and both tokens
set. Screenshots go to test-artifacts/ (signin-*.png).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.portal.demo import install_demo
from core.portal.session import COOKIE_NAME, SECRET_FILE
from core.settings import Settings
from tests.test_e2e_portal import ARTIFACTS, DEMO_RUN, _browser, _portal

pytestmark = pytest.mark.browser  # chromium: tests/helpers.require_chromium

VIEW_TOKEN = "view-token-browser-0123456789"
LAUNCH_TOKEN = "launch-token-browser-0123456789"
PAGES = ["Runs", "Launch", "Run", "Compare", "Experiments", "History", "Import / Export"]
HELPERS = ["attribution", "auth", "details", "explain", "export", "grid", "services", "story"]


@pytest.fixture(scope="module")
def portal(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    data = tmp_path_factory.mktemp("signin") / "data"
    data.mkdir()
    install_demo(
        Settings(data_dir=data, sglang_python=sys.executable, transformers_python=sys.executable)
    )
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SERVELAB_")},
        "SERVELAB_DATA_DIR": str(data),
        "SERVELAB_WORKER": "off",
        "SERVELAB_TOKEN_VIEW": VIEW_TOKEN,
        "SERVELAB_TOKEN_LAUNCH": LAUNCH_TOKEN,
    }
    with _portal(env, data.parent / "portal.log") as base:
        yield base, data


def _nav_links(page) -> list[str]:  # type: ignore[no-untyped-def]
    nav = page.locator('[data-testid="stSidebarNav"] a')
    # each link's text is its icon's ligature name, then the title: keep the title
    return [t.strip().splitlines()[-1] for t in nav.all_inner_texts()]


def test_before_sign_in_the_sidebar_lists_no_page_and_no_helper_module(
    portal: tuple[str, Path],
) -> None:
    base, _ = portal
    ARTIFACTS.mkdir(exist_ok=True)
    pw, browser = _browser()
    try:
        for path in ("/", f"/run?run={DEMO_RUN}", "/compare"):
            page = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
            page.goto(base + path)
            page.get_by_label("Access token").wait_for(timeout=90_000)
            page.wait_for_timeout(1500)  # a page list, if any, is drawn with the first run
            if path == "/":
                page.screenshot(path=str(ARTIFACTS / "signin-00-before.png"))
            assert page.locator('[data-testid="stSidebarNav"]').count() == 0
            assert page.locator('[data-testid="stSidebar"]').count() == 0
            body = page.inner_text("body")
            assert not [h for h in HELPERS if h in body.split()], body
            assert "Runs" not in body.split() and DEMO_RUN not in body, body
            page.context.close()
    finally:
        browser.close()
        pw.stop()


def test_sign_in_is_remembered_across_reloads_and_new_tabs_until_sign_out(
    portal: tuple[str, Path],
) -> None:
    base, data = portal
    ARTIFACTS.mkdir(exist_ok=True)
    shared = f"{base}/run?run={DEMO_RUN}"
    pw, browser = _browser()
    try:
        context = browser.new_context(viewport={"width": 1400, "height": 900})
        page = context.new_page()
        page.goto(shared)  # a shared link, opened signed out: sign in, land on it
        page.get_by_label("Access token").fill(VIEW_TOKEN)
        page.get_by_role("button", name="Sign in").click()
        page.get_by_text("Signed in: view only").wait_for(timeout=90_000)
        page.get_by_text(DEMO_RUN).first.wait_for(timeout=90_000)
        assert page.url == shared and VIEW_TOKEN not in page.url
        assert _nav_links(page) == PAGES  # human names only, no _helper module
        page.screenshot(path=str(ARTIFACTS / "signin-01-signed-in.png"))

        # the cookie: signed role + token id, never the token; Strict; as long as configured
        page.wait_for_function(f"document.cookie.includes('{COOKIE_NAME}=')", timeout=30_000)
        (cookie,) = [c for c in context.cookies() if c["name"] == COOKIE_NAME]
        assert VIEW_TOKEN not in cookie["value"] and cookie["sameSite"] == "Strict"
        assert cookie["path"] == "/" and cookie["expires"] > 0  # survives the browser
        secret = data / SECRET_FILE
        assert oct(secret.stat().st_mode & 0o777) == "0o600"

        page.reload()
        page.get_by_text("Signed in: view only").wait_for(timeout=90_000)
        page.get_by_text(DEMO_RUN).first.wait_for(timeout=90_000)
        assert page.get_by_label("Access token").count() == 0
        page.screenshot(path=str(ARTIFACTS / "signin-02-reloaded.png"))

        tab = context.new_page()  # a new tab on a shared link
        tab.goto(shared)
        tab.get_by_text("Signed in: view only").wait_for(timeout=90_000)
        tab.get_by_text(DEMO_RUN).first.wait_for(timeout=90_000)
        assert tab.get_by_label("Access token").count() == 0
        tab.screenshot(path=str(ARTIFACTS / "signin-03-new-tab.png"))

        tab.get_by_role("button", name="Sign out").click()
        tab.get_by_label("Access token").wait_for(timeout=60_000)
        tab.wait_for_function(f"!document.cookie.includes('{COOKIE_NAME}=')", timeout=30_000)
        tab.reload()
        tab.get_by_label("Access token").wait_for(timeout=90_000)
        assert tab.locator('[data-testid="stSidebarNav"]').count() == 0
        tab.screenshot(path=str(ARTIFACTS / "signin-04-signed-out.png"))
        context.close()
    finally:
        browser.close()
        pw.stop()
