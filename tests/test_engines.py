"""Every engine adapter satisfies the protocol the run pipeline calls (core/engines/base.py):
the required methods, and the optional hooks with their default behaviour, so the pipeline
never asks whether an adapter has them."""

from __future__ import annotations

import pytest

from core.engines import engine_names, get_adapter
from core.engines.base import EngineAdapter
from core.engines.endpoint import EndpointAdapter
from core.engines.sglang import SGLangAdapter
from core.engines.transformers_serve import TransformersServeAdapter
from core.settings import Settings


@pytest.mark.parametrize("name", engine_names())
def test_every_adapter_satisfies_the_protocol(name: str, settings: Settings) -> None:
    adapter = get_adapter(name, settings)
    assert isinstance(adapter, EngineAdapter)
    assert adapter.name == name
    hooks = (adapter.detect, adapter.plan_launch, adapter.collect_facts, adapter.failure_in_log)
    assert all(callable(h) for h in (*hooks, adapter.choose_exact_length))
    assert isinstance(adapter.asks_exact_length, bool)


def test_the_hooks_default_to_doing_nothing(settings: Settings) -> None:
    adapter = TransformersServeAdapter(
        settings.transformers_python, settings.models_dir, settings.data_dir / "cache"
    )
    assert adapter.failure_in_log("Traceback ... CUDA out of memory") is None
    assert not adapter.asks_exact_length
    assert adapter.choose_exact_length("http://127.0.0.1:1", "m", None, 1.0) is None


def test_only_the_endpoint_asks_the_server_for_exact_lengths(settings: Settings) -> None:
    assert EndpointAdapter().asks_exact_length
    assert not SGLangAdapter(settings.sglang_python).asks_exact_length
    # SGLang's own hook overrides the default
    assert SGLangAdapter(settings.sglang_python).failure_in_log(
        "Exception: Capture cuda graph failed: CUDA out of memory."
    )
