"""The server's view over time on Run, Compare and Experiment in a real browser (Debian's
chromium via Playwright), on the shipped H200 demo with the portal's worker off. Screenshots
(top of each page, and its timeline) go to test-artifacts/."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

from core.portal.demo import install_demo
from core.settings import Settings
from tests.helpers import chart_in_frames
from tests.test_e2e_portal import ARTIFACTS, _browser, _portal

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.browser,
]

H200_EXP = "exp-20261201-041412-6b50"
RUN = "20261201-041412-a1c2da"  # graphs off, mem 0.85
BEFORE = "20261201-000311-8d8413"  # the seed pair: graphs off + 0.85 ...
AFTER = "20261201-000511-eb5799"  # ... vs graphs on + 0.92


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data = tmp_path_factory.mktemp("timelines-browser") / "data"
    data.mkdir()
    install_demo(
        Settings(data_dir=data, sglang_python=sys.executable, transformers_python=sys.executable)
    )
    env = {**os.environ, "SERVELAB_DATA_DIR": str(data), "SERVELAB_WORKER": "off"}
    with _portal(env, data.parent / "portal.log") as url:
        yield url


@pytest.mark.parametrize(
    ("name", "path", "traces"),
    [
        ("run", f"run?run={RUN}", 6),
        ("compare", f"compare?runs={BEFORE},{AFTER}", 12),
        ("experiment", f"experiment?experiment={H200_EXP}", 24),
    ],
)
def test_the_servers_view_is_drawn(base: str, name: str, path: str, traces: int) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    pw, browser = _browser()
    try:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(f"{base}/{path}")
        page.get_by_text("The server's view over time").wait_for(timeout=120_000)
        page.screenshot(path=str(ARTIFACTS / f"timelines-{name}-top.png"))
        chart = chart_in_frames(page, "The server's view", timeout=60)
        chart.scroll_into_view_if_needed()
        # every run's series drawn: one line per run and series (6 a run with /metrics)
        assert chart.locator(".scatterlayer .trace").count() >= traces
        assert "KV peak" in page.inner_text("body")
        page.screenshot(path=str(ARTIFACTS / f"timelines-{name}.png"))
    finally:
        browser.close()
        pw.stop()
