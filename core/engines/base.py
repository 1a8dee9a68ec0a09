"""What every engine adapter provides to the run pipeline.

An adapter turns a validated ``ServerConfig`` into an argv list (never a shell
string), says how to tell the server is ready, and reads the facts the server
reports about itself. One module per engine: ``transformers_serve``, ``sglang``,
``endpoint``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from core.config import ServerConfig

__all__ = ["EngineAdapter", "EngineInfo", "LaunchPlan"]


@dataclass(frozen=True)
class EngineInfo:
    """What is installed on this host for one engine."""

    name: str
    installed: bool
    version: str | None = None
    reason: str = ""  # why it is not installed / what is missing, in words
    options: frozenset[str] = frozenset()  # the CLI flags the installed version knows
    notes: tuple[str, ...] = ()  # e.g. "CUDA graphs do not apply on CPU"


@dataclass(frozen=True)
class LaunchPlan:
    """How to start and reach one server. ``argv`` is None for an already-running endpoint."""

    argv: list[str] | None
    base_url: str
    health_path: str = "/health"
    env: dict[str, str] = field(default_factory=dict)
    model_name: str | None = None  # the "model" field to send; None = ask /v1/models
    tokenizer_path: str | None = None
    supports_ignore_eos: bool = True
    # Request fields that make the engine generate exactly max_tokens (SGLang: ignore_eos;
    # transformers serve rejects ignore_eos and takes a generation_config instead).
    exact_length_body: dict[str, Any] = field(default_factory=lambda: {"ignore_eos": True})
    supports_flush_cache: bool = False
    notes: tuple[str, ...] = ()  # facts about the launch worth showing, e.g. ignored knobs


class EngineAdapter(Protocol):
    name: str

    def detect(self) -> EngineInfo:
        """Find the installed engine and its CLI options (may run a subprocess)."""
        ...

    def plan_launch(self, config: ServerConfig, port: int, info: EngineInfo) -> LaunchPlan:
        """Validate engine-specific knobs against ``info`` (raise ConfigError /
        EngineUnavailable naming the field) and build the argv."""
        ...

    def collect_facts(self, base_url: str, log_text: str) -> dict[str, Any]:
        """Server facts after ready: KV pool tokens, memory split, graph sizes, version.
        Unknown values are None, never guessed."""
        ...
