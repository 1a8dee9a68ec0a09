"""core/settings.py reads the environment, when asked, and is the only module that reads a
variable by name: the load generator's choices, the portal's access variables and the rest of
Settings, and the few process variables others set (CUDA_VISIBLE_DEVICES, BROWSER_PATH)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from core.portal.access import load_access
from core.settings import REPO_ROOT, Settings, environ_values, load_settings


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


def test_defaults_without_any_variable() -> None:
    s = load_settings({})
    assert s.data_dir == (REPO_ROOT / "data").resolve()
    assert s.sglang_python == s.transformers_python == sys.executable
    assert (s.worker_enabled, s.executor, s.ray_address, s.ray_forward_env) == (
        True,
        "local",
        None,
        (),
    )
    assert (s.bind, s.token_view, s.token_launch, s.launchers, s.viewers) == (
        "127.0.0.1",
        None,
        None,
        (),
        (),
    )
    # engine detection is kept inside the data folder unless SERVELAB_CACHE_DIR says otherwise
    assert s.detect_cache_dir == s.data_dir / "cache"


def test_every_variable_is_read() -> None:
    s = load_settings(
        {
            "SERVELAB_DATA_DIR": "/srv/lab",
            "SERVELAB_WORKER": "off",
            "SERVELAB_EXECUTOR": " Ray ",
            "SERVELAB_RAY_FORWARD_ENV": "A, B,",
            "SERVELAB_MODEL_ROOTS": "/m1:/m2",
            "SERVELAB_BIND": "0.0.0.0",
            "SERVELAB_TOKEN_LAUNCH": "x" * 20,
            "SERVELAB_LAUNCHERS": "Ana@Lab.org, @ops.lab.org",
            "SERVELAB_CACHE_DIR": "/srv/shared-cache",
        }
    )
    # several data folders may share one detection cache
    assert s.detect_cache_dir == Path("/srv/shared-cache")
    assert s.data_dir == Path("/srv/lab") and not s.worker_enabled and s.executor == "ray"
    assert s.ray_forward_env == ("A", "B") and s.model_roots == (Path("/m1"), Path("/m2"))
    assert (s.bind, s.token_launch, s.launchers) == (
        "0.0.0.0",
        "x" * 20,
        ("ana@lab.org", "@ops.lab.org"),
    )
    # the address really bound wins over SERVELAB_BIND
    assert (
        load_access({"SERVELAB_BIND": "0.0.0.0"}, oidc=False, bind="127.0.0.1").bind == "127.0.0.1"
    )
    assert isinstance(s, Settings)


def test_environ_values_names_only_what_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERVELAB_TEST_SET", "1")
    monkeypatch.delenv("SERVELAB_TEST_UNSET", raising=False)
    assert environ_values(["SERVELAB_TEST_SET", "SERVELAB_TEST_UNSET"]) == {
        "SERVELAB_TEST_SET": "1"
    }


def _is_environ(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "environ"


def _named_reads(path: Path) -> list[int]:
    """Lines that read one variable: os.environ.get / os.environ[...] / os.getenv / 'X' in
    os.environ (a whole-environment copy, {**os.environ}, is not a read)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        call = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
        if (
            (call and node.func.attr == "getenv")  # type: ignore[attr-defined]
            or (call and node.func.attr == "get" and _is_environ(node.func.value))  # type: ignore[attr-defined]
            or (isinstance(node, ast.Subscript) and _is_environ(node.value))
            or (isinstance(node, ast.Compare) and any(map(_is_environ, node.comparators)))
        ):
            out.append(node.lineno)
    return out


def test_no_variable_is_read_outside_settings() -> None:
    found = {}
    for path in sorted(
        [*REPO_ROOT.glob("core/**/*.py"), *REPO_ROOT.glob("pages/*.py"), REPO_ROOT / "app.py"]
    ):
        rel = path.relative_to(REPO_ROOT).as_posix()
        if rel != "core/settings.py" and (lines := _named_reads(path)):
            found[rel] = lines
    assert not found, f"environment variables read outside core/settings.py: {found}"
