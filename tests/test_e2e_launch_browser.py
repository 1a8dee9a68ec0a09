"""The Launch form in a real browser (Debian's chromium via Playwright): Enter in a field
submits nothing and no "Press Enter to submit form" hint covers a number field's value
(issue 24 item 3). Screenshots go to test-artifacts/."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.test_e2e_portal import ARTIFACTS, _browser, _portal

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.browser,
]


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data = tmp_path_factory.mktemp("launch-browser") / "data"
    data.mkdir()
    (data / ".demo-installed").write_text("")  # an empty data folder
    env = {**os.environ, "SERVELAB_DATA_DIR": str(data), "SERVELAB_WORKER": "off"}
    with _portal(env, data.parent / "portal.log") as url:
        yield url


@pytest.mark.parametrize("width", [1440, 400])
def test_enter_in_a_number_field_runs_no_check(base: str, width: int) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    pw, browser = _browser()
    try:
        page = browser.new_page(viewport={"width": width, "height": 1000})
        page.goto(f"{base}/launch")
        field = page.get_by_label("Input tokens")
        field.wait_for(timeout=120_000)
        # the first draw of a cold portal on a busy host: wait until the script is done
        page.get_by_text("Queue runs").wait_for(timeout=120_000)
        field.click(timeout=60_000)
        field.fill("48", timeout=60_000)
        assert page.get_by_text("Press Enter to submit form").count() == 0
        page.screenshot(path=str(ARTIFACTS / f"launch-enter-{width}.png"))
        field.press("Enter")
        page.wait_for_timeout(3000)  # a submitted form would rerun and draw its check
        body = page.inner_text("body")
        assert "Nothing was queued" not in body and "need attention" not in body
        assert "Every field is fine" not in body  # nor the main check
    finally:
        browser.close()
        pw.stop()
