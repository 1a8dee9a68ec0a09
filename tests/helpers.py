"""Small helpers shared by the tests."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import pytest

T = TypeVar("T")
# Debian's chromium: the browser tests' browser (marker ``browser``, tests/conftest.py).
CHROMIUM = "/usr/bin/chromium"


def require_chromium(executable: str | None = None, env: Mapping[str, str] | None = None) -> None:
    """A browser test's gate: skip where chromium is missing (a developer's machine), but
    fail under ``CI=true``: CI installs it (.ci/run), so a missing browser there is a broken
    set-up, never a dozen browser tests passing unseen as skips."""
    executable = executable or CHROMIUM
    if Path(executable).exists():
        return
    why = f"needs Debian chromium at {executable} (.ci/run installs it)"
    if (os.environ if env is None else env).get("CI", "").strip().lower() == "true":
        pytest.fail(f"{why}; CI=true, so a missing browser fails the test", pytrace=False)
    pytest.skip(why)


def wait_for(pred: Callable[[], T], timeout: float, what: str) -> T:
    """Poll ``pred`` until it returns something truthy; fail naming ``what`` after
    ``timeout`` seconds.

    A wait ends as soon as its condition holds, so its limit only matters when something
    is wrong; give each call site the time its condition can take on a busy 2-core CI host
    (a run process can take tens of seconds to start and reach its benchmark). Hangs beyond
    that are caught by the per-test timeout (pytest-timeout, pyproject.toml)."""
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.05)


def open_page(app: Any, page: str, **params: str) -> Any:
    """An AppTest of ``app.py`` opened on ``page`` (e.g. ``"pages/run.py"``) with these query
    parameters, as a shared link opens it: the app runs once, then switches to the page;
    the page must draw without an exception."""
    for k, v in params.items():
        app.query_params[k] = v
    app.run()
    app.switch_page(page).run()
    assert not app.exception, app.exception
    return app


def page_tables(app: Any) -> list[Any]:
    """Every table an AppTest page drew, as DataFrames: data grids (``st.dataframe``) and
    static tables (``st.table``, e.g. the summary card)."""
    return [e.value for e in (*app.dataframe, *app.table)]


def page_figures(app: Any) -> list[dict[str, Any]]:
    """Every plotly figure an AppTest page drew (``pages/_chart.py``'s frames), as the
    figure's JSON: ``{"data": [...], "layout": {...}}``."""
    return [
        json.loads(json.loads(c.proto.json_args)["figure_json"])
        for c in app.get("component_instance")
        if c.proto.component_name.endswith(".servelab_chart")
    ]


def chart_in_frames(page: Any, has_text: str, timeout: float) -> Any:
    """The drawn plotly chart holding ``has_text``, in whichever chart frame of a browser
    page (Playwright) drew it: each figure is a component frame of its own."""

    def find() -> Any:
        for frame in page.frames:
            chart = frame.locator(".js-plotly-plot").filter(has_text=has_text)
            if chart.count():
                return chart.first
        return None

    return wait_for(find, timeout, f"a chart showing {has_text!r}")
