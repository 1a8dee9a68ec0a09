"""Executors: where a queued run is executed.

* **local** (the default, ``local.py``): ``python -m core run --run-id ID`` as its own OS
  process on this host, one run per GPU set at a time (``gpu_set`` / ``plan_launches``).
* **ray** (``ray.py``, portal side; ``ray_node.py``, what runs on a Ray node): the run goes
  to an existing Ray cluster as one Ray actor that asks for ``num_gpus`` = the run's
  tensor-parallel size (plus an optional accelerator type); Ray's resource accounting
  replaces the GPU-set lock. The actor runs the very same run process in a scratch folder
  on its node, reports status.json snapshots while it runs, and returns the finished folder
  as a tar that is unpacked into ``data/runs/<run_id>/`` here and indexed like any other.

``base.py`` holds what they share (the ``Executor`` protocol the worker in ``core.executors.worker``
drives, the run process's argv and ``SERVELAB_*`` environment, how a run that stopped
without recording its end is closed); ``registry.py`` maps a name to its class. Which one
runs a run: its ``spec.placement.executor`` when set (the Launch form, ``--executor``),
else ``SERVELAB_EXECUTOR``. Ray is imported only by ``ray.py`` and ``ray_node.py`` and only
when a Ray run is dispatched, so nothing else needs it installed.

This module: the helpers the pages and the CLI use to choose and show where runs go.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from core.config import RunSpec
from core.errors import ConfigError
from core.executors.base import (
    EXECUTORS,
    RAY_CLUSTER_FILE,
    check_executor,
    ray_address,
    ray_cluster_report,
)
from core.executors.registry import runs_here
from core.run_folder import RunFolder, read_json, utc_now, write_json_atomic
from core.settings import Settings

__all__ = [
    "EXECUTORS",
    "executor_for",
    "executor_summary",
    "node_of",
    "placement_fields",
    "ray_address",
    "ray_available",
    "ray_cluster_report",
    "run_nodes",
    "runs_here",
    "save_ray_address",
    "with_executor",
]

# status.json / facts.json keys a Ray run records about where it ran.
placement_fields = ("executor", "node_ip", "node_id", "node_name", "gpu_ids")


def executor_for(spec: RunSpec, settings: Settings) -> str:
    """The executor that runs ``spec``: its own choice, else the host's setting (a
    ConfigError naming SERVELAB_EXECUTOR when that names no executor)."""
    return spec.placement.executor or check_executor(settings.executor)


def ray_available() -> str:
    """ "" when ``import ray`` works here, else why not (for the portal and the CLI)."""
    import importlib.util

    if importlib.util.find_spec("ray") is None:
        return "Ray is not installed here: pip install -r requirements-ray.txt"
    return ""


def node_of(run_dir: Path) -> dict[str, Any]:
    """Where a run ran, from its status.json (``{}`` for a local run): executor, node_ip,
    node_id, node_name, gpu_ids."""
    status = RunFolder(run_dir).status_or_empty()
    if status.executor != "ray":
        return {}
    return status.model_dump(include=set(placement_fields))


def with_executor(spec: RunSpec, executor: str | None) -> RunSpec:
    """``spec`` placed on ``executor`` (None leaves the choice to SERVELAB_EXECUTOR)."""
    if executor not in (None, *EXECUTORS):
        raise ValueError(f"unknown executor {executor!r}; use {' or '.join(EXECUTORS)}")
    return spec.model_copy(
        update={"placement": spec.placement.model_copy(update={"executor": executor})}
    )


def executor_summary(settings: Settings) -> str:
    """One line for the portal: which executor is active, and where Ray is."""
    line = f"executor: {settings.executor}"
    if address := ray_address(settings):
        line += f" · Ray cluster {address}"
        if why := ray_available():
            line += f" ({why})"
    elif settings.executor == "ray":
        line += " (set SERVELAB_RAY_ADDRESS to the cluster's head, e.g. 10.0.0.5:6379)"
    return line


def run_nodes(
    runs_dir: Path, run_ids: Iterable[str], running: Sequence[dict[str, Any]] = ()
) -> dict[str, str]:
    """run id -> "node_ip (GPU ids)" for the Ray runs among ``run_ids``: finished ones from
    their placement.json (one stat per local run), running ones from the worker's snapshot."""
    out: dict[str, str] = {}
    for rid in run_ids:
        path = runs_dir / rid / "placement.json"
        if path.is_file():
            try:
                p = read_json(path)
            except Exception:
                continue
            if isinstance(p, dict):
                out[rid] = (
                    f"{p.get('node_ip')} (GPU {','.join(map(str, p.get('gpu_ids') or [])) or '-'})"
                )
    for job in running:
        if job.get("executor") == "ray" and job.get("node"):
            gpus = ",".join(map(str, job.get("gpus") or [])) or "-"
            out[str(job["run_id"])] = f"{job['node']} (GPU {gpus})"
    return out


_ADDRESS_RE = r"(ray://)?[A-Za-z0-9][A-Za-z0-9.\-]{0,252}:\d{1,5}|auto"


def save_ray_address(settings: Settings, address: str) -> str | None:
    """Set (or, with "", clear) the Ray cluster address from the portal; returns the address
    now in effect. A running portal's worker connects to it for the next Ray run."""
    import re

    address = address.strip()
    if address and not re.fullmatch(_ADDRESS_RE, address):
        raise ConfigError(
            "ray_address",
            "give the head's HOST:PORT, e.g. 10.0.0.5:6379 (or ray://HOST:10001, or auto)",
        )
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(
        settings.data_dir / RAY_CLUSTER_FILE, {"address": address or None, "saved_at": utc_now()}
    )
    return ray_address(settings)
