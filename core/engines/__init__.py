"""Engine adapters, one module each; ``get_adapter`` picks one by name."""

from __future__ import annotations

from core.config import EngineName
from core.engines.base import EngineAdapter, EngineInfo, LaunchPlan
from core.settings import Settings

__all__ = ["ENGINES", "EngineAdapter", "EngineInfo", "LaunchPlan", "get_adapter"]

ENGINES: tuple[EngineName, ...] = ("transformers", "sglang", "endpoint")


def get_adapter(name: EngineName, settings: Settings) -> EngineAdapter:
    # Imported here so that using one engine never imports another's dependencies.
    if name == "transformers":
        from core.engines.transformers_serve import TransformersServeAdapter

        return TransformersServeAdapter(settings.transformers_python, settings.models_dir)
    if name == "sglang":
        from core.engines.sglang import SGLangAdapter

        return SGLangAdapter(settings.sglang_python)
    from core.engines.endpoint import EndpointAdapter

    return EndpointAdapter()
