"""Launch presets: named sets of runs that differ in exactly the intended knob."""

from __future__ import annotations

import math
import secrets
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from core.config import RunSpec
from core.engines.registry import find_engine
from core.errors import StoreError
from core.experiments.design import arm_tag
from core.launch.host import HostInfo
from core.numbers import minutes_text
from core.run_folder import RunFolder
from core.settings import Settings
from core.store import Catalog

__all__ = [
    "ASSUMED_OUTPUT_TOKENS_PER_S",
    "ASSUMED_STARTUP_S",
    "PRESETS",
    "Preset",
    "estimate_text",
    "expand_preset",
    "plan_estimate_s",
    "rough_text",
    "run_estimate",
    "stored_run_estimate",
]

# A first launch has no earlier run here to time: a rough figure from the plan alone, at
# these assumed rates (said beside the figure). They are the shipped CPU demo's
# (SmolLM2-135M on 2 cores: about 30 s from preflight to ready, about 20 output tokens/s per
# request at low concurrency); a GPU server is faster, so the figure errs long there.
ASSUMED_STARTUP_S = 30.0
ASSUMED_OUTPUT_TOKENS_PER_S = 20.0


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    intended: tuple[str, ...]  # the fields the arms differ in
    arms: tuple[tuple[str, dict[str, object]], ...]  # (arm label, server overrides)
    unavailable: Callable[[HostInfo, str], str | None] = lambda _h, _e: None


def _graphs_unavailable(host: HostInfo, engine: str) -> str | None:
    spec = find_engine(engine)
    if spec is None:
        return f"unknown engine {engine!r}"
    if not spec.launched:
        return "an already-running endpoint cannot be restarted with another setting"
    return host.cuda_graphs_reason


def _cb_unavailable(_host: HostInfo, engine: str) -> str | None:
    spec = find_engine(engine)
    if spec is None:
        return f"unknown engine {engine!r}"
    if "continuous_batching" not in spec.knob_names:
        return f"continuous batching is not a switch of {spec.title}"
    return None


PRESETS: tuple[Preset, ...] = (
    Preset(
        "CUDA graphs A/B",
        "two runs identical except the CUDA-graph switch, same prompts",
        ("server.cuda_graphs",),
        (("graphs on", {"cuda_graphs": True}), ("graphs off", {"cuda_graphs": False})),
        _graphs_unavailable,
    ),
    Preset(
        "Continuous batching A/B",
        "transformers serve with and without continuous batching, same prompts",
        ("server.continuous_batching",),
        (
            ("batching on", {"continuous_batching": True}),
            ("batching off", {"continuous_batching": False}),
        ),
        _cb_unavailable,
    ),
    Preset(
        "A/A noise check",
        "the same configuration twice: this host's run-to-run noise",
        (),
        (("A1", {}), ("A2", {})),
    ),
    Preset("Single run", "one run of the configuration below", (), (("run", {}),)),
)


def expand_preset(preset: Preset, base: RunSpec) -> list[RunSpec]:
    """One RunSpec per arm: the base with the arm's overrides, tagged with a shared group."""
    group = "ab-" + secrets.token_hex(3)
    specs = []
    for label, overrides in preset.arms:
        server = base.server.model_copy(update=overrides)
        tags = (*base.tags, group, arm_tag(label)) if len(preset.arms) > 1 else base.tags
        specs.append(
            RunSpec.model_validate(
                {
                    **base.model_dump(),
                    "server": server.model_dump(),
                    "tags": tags,
                    "intended_diff": preset.intended,
                }
            )
        )
    return specs


def estimate_text(
    preset: Preset,
    trials: int,
    history_s: list[float],
    *,
    parallel: bool = False,
    what: str = "",
    spec: RunSpec | None = None,
) -> str:
    """How many runs a launch queues and, from earlier runs like it (``history_s``: the
    durations of finished runs of the same engine and model here, as
    ``Catalog.recent_durations_s`` gives them), about how long they take, in words; shown
    before anything is queued. With none, ``spec``'s plan gives a rough figure at assumed
    rates (``plan_estimate_s``), labelled as such."""
    arms = len(preset.arms)
    runs = arms * trials if arms > 1 else 1
    count = (
        f"{runs} runs ({arms} arms × {trials} trial{'s' if trials != 1 else ''})"
        if arms > 1
        else "1 run"
    )
    if not history_s:
        rough = "" if spec is None else " " + rough_text(spec, runs, parallel)
        return (
            f"{count}. No finished run of {what or 'this engine and model'} here yet to "
            f"estimate from: the first run shows how long one takes.{rough}"
        )
    per_run = statistics.median(history_s)
    total = per_run if parallel else per_run * runs
    how = "in parallel on the cluster" if parallel else "one after another"
    return (
        f"{count}, {how}: about {minutes_text(total)} (median {minutes_text(per_run)} per run "
        f"over the last {len(history_s)} finished run(s) of {what or 'this configuration'})"
    )


def plan_estimate_s(spec: RunSpec) -> float:
    """A rough duration of one run from its plan alone, at the assumed rates above: start-up,
    then per point its waves (requests / concurrency, rounded up) × output tokens at
    ``ASSUMED_OUTPUT_TOKENS_PER_S`` per request, or the time its request rate takes to send
    them when that is longer. The warm-up counts as one more wave."""
    plan = spec.plan
    total_s = ASSUMED_STARTUP_S
    top = max((p.concurrency or 1) for p in plan.points)
    if plan.effective_warmup:
        total_s += (
            math.ceil(plan.effective_warmup / top)
            * min(p.output_len for p in plan.points)
            / ASSUMED_OUTPUT_TOKENS_PER_S
        )
    for point in plan.points:
        n = plan.point_requests(point)[0]
        slots = point.concurrency or n
        decode_s = math.ceil(n / max(slots, 1)) * point.output_len / ASSUMED_OUTPUT_TOKENS_PER_S
        send_s = n / point.request_rate if math.isfinite(point.request_rate) else 0.0
        total_s += max(decode_s, send_s)
    return total_s


def rough_text(spec: RunSpec, runs: int, parallel: bool = False) -> str:
    """``plan_estimate_s`` in words, for a launch with no earlier run to time."""
    per_run = plan_estimate_s(spec)
    total = per_run if parallel else per_run * runs
    return (
        f"Rough estimate from the plan: about {minutes_text(total)}"
        + ("" if runs == 1 else f" ({minutes_text(per_run)} per run)")
        + f", ASSUMING {ASSUMED_STARTUP_S:.0f} s to start and "
        f"{ASSUMED_OUTPUT_TOKENS_PER_S:.0f} output tokens/s per request (this host's own "
        "speed replaces it after the first run)."
    )


def run_estimate(spec: RunSpec, history_s: Sequence[float]) -> tuple[float, str]:
    """How long one run of ``spec`` likely takes and where that figure comes from: the
    median of earlier finished runs of its engine and model here, else the plan at assumed
    rates (``plan_estimate_s``). For the live pages' time left."""
    if history_s:
        return statistics.median(history_s), f"median of {len(history_s)} earlier run(s)"
    return plan_estimate_s(spec), "rough: from the plan at assumed rates"


def stored_run_estimate(settings: Settings, folder: RunFolder) -> tuple[float | None, str]:
    """``run_estimate`` of a queued or running run's folder (earlier runs of its engine and
    model here, else its plan); (None, why) when its spec cannot be read."""
    try:
        spec = folder.spec()
    except (StoreError, ValueError):  # pydantic's ValidationError is a ValueError
        return None, "its spec cannot be read"
    history = Catalog(settings.catalog_path, settings.runs_dir).recent_durations_s(
        spec.server.engine, spec.server.model
    )
    return run_estimate(spec, history)
