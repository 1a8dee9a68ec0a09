"""Launch presets: named sets of runs that differ in exactly the intended knob."""

from __future__ import annotations

import secrets
import statistics
from collections.abc import Callable
from dataclasses import dataclass

from core.config import RunSpec
from core.launch.host import HostInfo

__all__ = ["PRESETS", "Preset", "estimate_text", "expand_preset", "minutes_text"]


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    intended: tuple[str, ...]  # the fields the arms differ in
    arms: tuple[tuple[str, dict[str, object]], ...]  # (arm label, server overrides)
    unavailable: Callable[[HostInfo, str], str | None] = lambda _h, _e: None


def _graphs_unavailable(host: HostInfo, engine: str) -> str | None:
    if engine == "endpoint":
        return "an already-running endpoint cannot be restarted with another setting"
    return host.cuda_graphs_reason


def _cb_unavailable(_host: HostInfo, engine: str) -> str | None:
    if engine != "transformers":
        return "continuous batching is a transformers serve switch"
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
        "the same configuration twice: the noise floor on this host",
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
        tags = (
            (*base.tags, group, "arm:" + label.replace(" ", "-"))
            if len(preset.arms) > 1
            else base.tags
        )
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
    preset: Preset, trials: int, history_s: list[float], *, parallel: bool = False, what: str = ""
) -> str:
    """How many runs a launch queues and, from earlier runs like it (``history_s``: the
    durations of finished runs of the same engine and model here, as
    ``Catalog.recent_durations_s`` gives them), about how long they take, in words; shown
    before anything is queued."""
    arms = len(preset.arms)
    runs = arms * trials if arms > 1 else 1
    count = (
        f"{runs} runs ({arms} arms × {trials} trial{'s' if trials != 1 else ''})"
        if arms > 1
        else "1 run"
    )
    if not history_s:
        return (
            f"{count}. No finished run of {what or 'this engine and model'} here yet to "
            "estimate from: the first run shows how long one takes."
        )
    per_run = statistics.median(history_s)
    total = per_run if parallel else per_run * runs
    how = "in parallel on the cluster" if parallel else "one after another"
    return (
        f"{count}, {how}: about {minutes_text(total)} (median {minutes_text(per_run)} per run "
        f"over the last {len(history_s)} finished run(s) of {what or 'this configuration'})"
    )


def minutes_text(seconds: float) -> str:
    """A duration as an estimate says it: seconds below two minutes, else minutes."""
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"
