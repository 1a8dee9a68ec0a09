"""The browser tests' gate (tests/helpers.require_chromium, run for every test marked
``browser`` by tests/conftest.py): a missing chromium skips on a developer's machine and
fails under CI=true, where .ci/run installs it."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import require_chromium

TESTS = Path(__file__).resolve().parent


def test_a_missing_browser_skips_outside_ci(tmp_path: Path) -> None:
    with pytest.raises(pytest.skip.Exception, match="needs Debian chromium"):
        require_chromium(str(tmp_path / "no-chromium"), env={})
    with pytest.raises(pytest.skip.Exception):
        require_chromium(str(tmp_path / "no-chromium"), env={"CI": "false"})


def test_a_missing_browser_fails_under_ci(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = str(tmp_path / "no-chromium")
    with pytest.raises(pytest.fail.Exception, match="CI=true, so a missing browser fails"):
        require_chromium(missing, env={"CI": "true"})
    monkeypatch.setenv("CI", "true")  # as CI sets it: read from the environment
    with pytest.raises(pytest.fail.Exception):
        require_chromium(missing)


def test_a_present_browser_lets_the_test_run(tmp_path: Path) -> None:
    chromium = tmp_path / "chromium"
    chromium.write_text("")
    require_chromium(str(chromium), env={"CI": "true"})  # neither skips nor fails


def test_every_test_that_launches_chromium_is_marked_browser() -> None:
    """A browser test without the marker would skip (or crash) on its own terms: every test
    module that launches chromium (Playwright's ``chromium.launch``, or the portal's
    ``_browser`` helper) carries ``pytest.mark.browser``."""
    unmarked = []
    for path in sorted(TESTS.glob("test_*.py")):
        text = path.read_text()
        if path.name == Path(__file__).name or not (
            "chromium.launch(" in text or "_browser(" in text
        ):
            continue
        marks = {
            ast.unparse(n)
            for n in ast.walk(ast.parse(text))
            if isinstance(n, ast.Attribute) and n.attr == "browser"
        }
        if "pytest.mark.browser" not in marks:
            unmarked.append(path.name)
    assert unmarked == []


def _browser_module(ci: str | None) -> subprocess.CompletedProcess[str]:
    """tests/test_signin_browser.py run by pytest with chromium pointing nowhere."""
    code = (
        "import sys, pytest, tests.helpers as h\n"
        "h.CHROMIUM = '/nonexistent/chromium'\n"
        "sys.exit(pytest.main(['-q', '-p', 'no:randomly', '-p', 'no:cacheprovider',"
        " '-n', '0', 'tests/test_signin_browser.py']))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=TESTS.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_marker_gates_a_real_browser_module_through_conftest() -> None:
    failed = _browser_module("true")
    summary = failed.stdout.strip().splitlines()[-1]
    assert failed.returncode != 0 and "CI=true, so a missing browser fails" in failed.stdout
    assert re.fullmatch(r"\d+ errors? in .*", summary), failed.stdout[-2000:]
    skipped = _browser_module(None)
    summary = skipped.stdout.strip().splitlines()[-1]
    assert skipped.returncode == 0, skipped.stdout[-2000:]
    assert re.fullmatch(r"\d+ skipped in .*", summary), skipped.stdout[-2000:]
