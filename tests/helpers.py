"""Small helpers shared by the tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

# A wait ends as soon as its condition holds, so its limit only matters when something is
# wrong. On a shared 2-core CI host a run process can take tens of seconds to start; a tight
# limit would turn that into a failure. Hangs are caught by the per-test timeout instead
# (pytest-timeout, pyproject.toml), which names the test.
WAIT_FLOOR_S = 120.0


def wait_for(pred: Callable[[], T], timeout: float, what: str) -> T:
    """Poll ``pred`` until it returns something truthy; fail naming ``what`` after
    ``timeout`` seconds (at least ``WAIT_FLOOR_S``: a busy host is not a failure)."""
    limit_s = max(timeout, WAIT_FLOOR_S)
    deadline = time.monotonic() + limit_s
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {limit_s:g} s waiting for {what}")
        time.sleep(0.05)


def page_tables(app: Any) -> list[Any]:
    """Every table an AppTest page drew, as DataFrames: data grids (``st.dataframe``) and
    static tables (``st.table``, e.g. the summary card)."""
    return [e.value for e in (*app.dataframe, *app.table)]
