"""What every executor shares: the protocol the worker drives, the run process's argv and
environment, and how a run that stopped without recording its end is closed.

Imports nothing from the other executor modules (they import this), so no cycle.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Sequence
from typing import Any, ClassVar, Protocol

from core.errors import ConfigError, StoreError
from core.run_folder import RunFolder, RunStatus, read_json, utc_now, write_json_atomic
from core.settings import ENGINES_VAR, INSTALLS_VAR, Settings, engine_modules_text, installs_text

__all__ = [
    "EXECUTORS",
    "RAY_CLUSTER_FILE",
    "RAY_NODES_FILE",
    "Executor",
    "check_executor",
    "end_unfinished",
    "ray_address",
    "ray_cluster_report",
    "run_argv",
    "run_env",
    "save_ray_nodes",
]

EXECUTORS = ("local", "ray")
"""Every executor's name (``SERVELAB_EXECUTOR``, ``spec.placement.executor``); the classes
are in ``core.executors.registry``."""


def check_executor(name: str, field: str = "SERVELAB_EXECUTOR") -> str:
    """``name`` when it names an executor, else a ConfigError naming ``field`` and the
    allowed values (an unknown name must not quietly run locally)."""
    if name not in EXECUTORS:
        raise ConfigError(field, f"unknown executor {name!r}; allowed: {', '.join(EXECUTORS)}")
    return name


RAY_CLUSTER_FILE = "ray-cluster.json"  # in the data folder: the address set in the portal
# in the data folder: the GPUs of each live node, as the worker's Ray connection last saw them
RAY_NODES_FILE = "ray-nodes.json"


def ray_address(settings: Settings) -> str | None:
    """The Ray cluster to use: the one set in the portal (data/ray-cluster.json), else
    SERVELAB_RAY_ADDRESS; None when neither is set."""
    try:
        saved = read_json(settings.data_dir / RAY_CLUSTER_FILE)
    except Exception:
        saved = None
    if isinstance(saved, dict) and isinstance(saved.get("address"), str) and saved["address"]:
        return str(saved["address"])
    return settings.ray_address


def ray_cluster_report(settings: Settings) -> list[int] | None:
    """The GPU count of each live node of the Ray cluster at the address now set, as the
    worker last saw them (``RayExecutor`` writes it on connecting and on each placement
    check); None before any report, or when it is of another address."""
    try:
        saved = read_json(settings.data_dir / RAY_NODES_FILE)
    except Exception:
        return None
    if not isinstance(saved, dict) or saved.get("address") != ray_address(settings):
        return None
    nodes = saved.get("node_gpus")
    if not isinstance(nodes, list) or not all(isinstance(n, int | float) for n in nodes):
        return None
    return [int(n) for n in nodes]


def save_ray_nodes(settings: Settings, address: str, nodes: Sequence[dict[str, Any]]) -> None:
    """Record what ``ray.nodes()`` says of the live nodes' GPUs (for ``ray_cluster_report``);
    a data folder that cannot be written is no error: the report is only a hint."""
    gpus = [int((n.get("Resources") or {}).get("GPU", 0)) for n in nodes if n.get("Alive")]
    with contextlib.suppress(OSError, StoreError):
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        write_json_atomic(
            settings.data_dir / RAY_NODES_FILE,
            {"address": address, "node_gpus": gpus, "saved_at": utc_now()},
        )


def run_argv(run_id: str) -> list[str]:
    """The run process of a prepared folder, on any host (cwd: a ServeLab checkout)."""
    return [sys.executable, "-m", "core", "run", "--run-id", run_id, "--quiet"]


def run_env(settings: Settings) -> dict[str, str]:
    """The ``SERVELAB_*`` settings a run process gets from whoever starts it (the data
    folder is the starter's: a Ray node sets its scratch folder instead)."""
    return {
        "SERVELAB_DATA_DIR": str(settings.data_dir),
        "SERVELAB_MODEL_ROOTS": os.pathsep.join(map(str, settings.model_roots)),
        "SERVELAB_SGLANG_PYTHON": settings.sglang_python,
        "SERVELAB_TRANSFORMERS_PYTHON": settings.transformers_python,
        # every named installation, so a run process (a Ray node's too, whose data folder
        # is a scratch one) resolves server.engine_install as its starter did
        INSTALLS_VAR: installs_text(settings.engine_installs),
        # engines registered besides the built-in ones (core/engines/registry.py)
        ENGINES_VAR: engine_modules_text(),
    }


def end_unfinished(
    folder: RunFolder,
    why: str,
    *,
    step_why: str | None = None,
    note: str = "",
    tail: str = "",
    **extra: Any,
) -> RunStatus:
    """End a run whose process stopped without recording its end: ``cancelled`` when a
    cancel had been asked for, else ``interrupted`` (``note`` added to that reason only;
    ``tail`` to both). Steps still running are marked failed with
    ``interrupted: <step_why or why>``."""
    if folder.cancel_requested:
        return folder.end(
            "cancelled", f"cancelled on request; {why}{tail}", interrupted=step_why or why, **extra
        )
    return folder.end("interrupted", f"{why}{note}{tail}", interrupted=step_why or why, **extra)


class Executor(Protocol):
    """Where queued runs execute. The worker thread calls every method but ``running``
    (any thread) and the class methods (any process, no worker needed)."""

    name: ClassVar[str]
    runs_here: ClassVar[bool]  # its run processes are processes of this host
    error: str  # the last poll's problems, for the worker's snapshot ("" when none)

    def admit(self, queued: Sequence[RunFolder]) -> tuple[list[str], bool]:
        """Start what may start of these queued folders (queue order). Returns the ids
        still waiting, and whether some folder changed."""
        ...

    def adopt(self, folder: RunFolder, status: RunStatus) -> bool:
        """A running folder of this executor it does not track (a portal restart, a CLI
        run): watch it, or end it when it is gone. True when the folder changed."""
        ...

    def poll(self) -> bool:
        """Advance the tracked runs; True when some folder changed."""
        ...

    def tracks(self, run_id: str) -> bool: ...

    def running(self) -> list[dict[str, Any]]:
        """The tracked runs: ``run_id``, ``gpus``, ``pid``, ``attached`` (+ where)."""
        ...

    def describe(self, folder: RunFolder, status: RunStatus) -> dict[str, Any]:
        """A running folder another worker runs, as ``running`` lists it."""
        ...

    def close(self) -> None:
        """Stop watching (the runs keep running: a later worker adopts them)."""
        ...

    @classmethod
    def cancel_running(cls, settings: Settings, folder: RunFolder, status: RunStatus) -> str:
        """Pass a cancel on to a running run (its CANCEL file is written); a message."""
        ...

    @classmethod
    def recover(cls, settings: Settings, folders: Sequence[RunFolder]) -> list[str]:
        """At a portal's start: end this executor's runs among ``folders`` (running)
        whose process is gone; the ids it ended."""
        ...
