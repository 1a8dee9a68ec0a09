"""core/engines/registry.py: THE list of engines, their declarations, and the one way to add
one (SERVELAB_ENGINES); an unknown name is an error naming the known ones."""

from __future__ import annotations

import subprocess
import sys

import pytest

from core.config import ServerConfig
from core.engines.registry import (
    engine_for_backend,
    engine_names,
    find_engine,
    get_engine,
    register_engine,
)
from core.errors import ConfigError, EngineUnavailable
from core.settings import ENGINES_VAR, REPO_ROOT, Settings


def test_the_built_in_engines_declare_themselves() -> None:
    assert engine_names()[:3] == ("transformers", "sglang", "endpoint")
    for name in engine_names():
        spec = get_engine(name)
        assert spec.name == name and spec.adapter.startswith("core.engines.")
    assert get_engine("sglang").reports_kv_pool and get_engine("sglang").has_install
    assert not get_engine("endpoint").launched and get_engine("endpoint").needs_endpoint_url


def test_each_knob_says_what_it_acts_on_and_what_it_is_meant_to_cost() -> None:
    sglang = get_engine("sglang")
    mem = sglang.knob("mem_fraction_static")
    assert mem is not None and mem.flag == "--mem-fraction-static"
    assert mem.meant_cost == "reserved_memory_kv_tokens"
    graphs = sglang.knob("cuda_graphs")
    assert graphs is not None and graphs.meant_cost == "graph_memory"
    assert sglang.metric_names("running_reqs") == ("sglang:num_running_reqs",)


def test_an_unknown_engine_is_an_error_never_a_default() -> None:
    with pytest.raises(ConfigError) as info:
        get_engine("tgi")
    assert info.value.field == "server.engine"
    assert "'tgi'" in info.value.message and "transformers, sglang, endpoint" in info.value.message
    with pytest.raises(ValueError, match="unknown engine 'tgi'"):
        ServerConfig(engine="tgi")
    assert find_engine("tgi") is None  # a stored (imported) run of it still reads


def test_a_bad_registration_entry_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENGINES_VAR, "toy")
    with pytest.raises(ConfigError) as info:
        engine_names()
    assert info.value.field == ENGINES_VAR
    monkeypatch.setenv(ENGINES_VAR, "toy=tests.no_such_module")
    with pytest.raises(ConfigError, match="cannot load its declaration"):
        get_engine("toy")


def test_register_engine_adds_one_in_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    from core.engines import registry

    monkeypatch.setattr(registry, "_registered", {})
    register_engine("toy", "tests.toy_engine")
    assert "toy" in engine_names() and get_engine("toy").title == "the toy server"


def test_importers_map_a_backend_word_through_the_registry() -> None:
    assert engine_for_backend("sglang-native") == "sglang"
    assert engine_for_backend("vllm") == "vllm"
    assert engine_for_backend("tgi") is None


def test_an_engine_without_logprobs_says_why(settings: Settings) -> None:
    from core.engines import get_adapter

    adapter = get_adapter("transformers", settings)
    with pytest.raises(EngineUnavailable, match="logprobs null"):
        adapter.logprobs_request("m", "hi", 2, 1)
    assert get_engine("transformers").logprobs.path is None


def test_reading_the_declarations_reaches_no_run_or_load_module() -> None:
    """core.config validates an engine through the registry, so what the registry imports
    is imported by every reader of a spec, the analysis path included."""
    code = (
        "import sys; from core.config import ServerConfig; from core.engines.registry import "
        "engine_names, get_engine\n"
        "[get_engine(n) for n in engine_names()]\n"
        "ServerConfig(engine='endpoint', endpoint_url='http://127.0.0.1:1')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[:2] in (['core', 'run'], "
        "['core', 'load'])))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_each_engine_module_and_base_module_imports_first_in_a_fresh_process() -> None:
    """The set-up converts the model by importing core.engines.model_setup first, and a run
    imports an engine module first: a default ServerConfig built at import time once asked the
    registry for an engine whose module was still half-imported (the set-up then failed)."""
    core = REPO_ROOT / "core"
    modules = [
        f"core.{p.stem}" for p in sorted(core.glob("*.py")) if p.stem not in ("__main__",)
    ] + [f"core.engines.{p.stem}" for p in sorted((core / "engines").glob("*.py"))]
    code = (
        "import subprocess, sys\n"
        "bad = [m for m in sys.argv[1:] if subprocess.run("
        "[sys.executable, '-c', f'import {m}'], capture_output=True).returncode]\n"
        "print(' '.join(bad))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, *modules],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        check=True,
        timeout=280,
    )
    assert out.stdout.split() == []
