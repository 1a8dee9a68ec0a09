"""Launch presets: named sets of runs that differ in exactly the intended knob."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass

from core.config import RunSpec
from core.host import HostInfo

__all__ = ["PRESETS", "Preset", "expand_preset"]


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
    Preset("CUDA graphs A/B", "two runs identical except the CUDA-graph switch, same prompts",
           ("server.cuda_graphs",),
           (("graphs on", {"cuda_graphs": True}), ("graphs off", {"cuda_graphs": False})),
           _graphs_unavailable),
    Preset("Continuous batching A/B",
           "transformers serve with and without continuous batching, same prompts",
           ("server.continuous_batching",),
           (("batching on", {"continuous_batching": True}),
            ("batching off", {"continuous_batching": False})),
           _cb_unavailable),
    Preset("A/A noise check", "the same configuration twice: the noise floor on this host",
           (), (("A1", {}), ("A2", {}))),
    Preset("Single run", "one run of the configuration below", (), (("run", {}),)),
)


def expand_preset(preset: Preset, base: RunSpec) -> list[RunSpec]:
    """One RunSpec per arm: the base with the arm's overrides, tagged with a shared group."""
    group = "ab-" + secrets.token_hex(3)
    specs = []
    for label, overrides in preset.arms:
        server = base.server.model_copy(update=overrides)
        tags = (*base.tags, group, "arm:" + label.replace(" ", "-")) if len(preset.arms) > 1 \
            else base.tags
        specs.append(RunSpec.model_validate({
            **base.model_dump(), "server": server.model_dump(), "tags": tags,
            "intended_diff": preset.intended}))
    return specs
