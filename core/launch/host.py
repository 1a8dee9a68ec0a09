"""What this host can run: GPUs, engines and their versions (for the launch form's
defaults and the reasons a choice is unavailable)."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from core.engines import ENGINES, EngineInfo, get_adapter
from core.executors import ray_address
from core.run.gpu import gpu_memory
from core.settings import Settings

__all__ = ["HostInfo", "detect_host", "launch_host"]


@dataclass(frozen=True)
class HostInfo:
    gpus: tuple[str, ...]
    engines: dict[str, EngineInfo]

    @property
    def has_gpu(self) -> bool:
        return bool(self.gpus)

    def unavailable(self, engine: str) -> str | None:
        """Why an engine cannot be used here, in words; None when it can."""
        info = self.engines.get(engine)
        if info is None or not info.installed:
            why = info.reason if info else "unknown engine"
            if engine == "sglang":
                return (
                    "SGLang is not installed here (GPU hosts only): see README, 'Engines'. " + why
                ).strip()
            return why or f"{engine} is not installed"
        return None

    @property
    def cuda_graphs_reason(self) -> str | None:
        """Why CUDA graphs cannot be compared here; None when they can."""
        if not self.has_gpu:
            return "CUDA graphs need an NVIDIA GPU; this host has none"
        return None


@functools.lru_cache(maxsize=2)
def _detect(settings: Settings) -> HostInfo:
    engines: dict[str, EngineInfo] = {n: get_adapter(n, settings).detect() for n in ENGINES}
    gpus = tuple(f"{g['gpu']}: {g['name']}" for g in gpu_memory())
    return HostInfo(gpus=gpus, engines=engines)


def detect_host(settings: Settings, refresh: bool = False) -> HostInfo:
    """Detected once per process (engine detection runs subprocesses)."""
    if refresh:
        _detect.cache_clear()
    return _detect(settings)


def launch_host(settings: Settings, host: HostInfo, executor: str) -> HostInfo:
    """What a launch form is checked against. Local runs: this host. Ray runs: the
    cluster, whose GPUs and engines are on its nodes: nothing is refused here because this
    host lacks them (each run's preflight checks its engine on its node, and the Ray
    dispatcher fails a run no node has enough GPUs for)."""
    if executor != "ray":
        return host
    return HostInfo(
        gpus=(f"Ray cluster {ray_address(settings) or '?'}",),
        engines={n: EngineInfo(n, True, reason="checked on the Ray node") for n in ENGINES},
    )
