"""The landing page and the sidebar in a real browser (Debian's chromium driven by
Playwright), on a freshly started portal over the shipped demo: from the first paint of the
server's first visit on, the sidebar never lists a module name (it listed every file of
pages/ for seconds before: serve.py's fix); the page asks the seed's question, answers it with
the demo's own attribution and links the experiment and the Launch page; Run, Compare and
History opened from the sidebar offer a picker. Screenshots at 1440 and 400 px go to
test-artifacts/ (landing-*.png), first paint included.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator

import pytest

from core.portal.demo import install_demo
from core.settings import Settings
from core.views.landing import QUESTION, landing_answer
from tests.test_e2e_portal import ARTIFACTS, _browser, _portal

pytestmark = pytest.mark.browser  # chromium: tests/helpers.require_chromium

PAGES = {"Runs", "Launch", "Run", "Compare", "Experiments", "History", "Import / Export"}


@pytest.fixture(scope="module")
def fresh_portal(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Settings]]:
    data = tmp_path_factory.mktemp("landing") / "data"
    data.mkdir()
    exe = sys.executable
    settings = Settings(data_dir=data, sglang_python=exe, transformers_python=exe)
    install_demo(settings)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SERVELAB_")},
        "SERVELAB_DATA_DIR": str(data),
        "SERVELAB_WORKER": "off",
    }
    with _portal(env, data.parent / "portal.log") as base:
        yield base, settings


def _nav(page) -> list[str]:  # type: ignore[no-untyped-def]
    links = page.locator('[data-testid="stSidebarNav"] a').all_inner_texts()
    # each link's text is its icon's ligature name, then the title: keep the title
    return [t.strip().splitlines()[-1] for t in links if t.strip()]


def _watch_until_answered(page, width: int, limit_s: float = 120) -> set[str]:  # type: ignore[no-untyped-def]
    """Every sidebar link shown from the first paint until the question is on the page; the
    first paint's screenshot taken as it appears."""
    seen: set[str] = set()
    painted = False
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        seen |= set(_nav(page))
        text = page.evaluate("document.body ? document.body.innerText : ''")
        if not painted and text.strip():
            page.screenshot(path=str(ARTIFACTS / f"landing-{width}-first-paint.png"))
            painted = True
        if QUESTION in text:
            return seen
        page.wait_for_timeout(200)
    raise AssertionError(f"the question never appeared; sidebar links seen: {sorted(seen)}")


# the parts of an element whose text is cut off: clipped (overflow hidden) and wider inside
_CUT = """a => [a, ...a.querySelectorAll('*')]
  .filter(e => getComputedStyle(e).overflow === 'hidden' && e.scrollWidth > e.clientWidth)
  .map(e => e.tagName)"""


def test_first_paint_to_answer_no_module_name_and_the_answer_links(
    fresh_portal: tuple[str, Settings],
) -> None:
    base, settings = fresh_portal
    answer = landing_answer(settings)  # what the page must say: the demo's own attribution
    assert answer is not None
    ARTIFACTS.mkdir(exist_ok=True)
    pw, browser = _browser()
    try:
        for width in (1440, 400):  # the first: the server's very first visit
            page = browser.new_context(viewport={"width": width, "height": 900}).new_page()
            page.goto(base + "/", wait_until="commit")
            seen = _watch_until_answered(page, width)
            page.wait_for_timeout(1500)
            seen |= set(_nav(page))
            assert seen <= PAGES, f"names that are not pages: {sorted(seen - PAGES)}"
            body = page.inner_text("body")
            assert answer.sentences[0] in body and answer.sentences[1] in body
            link = page.get_by_role("link", name="Open the experiment")
            assert answer.experiment_id in (link.get_attribute("href") or "")
            launch = page.get_by_role("link", name="Launch your own")
            assert (launch.get_attribute("href") or "").rstrip("/").endswith("launch")
            for each in (link, launch):  # its whole label readable, never cut at the edge
                assert each.evaluate(_CUT) == [], (width, each.inner_text())
            page.screenshot(path=str(ARTIFACTS / f"landing-{width}.png"), full_page=True)
            if width == 1440:
                assert _nav(page) and set(_nav(page)) == PAGES  # the sidebar: pages only
            page.context.close()
    finally:
        browser.close()
        pw.stop()


@pytest.mark.parametrize(
    ("path", "picker"),
    [
        ("/run", "Pick a run"),
        ("/compare", "Runs to compare"),
        ("/history", "Pick a run: its configuration's history"),
    ],
)
def test_sidebar_pages_without_a_query_string_offer_a_picker(
    fresh_portal: tuple[str, Settings], path: str, picker: str
) -> None:
    base, _ = fresh_portal
    pw, browser = _browser()
    try:
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        page.goto(base + path)
        page.get_by_text(picker).first.wait_for(timeout=90_000)
        page.wait_for_timeout(500)
        body = page.inner_text("body")
        assert "No run selected" not in body and "Pick two or more runs on the Runs" not in body
        page.screenshot(path=str(ARTIFACTS / f"landing-picker-{path.strip('/')}.png"))
    finally:
        browser.close()
        pw.stop()
