"""Executor name -> class. The one place that maps the names in ``base.EXECUTORS`` to the
modules that run them (imported on first use: Ray's only when a Ray run appears)."""

from __future__ import annotations

from core.executors.base import EXECUTORS, Executor, check_executor
from core.run_folder import RunStatus

__all__ = ["executor_class", "executor_of", "runs_here"]


def executor_class(name: str, field: str = "SERVELAB_EXECUTOR") -> type[Executor]:
    """The class of executor ``name``; ConfigError naming ``field`` when there is none."""
    check_executor(name, field)
    if name == "local":
        from core.executors.local import LocalExecutor

        return LocalExecutor
    from core.executors.ray import RayExecutor

    return RayExecutor


def executor_of(status: RunStatus) -> str:
    """The executor of a run that has started (or was handed on): what its status.json
    records, else local (runs of every version before executors were recorded)."""
    return status.executor if status.executor in EXECUTORS else "local"


def runs_here(name: str) -> bool:
    """Whether executor ``name`` runs its run processes on this host (the CLI runs those
    in its own process; the others it queues and waits for)."""
    return executor_class(name).runs_here
