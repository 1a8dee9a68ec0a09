"""What this host (or the chosen executor's cluster) can run: GPUs, engines and their
versions, for the launch form's defaults and THE check of whether a run can run where it is
sent (``HostInfo.cannot_run``: engine installed, a GPU when the run needs one), asked before
anything is queued by THE gate (core/launch/preflight.py), which every door calls."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass, field

from core.analysis.noise import Fingerprint, fingerprint
from core.config import EngineName, RunSpec, ServerConfig
from core.engines import EngineInfo, engine_names, get_adapter
from core.engines.registry import get_engine, known_engine
from core.errors import ConfigError
from core.executors import ray_address, ray_cluster_report
from core.run.gpu import gpu_memory
from core.run.machine import cpu_model
from core.settings import Settings

__all__ = [
    "HostInfo",
    "detect_host",
    "gpu_need",
    "host_for",
    "launch_host",
]

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
    # The named installations detected (name → what it is: EngineInfo.name is its engine);
    # a name missing here is not configured where the run goes.
    installs: dict[str, EngineInfo] = field(default_factory=dict)
    # False where engines are checked on the node (Ray): no knob is checked against an
    # option list here.
    checks_knobs: bool = True
    cpu: str | None = None  # the CPU model (core.run.machine.cpu_model); None: not known

    def fingerprint(self, server: ServerConfig) -> Fingerprint | None:
        """The fingerprint runs of ``server`` would have here (``core.analysis.noise``):
        this machine's GPUs and CPU, the server's engine and installation (its version is
        known once it runs). None for a cluster: which node runs it is not known."""
        if self.where != "this host":
            return None
        return fingerprint(
            {
                "gpus": [g.partition(": ")[2] for g in self.gpus],
                "cpu_model": self.cpu,
                "engine": server.engine,
                "engine_install": server.engine_install,
            }
        )

    def info_for(self, server: ServerConfig) -> EngineInfo | None:
        """What was detected of the installation ``server`` asks for (its engine's default
        one, or ``server.engine_install``); None when it is not known here."""
        if server.engine_install is None:
            return self.engines.get(server.engine)
        return self.installs.get(server.engine_install)

    @property
    def has_gpu(self) -> bool:
        return bool(self.gpus)

    def unavailable(self, engine: str) -> str | None:
        """Why an engine cannot be used here, in words; None when it can."""
        info = self.engines.get(engine)
        if info is None or not info.installed:
            why = info.reason if info else "unknown engine"
            if known_engine(engine) and (spec := get_engine(engine)).install_hint:
                # what is wrong (and the detector's reason), then what to do
                reason = f" ({why.strip().rstrip('.')})" if why.strip() else ""
                return (
                    f"{spec.title} is not installed on {self.where}{reason}: {_HOW_TO_GPU} "
                    f"that has {spec.title}, or install it there ({spec.install_hint})"
                )
            return why or f"{engine} is not installed"
        return None

    def install_label(self, name: str) -> str:
        """How the Launch form names an installation: "" is the default one."""
        if not name:
            return (
                "default ("
                + ", ".join(
                    f"{e} {i.version}" for e, i in self.engines.items() if i.installed and i.version
                )
                + ")"
            )
        info = self.installs.get(name)
        if info is None:
            return f"{name} (not configured)"
        if not info.installed:
            return f"{name} ({info.name}, unavailable: {info.reason})"
        return f"{name} ({info.name} {info.version or 'version unknown'})"

    def install_unavailable(self, server: ServerConfig) -> str | None:
        """Why ``server.engine_install`` cannot run ``server.engine`` here; None when it can."""
        name = server.engine_install
        info = self.installs.get(name or "")
        if info is None:
            known = ", ".join(self.installs) or "none"
            return (
                f"no engine installation named {name!r} on {self.where} (configured: "
                f"{known}); define it in the data folder's engine-installs.json or "
                "SERVELAB_ENGINE_INSTALLS (README, 'Engines'), or leave it unset for the "
                "default installation"
            )
        if info.name != server.engine:
            return (
                f"{name} is an installation of {info.name}, and server.engine is "
                f"{server.engine}: choose a {server.engine} installation or set "
                f"server.engine={info.name}"
            )
        if not info.installed:
            return f"installation {name} cannot run {info.name} on {self.where}: {info.reason}"
        return None

    def cannot_run(self, spec: RunSpec) -> dict[str, str]:
        """{field: why, and how to get it} for what stops ``spec`` running here; {} when
        nothing does."""
        out: dict[str, str] = {}
        if spec.server.engine_install is not None:
            if (why := self.install_unavailable(spec.server)) is not None:
                out["server.engine_install"] = why
        elif (why := self.unavailable(spec.server.engine)) is not None:
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
    engines: dict[str, EngineInfo] = {n: get_adapter(n, settings).detect() for n in engine_names()}
    installs = {i.name: _detect_install(settings, i.name) for i in settings.engine_installs}
    gpus = tuple(f"{g['gpu']}: {g['name']}" for g in gpu_memory())
    return HostInfo(
        gpus=gpus, engines=engines, gpus_per_node=len(gpus), installs=installs, cpu=cpu_model()
    )


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
        n: EngineInfo(n, True, reason="checked on the Ray node") for n in engine_names()
    }
    # the installations this host names: each run's preflight detects its own on the node
    installs = {
        i.name: EngineInfo(i.engine, True, reason="checked on the Ray node")
        for i in settings.engine_installs
    }
    report = ray_cluster_report(settings)
    if report is None:
        return HostInfo(
            gpus=(where,), engines=engines, where=where, installs=installs, checks_knobs=False
        )
    gpus = tuple(f"node {i}: {n} GPU(s)" for i, n in enumerate(report) if n > 0)
    return HostInfo(
        gpus=gpus,
        engines=engines,
        where=where,
        gpus_per_node=max(report, default=0),
        installs=installs,
        checks_knobs=False,
    )


@functools.lru_cache(maxsize=8)
def _detect_one(settings: Settings, engine: EngineName) -> EngineInfo:
    return get_adapter(engine, settings).detect()


@functools.lru_cache(maxsize=16)
def _detect_install(settings: Settings, name: str) -> EngineInfo:
    """One named installation, detected once per process (its version and option list are
    also cached on disk per interpreter and version: core/engines/detect_cache.py)."""
    install = settings.engine_install(name)
    assert install is not None  # callers name configured installations only
    try:
        return get_adapter(install.engine, settings, name).detect()
    except ConfigError as exc:  # an installation of an engine no registration knows
        return EngineInfo(install.engine, installed=False, reason=exc.message)


def host_for(
    settings: Settings,
    executor: str,
    engines: Iterable[EngineName],
    installs: Iterable[str | None] = (),
) -> HostInfo:
    """``launch_host`` detecting only ``engines`` and the named ``installs`` here (a CLI or
    Explain check need not import every engine's CLI); detection is remembered per
    process. A name not configured is left out: ``cannot_run`` says so."""
    if executor == "ray":
        return launch_host(settings, HostInfo((), {}), executor)
    gpus = tuple(f"{g['gpu']}: {g['name']}" for g in gpu_memory())
    found: dict[str, EngineInfo] = {e: _detect_one(settings, e) for e in dict.fromkeys(engines)}
    named = {
        n: _detect_install(settings, n)
        for n in dict.fromkeys(installs)
        if n is not None and settings.engine_install(n) is not None
    }
    return HostInfo(
        gpus=gpus, engines=found, gpus_per_node=len(gpus), installs=named, cpu=cpu_model()
    )
