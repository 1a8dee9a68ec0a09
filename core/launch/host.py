"""What this host (or the chosen executor's cluster) can run: GPUs, engines and their
versions, for the launch form's defaults and THE check of whether a run can run where it is
sent (``HostInfo.cannot_run``: engine installed, a GPU when the run needs one), asked before
anything is queued by the Launch form, the grid and Explain."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from core.config import EngineName, RunSpec
from core.engines import ENGINES, EngineInfo, get_adapter
from core.executors import ray_address, ray_cluster_report
from core.run.gpu import gpu_memory
from core.settings import Settings

__all__ = ["HostInfo", "detect_host", "gpu_need", "host_for", "launch_host", "runnable_problems"]

_HOW_TO_GPU = (
    "run it on the Ray executor with a GPU node (Launch page, Executor: ray), or on a host "
    "with an NVIDIA GPU"
)


def gpu_need(spec: RunSpec) -> tuple[str, int] | None:
    """(the field that asks for it, how many GPUs) when the run needs GPUs; None when it can
    run on a CPU. SGLang on ``auto`` is not counted: it may be the CPU backend."""
    server = spec.server
    if server.tp_size > 1:
        return "server.tp_size", server.tp_size
    if server.device.startswith("cuda"):
        return "server.device", 1
    return None


@dataclass(frozen=True)
class HostInfo:
    gpus: tuple[str, ...]
    engines: dict[str, EngineInfo]
    where: str = "this host"  # in refusals: "this host has no GPU"
    # GPUs on the largest node (Ray: what the cluster reported); None: not known, no
    # GPU-count refusal (the Ray dispatcher still fails a run no node can place)
    gpus_per_node: int | None = None

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
                    f"SGLang is not installed on {self.where} (GPU hosts only): {_HOW_TO_GPU} "
                    "that has SGLang, or install it there (`pip install -r "
                    "requirements-sglang.txt`, or SERVELAB_SGLANG_PYTHON; README, 'Engines'). "
                    + why
                ).strip()
            return why or f"{engine} is not installed"
        return None

    def cannot_run(self, spec: RunSpec) -> dict[str, str]:
        """{field: why, and how to get it} for what stops ``spec`` running here; {} when
        nothing does."""
        out: dict[str, str] = {}
        if (why := self.unavailable(spec.server.engine)) is not None:
            out["server.engine"] = why
        need = gpu_need(spec)
        if need is None:
            return out
        field, count = need
        asked = (
            f"{field} {spec.server.tp_size if field == 'server.tp_size' else spec.server.device}"
        )
        if not self.has_gpu:
            out[field] = f"{asked} needs a GPU and {self.where} has none: {_HOW_TO_GPU}"
        elif self.gpus_per_node is not None and count > self.gpus_per_node:
            out[field] = (
                f"{asked} needs {count} GPUs on one node and {self.where} has at most "
                f"{self.gpus_per_node}: lower tp_size, or add a node with {count} GPUs"
            )
        return out

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
    return HostInfo(gpus=gpus, engines=engines, gpus_per_node=len(gpus))


def detect_host(settings: Settings, refresh: bool = False) -> HostInfo:
    """Detected once per process (engine detection runs subprocesses)."""
    if refresh:
        _detect.cache_clear()
    return _detect(settings)


def launch_host(settings: Settings, host: HostInfo, executor: str) -> HostInfo:
    """What a launch is checked against. Local runs: this host. Ray runs: the cluster,
    whose engines are on its nodes (each run's preflight checks its engine there), and whose
    GPUs are what it last reported (``ray_cluster_report``: the nodes' GPU counts, written
    when the worker connects); before any report, no GPU refusal here (the Ray dispatcher
    fails a run no node can place)."""
    if executor != "ray":
        return host
    where = f"the Ray cluster {ray_address(settings) or '?'}"
    engines: dict[str, EngineInfo] = {
        n: EngineInfo(n, True, reason="checked on the Ray node") for n in ENGINES
    }
    report = ray_cluster_report(settings)
    if report is None:
        return HostInfo(gpus=(where,), engines=engines, where=where)
    gpus = tuple(f"node {i}: {n} GPU(s)" for i, n in enumerate(report) if n > 0)
    return HostInfo(gpus=gpus, engines=engines, where=where, gpus_per_node=max(report, default=0))


@functools.lru_cache(maxsize=8)
def _detect_one(settings: Settings, engine: EngineName) -> EngineInfo:
    return get_adapter(engine, settings).detect()


def host_for(settings: Settings, executor: str, engines: Iterable[EngineName]) -> HostInfo:
    """``launch_host`` detecting only ``engines`` here (a CLI or Explain check need not
    import every engine's CLI); detection is remembered per process."""
    if executor == "ray":
        return launch_host(settings, HostInfo((), {}), executor)
    gpus = tuple(f"{g['gpu']}: {g['name']}" for g in gpu_memory())
    found: dict[str, EngineInfo] = {e: _detect_one(settings, e) for e in dict.fromkeys(engines)}
    return HostInfo(
        gpus=gpus,
        engines=found,
        gpus_per_node=len(gpus),
    )


def runnable_problems(specs: Sequence[RunSpec], host: HostInfo) -> dict[str, str]:
    """Every field any of ``specs`` cannot run with on ``host`` (first reason per field)."""
    out: dict[str, str] = {}
    for spec in specs:
        for field, why in host.cannot_run(spec).items():
            out.setdefault(field, why)
    return out
