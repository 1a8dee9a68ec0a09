"""core/settings.py reads the environment, once, when asked: the load generator's event-loop
and JSON-parser choices among it (the load generator itself reads no environment)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from core.settings import REPO_ROOT, load_settings


@pytest.mark.parametrize(
    ("env", "loop", "parser"),
    [
        ({}, "auto", "auto"),
        ({"SERVELAB_EVENT_LOOP": "asyncio", "SERVELAB_JSON": "json"}, "asyncio", "json"),
        ({"SERVELAB_EVENT_LOOP": "uvloop", "SERVELAB_JSON": "orjson"}, "auto", "auto"),
    ],
)
def test_the_load_generators_choices_come_from_the_environment(
    env: dict[str, str], loop: str, parser: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("SERVELAB_EVENT_LOOP", "SERVELAB_JSON"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings = load_settings()
    assert (settings.event_loop, settings.json_parser) == (loop, parser)


def test_importing_the_load_generator_reads_no_environment() -> None:
    """SERVELAB_JSON used to be read at import time: now a run's choice is what it passes."""
    pytest.importorskip("orjson")
    pytest.importorskip("uvloop")
    code = (
        "from core.load.generator import LoadGenerator\n"
        "with LoadGenerator('http://127.0.0.1:9', 1, 5.0) as gen:\n"
        "    print(gen.event_loop, gen.json_parser)"
    )
    env = {**os.environ, "SERVELAB_JSON": "json", "SERVELAB_EVENT_LOOP": "asyncio"}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True, text=True
    )
    assert out.stdout.split() == ["uvloop", "orjson"], out.stderr
