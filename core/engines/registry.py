"""THE list of engines: name → the module that declares it (``ENGINE = EngineSpec(...)``).

Nothing outside ``core/engines`` names an engine in code: it asks here. Built-in engines
are below; another one is added by one registration, either ``register_engine`` in this
process or an entry of ``SERVELAB_ENGINES`` (``NAME=MODULE;...``, core/settings.py) that
every process started from this one sees too (a run is its own ``python -m core run``).
An unknown name is a ConfigError naming ``server.engine`` and the known ones, never a
silent fallback. A module is imported when its engine is first asked about, and its
adapter class only when the engine is used (``adapter_class``), so using one engine never
imports another's dependencies.
"""

from __future__ import annotations

import importlib
import threading
from typing import Any

from core.engines.declare import EngineSpec
from core.errors import ConfigError

__all__ = [
    "DEFAULT_ENGINE",
    "adapter_class",
    "engine_for_backend",
    "engine_names",
    "engines_with_knob",
    "find_engine",
    "get_engine",
    "known_engine",
    "register_engine",
]

# name → module defining ENGINE; the order is the order the Launch page and `engines` list.
_BUILTIN: dict[str, str] = {
    "transformers": "core.engines.transformers_serve",
    "sglang": "core.engines.sglang",
    "endpoint": "core.engines.endpoint",
    "vllm": "core.engines.vllm",
}
# The engine a form or a spec without one gets: the one that runs anywhere.
DEFAULT_ENGINE = "transformers"

_registered: dict[str, str] = {}
_loaded: dict[str, EngineSpec] = {}
_lock = threading.Lock()


def register_engine(name: str, module: str) -> None:
    """Add engine ``name`` declared by ``module`` (its ``ENGINE``) to this process. A run
    process started from here does not inherit it: use ``SERVELAB_ENGINES`` for that."""
    with _lock:
        _registered[name] = module
        _loaded.pop(name, None)


def _from_environment() -> dict[str, str]:
    from core.settings import ENGINES_VAR, engine_modules_text

    out: dict[str, str] = {}
    for entry in engine_modules_text().split(";"):
        if not entry.strip():
            continue
        name, sep, module = entry.partition("=")
        if not sep or not name.strip() or not module.strip():
            raise ConfigError(
                ENGINES_VAR, f"entry {entry!r}: give NAME=MODULE, e.g. myengine=pkg.engine"
            )
        out[name.strip()] = module.strip()
    return out


def _modules() -> dict[str, str]:
    return {**_BUILTIN, **_from_environment(), **_registered}


def engine_names() -> tuple[str, ...]:
    """Every engine this process knows, built-in ones first."""
    return tuple(_modules())


def known_engine(name: str) -> bool:
    return name in _modules()


def get_engine(name: str) -> EngineSpec:
    """The declarations of engine ``name``; ConfigError on ``server.engine`` for a name no
    registration knows, listing the known ones."""
    modules = _modules()
    module = modules.get(name)
    if module is None:
        raise ConfigError(
            "server.engine",
            f"unknown engine {name!r}; known engines: {', '.join(modules)} "
            "(another one is registered with SERVELAB_ENGINES, docs/ENGINES.md)",
        )
    with _lock:
        if name in _loaded:
            return _loaded[name]
    try:
        spec = importlib.import_module(module).ENGINE
    except (ImportError, AttributeError) as exc:
        raise ConfigError(
            "server.engine", f"engine {name!r}: cannot load its declaration from {module}: {exc}"
        ) from exc
    if not isinstance(spec, EngineSpec) or spec.name != name:
        raise ConfigError("server.engine", f"{module}.ENGINE must be an EngineSpec named {name!r}")
    with _lock:
        _loaded[name] = spec
    return spec


def find_engine(name: str | None) -> EngineSpec | None:
    """The declarations of a stored run's engine; None for one no registration here knows
    (an imported run's "tgi", an engine registered in another process only): its run still reads,
    with what needs the declarations left out."""
    if name is None or not known_engine(name):
        return None
    try:
        return get_engine(name)
    except ConfigError:
        return None


def engines_with_knob(knob: str) -> tuple[str, ...]:
    """The engines that declare ``knob`` (a ServerConfig field), e.g. for a form's label."""
    return tuple(n for n in engine_names() if knob in get_engine(n).knob_names)


def engine_for_backend(backend: str) -> str | None:
    """The engine another tool's result file means by ``backend`` (bench_serving's
    --backend), from each engine's ``bench_backends``; None when none claims it."""
    return next((n for n in engine_names() if backend in get_engine(n).bench_backends), None)


def adapter_class(name: str) -> Any:
    """The adapter class of engine ``name`` (imported now: the engine is about to be used);
    a subclass of core.engines.base.EngineAdapter (not named here: this module is the shared
    vocabulary's and imports no adapter code)."""
    spec = get_engine(name)
    module, _, cls = spec.adapter.partition(":")
    found = getattr(importlib.import_module(module), cls, None)
    if not (isinstance(found, type) and callable(getattr(found, "from_settings", None))):
        raise ConfigError("server.engine", f"{spec.adapter} is not an EngineAdapter subclass")
    return found
