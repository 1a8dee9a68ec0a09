"""Executors: where a queued run is executed.

* **local** (the default): the portal's ``core.jobs.Worker`` starts
  ``python -m core run --run-id ID`` as its own OS process on this host, one run per GPU
  set at a time (``core.jobs.gpu_set`` / ``plan_launches``).
* **ray**: ``core.executors.ray_cluster.RayDispatcher`` (driven by the same Worker thread)
  hands the run to an existing Ray cluster. Each run becomes one Ray actor that asks for
  ``num_gpus`` = the run's tensor-parallel size (plus an optional accelerator type); Ray's
  resource accounting replaces the GPU-set lock. The actor runs the very same
  ``python -m core run --run-id ID`` in a scratch folder on its node, reports status.json
  snapshots while it runs, and returns the finished folder as a tar that is unpacked into
  ``data/runs/<run_id>/`` here and indexed like any other run.

Which one: the run's ``spec.placement.executor`` when set (the Launch form, ``--executor``),
else ``SERVELAB_EXECUTOR``. Ray is imported only by ``ray_cluster`` and only when a Ray run
is dispatched, so nothing else needs it installed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.config import RunSpec
from core.run_folder import read_json
from core.settings import Settings

__all__ = ["EXECUTORS", "executor_for", "node_of", "placement_fields", "ray_available"]

EXECUTORS = ("local", "ray")
# status.json / facts.json keys a Ray run records about where it ran.
placement_fields = ("executor", "node_ip", "node_id", "node_name", "gpu_ids")


def executor_for(spec: RunSpec, settings: Settings) -> str:
    """The executor that runs ``spec``: its own choice, else the host's setting."""
    return spec.placement.executor or settings.executor


def ray_available() -> str:
    """"" when ``import ray`` works here, else why not (for the portal and the CLI)."""
    import importlib.util

    if importlib.util.find_spec("ray") is None:
        return "Ray is not installed here: pip install -r requirements-ray.txt"
    return ""


def node_of(run_dir: Path) -> dict[str, Any]:
    """Where a run ran, from its status.json (``{}`` for a local run): executor, node_ip,
    node_id, node_name, gpu_ids."""
    try:
        status = read_json(run_dir / "status.json")
    except Exception:
        return {}
    if not isinstance(status, dict) or status.get("executor") != "ray":
        return {}
    return {k: status.get(k) for k in placement_fields}
