"""Engine adapters, one module each, found by name through ``core.engines.registry``;
``get_adapter`` builds the one a run uses."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from core.engines.base import EngineAdapter, EngineInfo, LaunchPlan
from core.engines.registry import adapter_class, engine_names, get_engine
from core.errors import ConfigError, EngineUnavailable
from core.settings import Settings

if TYPE_CHECKING:
    # core.config validates an engine name through core.engines.registry, which imports
    # this package first: the config types are imported where they are used.
    from core.config import RunSpec, ServerConfig

__all__ = [
    "EngineAdapter",
    "EngineInfo",
    "LaunchPlan",
    "context_problems",
    "engine_names",
    "get_adapter",
    "get_engine",
    "kv_fill_problems",
    "launch_problems",
    "served_context_tokens",
]

# A port number for checks that build an argv without starting anything.
_CHECK_PORT = 65535


def get_adapter(name: str, settings: Settings, install: str | None = None) -> EngineAdapter:
    """The adapter of engine ``name`` run by its installation ``install`` (a name from
    ``settings.engine_installs``; None: the default one). ConfigError on ``server.engine``
    for an engine no registration knows, on ``server.engine_install`` for an installation
    not configured here or one given to an engine that has none."""
    spec = get_engine(name)
    if install is not None and not spec.has_install:
        raise ConfigError(
            "server.engine_install",
            f"{spec.title} has no named installations; leave server.engine_install unset",
        )
    adapter: EngineAdapter = adapter_class(name).from_settings(settings, install)
    return adapter


def _refusal(exc: ConfigError | EngineUnavailable) -> tuple[str, str]:
    """(field, message) of a plan_launch refusal; EngineUnavailable names its field as a
    ``server.x: ...`` prefix when it is about one knob."""
    if isinstance(exc, ConfigError):
        return exc.field, exc.message
    text = str(exc)
    head, sep, rest = text.partition(": ")
    if sep and head.startswith("server.") and " " not in head:
        return head, rest
    return "server.engine", text


def launch_problems(config: ServerConfig, info: EngineInfo, settings: Settings) -> dict[str, str]:
    """{field: why} for what this engine's preflight (``plan_launch``, the same code) would
    refuse in ``config``, found before anything is queued and without starting anything.
    The knobs and the extra flags are checked apart, so a bad flag is reported together
    with a bad knob instead of after it is fixed. Model locations are core.safety's job:
    a stand-in is passed so that checking never converts or loads a model."""
    from core.config import ServerConfig

    try:
        adapter = get_adapter(config.engine, settings, config.engine_install)
    except ConfigError as exc:
        return {exc.field: exc.message}
    problems: dict[str, str] = {}
    stand_in = "/checking/model"
    try:
        adapter.plan_launch(
            config.model_copy(update={"model": stand_in, "extra_args": ()}), _CHECK_PORT, info
        )
    except (ConfigError, EngineUnavailable) as exc:
        field, message = _refusal(exc)
        problems[field] = message
    if config.extra_args:
        flags_only = ServerConfig.model_construct(
            **{
                **ServerConfig().model_dump(),
                "engine": config.engine,
                "model": stand_in,
                "endpoint_url": config.endpoint_url,
                "device": config.device,
                "extra_args": config.extra_args,
            }
        )
        try:
            adapter.plan_launch(flags_only, _CHECK_PORT, info)
        except (ConfigError, EngineUnavailable) as exc:
            field, message = _refusal(exc)
            if field == "server.extra_args":
                problems[field] = message
    return problems


def served_context_tokens(config: ServerConfig, models_dir: Path) -> int | None:
    """The served model's context length from its config.json (None when its files are not
    here: an endpoint's model, a hub id not downloaded)."""
    from core.engines.model_setup import model_folder
    from core.load.workloads import model_context_tokens

    return model_context_tokens(model_folder(config.model, models_dir))


def context_problems(spec: RunSpec, models_dir: Path) -> dict[str, str]:
    """{field: why} for the points whose requests would exceed the model's context with
    over_context="error", or whose trace cannot be read: found when the point is queued,
    by the same check the run makes when it builds the point's prompts."""
    from core.load.workloads import context_refusal

    context = served_context_tokens(spec.server, models_dir)
    problems: dict[str, str] = {}
    for i, point in enumerate(spec.plan.points):
        try:
            refusal = context_refusal(point, context)
        except ConfigError as exc:  # the trace itself (missing, not Mooncake's shape)
            problems[f"plan.points.{i}.workload.trace"] = exc.message
            continue
        if refusal is not None:
            problems[f"plan.points.{i}.workload.over_context"] = (
                f"plan.points[{i}].workload.over_context is 'error' and {refusal.message}"
            )
    return problems


def kv_fill_problems(spec: RunSpec, settings: Settings) -> dict[str, str]:
    """{field: why} for kv_fill points the run could not size: its engine reports no KV pool
    and the plan gives none (plan.kv_pool). Checked when queued, with every other problem."""
    if spec.plan.kv_pool is not None or get_engine(spec.server.engine).reports_kv_pool:
        return {}
    pool_engines = [n for n in engine_names() if get_engine(n).reports_kv_pool]
    return {
        f"plan.points.{i}.kv_fill": (
            f"kv_fill sizes the load from the server's KV pool, and {spec.server.engine} "
            f"reports none: use an engine that does ({', '.join(pool_engines) or 'none here'}), "
            "give plan.kv_pool.tokens, or leave kv_fill out"
        )
        for i, p in enumerate(spec.plan.points)
        if p.kv_fill is not None
    }
