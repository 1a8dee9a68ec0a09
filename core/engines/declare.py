"""What an engine declares about itself: plain frozen data, readable without starting,
detecting or importing the engine.

Each engine module defines one ``ENGINE = EngineSpec(...)`` beside its adapter class;
``core.engines.registry`` finds it by name. This module and the registry import nothing
but the standard library and ``core.errors``, so the shared vocabulary (``core.config``
validating a ``ServerConfig``) and the analysis path (the server view, the memory ledger,
the knob checks) can read an engine's declarations without reaching the run or load path.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = ["EngineSpec", "KnobSpec", "LogprobSupport"]

# What a knob is meant to cost, in the memory ledger's terms (core/analysis/ledger.py
# knob_cost reads it): memory reserved up front that buys KV tokens, or memory CUDA graphs
# take; "" when the knob has no memory side.
COSTS = ("reserved_memory_kv_tokens", "graph_memory", "")


@dataclass(frozen=True)
class KnobSpec:
    """One ``ServerConfig`` field this engine honours.

    ``flag``: the CLI flag it maps to (None: not passed to a process, e.g. recorded only);
    ``resource``: what it acts on, in words (the knob checks ask whether the workload
    reached it); ``meant_cost``: one of ``COSTS``, what it is meant to cost, so a verdict
    can say "its cost, not a regression"."""

    name: str
    flag: str | None
    resource: str
    meant_cost: str = ""

    def __post_init__(self) -> None:
        if self.meant_cost not in COSTS:
            raise ValueError(f"meant_cost must be one of {COSTS}, got {self.meant_cost!r}")


@dataclass(frozen=True)
class LogprobSupport:
    """How the engine returns token log probabilities (the adapter's ``logprobs_request``
    and ``parse_logprobs`` do it). ``path`` None: not supported, ``why`` says why."""

    path: str | None
    fields: tuple[str, ...] = ()  # the request fields that ask for them
    why: str = ""
    token_ids: bool = False  # takes a prompt as token ids (random-weight prompt sets)
    scores: bool = False  # scores given tokens (prompt logprobs): teacher forcing


@dataclass(frozen=True)
class EngineSpec:
    """An engine's declarations. ``adapter`` is ``"module:Class"``, imported only when the
    engine is used, so declaring an engine never imports its dependencies."""

    name: str
    title: str  # how people write it: "SGLang"
    adapter: str
    # False: nothing is launched (an already-running server reached by endpoint_url).
    launched: bool = True
    needs_endpoint_url: bool = False
    # Which Settings attribute holds its default Python (None: the one running ServeLab);
    # named installations (data/engine-installs.json) exist only for engines that have one.
    python_setting: str | None = None
    has_install: bool = False
    install_hint: str = ""  # how to install it, in words (the Launch page's refusal)
    # The server reports its KV pool after start-up (facts.json kv_cache_tokens), so a
    # point's kv_fill can be sized from it; otherwise kv_fill is refused when queued.
    reports_kv_pool: bool = False
    knobs: tuple[KnobSpec, ...] = ()
    # How it loads a model shape with random weights, no weight files (server.shape,
    # core/shapes.py): the flags it adds; () when it cannot (preflight refuses a shape).
    dummy_weights_args: tuple[str, ...] = ()
    # The environment variable that makes an MoE shape's routing uniform (None: it cannot).
    uniform_experts_env: str | None = None
    # role → the /metrics names the server view reads for it, first found wins
    # (core/analysis/timelines.py and server_view.py).
    server_metrics: Mapping[str, tuple[str, ...]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    # ledger field → the facts.json key that states it (core/analysis/ledger.py).
    memory_facts: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    logprobs: LogprobSupport = LogprobSupport(None, why="not declared")
    # The names other tools' result files give this engine (bench_serving's --backend),
    # so an importer maps what it parsed to an engine through the registry.
    bench_backends: tuple[str, ...] = ()
    # What the engine does where ServeLab sets nothing (name → in words): part of an arm's
    # configuration when arms differ by engine, never a confounder (core/analysis/engines.py).
    defaults: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def knob(self, name: str) -> KnobSpec | None:
        return next((k for k in self.knobs if k.name == name), None)

    @property
    def knob_names(self) -> frozenset[str]:
        return frozenset(k.name for k in self.knobs)

    def metric_names(self, role: str) -> tuple[str, ...]:
        return tuple(self.server_metrics.get(role, ()))
