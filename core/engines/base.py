"""What every engine adapter provides to the run pipeline.

An adapter turns a validated ``ServerConfig`` into an argv list (never a shell
string), says how to tell the server is ready, and reads the facts the server
reports about itself. One module per engine, each declaring itself in its
``ENGINE = EngineSpec(...)`` (core/engines/declare.py) and listed by
core/engines/registry.py; docs/ENGINES.md "Adding an engine".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from typing import Self

    from core.config import ServerConfig
    from core.settings import Settings

__all__ = ["EngineAdapter", "EngineInfo", "ExactLength", "LaunchPlan", "TokenLogprob"]

# (mechanism, request fields, why in words): how a server was made to generate exactly
# max_tokens (core/engines/endpoint.py asks it).
ExactLength = tuple[str, dict[str, Any], str]


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token's log probability, and the most likely alternatives at its
    position (token text → logprob) where the server gave them."""

    token: str
    logprob: float
    top: dict[str, float] = field(default_factory=dict)
    token_id: int | None = None  # where the server gave ids (SGLang's /generate)
    top_ids: dict[int, float] = field(default_factory=dict)


@dataclass(frozen=True)
class EngineInfo:
    """What is installed on this host for one engine."""

    name: str
    installed: bool
    version: str | None = None
    reason: str = ""  # why it is not installed / what is missing, in words
    options: frozenset[str] = frozenset()  # the CLI flags the installed version knows
    # environment variables the installed version reads that a launch may set (SGLang's
    # SGLANG_SIMULATE_UNIFORM_EXPERTS): an older release silently ignores one it lacks
    env_vars: frozenset[str] = frozenset()
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


@runtime_checkable
class EngineAdapter(Protocol):
    """Every adapter subclasses this, so the optional hooks below have their default
    behaviour without the pipeline asking whether an adapter has them."""

    name: str
    # True: the exact-length request fields are found by asking the running server
    # (``choose_exact_length``), not known from the launch plan (the endpoint engine).
    asks_exact_length: bool = False

    @classmethod
    def from_settings(cls, settings: Settings, install: str | None) -> Self:
        """The adapter for this host's settings and the named installation ``install``
        (None: the default one); the registry builds every adapter through this."""
        return cls()

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

    def failure_in_log(self, log_text: str) -> str | None:
        """Why start-up failed, in words, when the server log shows a known failure;
        None (the default) when the log says nothing this adapter knows."""
        return None

    def choose_exact_length(
        self, base_url: str, model: str, headers: dict[str, str] | None, timeout_s: float
    ) -> ExactLength | None:
        """For an adapter that ``asks_exact_length``: which request fields the running
        server honours. None (the default): the plan's ``exact_length_body`` stands."""
        return None

    def logprobs_request(
        self, model: str, prompt: str | Sequence[int], max_tokens: int, top_n: int
    ) -> tuple[str, dict[str, Any]]:
        """(path, JSON body) asking the server to decode ``prompt`` (text, or token ids where
        ``ENGINE.logprobs.token_ids``) greedily, with the log probability of each generated
        token and its ``top_n`` alternatives. EngineUnavailable (the default) when the
        engine returns none: its ``ENGINE.logprobs.why`` says why."""
        from core.engines.registry import get_engine
        from core.errors import EngineUnavailable

        raise EngineUnavailable(get_engine(self.name).logprobs.why or "no token logprobs")

    def parse_logprobs(self, body: dict[str, Any]) -> list[TokenLogprob]:
        """The generated tokens' log probabilities in the answer to ``logprobs_request``;
        ValueError when ``body`` does not have them."""
        raise ValueError(f"{self.name} returns no token logprobs")

    def score_request(
        self, model: str, prompt_ids: Sequence[int], continuation_ids: Sequence[int], top_n: int
    ) -> tuple[str, dict[str, Any]]:
        """(path, JSON body) asking the log probability of each of ``continuation_ids``
        after ``prompt_ids`` (teacher forcing: the prompt's own logprobs), where
        ``ENGINE.logprobs.scores``; EngineUnavailable (the default) otherwise."""
        from core.errors import EngineUnavailable

        raise EngineUnavailable(f"{self.name} does not score given tokens (no prompt logprobs)")

    def parse_score(self, body: dict[str, Any], count: int) -> list[TokenLogprob]:
        """The last ``count`` prompt tokens' log probabilities in the answer to
        ``score_request``; ValueError when ``body`` does not have them."""
        raise ValueError(f"{self.name} returns no prompt logprobs")
