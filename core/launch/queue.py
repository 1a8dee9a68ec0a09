"""Queueing a launch: the one way runs and experiments are queued.

The Launch page (presets and the grid), Explain (the Compare page's button and
``python -m core explain``) and the CLI (``experiment``, and ``run`` on an executor other
than this process) all queue here, after their own checks (core/launch/forms.py,
core/launch/grid.py). The queue itself is the run folders (core/executors/queue.py); an
experiment is recorded next to its runs (core/experiments/design.py: ``expand`` gives the
interleaved runs, ``save_experiment`` which run is which arm and trial).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from core.config import RunSpec
from core.executors import with_executor
from core.executors.queue import submit
from core.experiments.design import ExperimentSpec, expand, new_experiment_id, save_experiment
from core.settings import Settings

__all__ = ["Queued", "queue_experiment", "queue_launch"]


@dataclass(frozen=True)
class Queued:
    """What one launch queued: its runs in queue order and, for an experiment, its id."""

    run_ids: tuple[str, ...]
    experiment_id: str | None = None


def queue_launch(
    settings: Settings,
    launch: Sequence[RunSpec] | ExperimentSpec,
    *,
    executor: str | None = None,
) -> Queued:
    """Queue one run per spec, or every run of an experiment (interleaved, recorded in
    its experiment.json). ``executor``: place every run there; None keeps each spec's own
    placement (``spec.placement.executor``, else ``SERVELAB_EXECUTOR``)."""
    if isinstance(launch, ExperimentSpec):
        exp_id, run_ids = _queue_experiment(settings, launch, executor)
        return Queued(tuple(run_ids), exp_id)
    specs = [s if executor is None else with_executor(s, executor) for s in launch]
    return Queued(tuple(submit(settings, specs)))


def queue_experiment(
    settings: Settings, exp: ExperimentSpec, *, executor: str | None = None
) -> str:
    """Queue every run of ``exp`` (see ``queue_launch``); return the experiment's id."""
    return _queue_experiment(settings, exp, executor)[0]


def _queue_experiment(
    settings: Settings, exp: ExperimentSpec, executor: str | None
) -> tuple[str, list[str]]:
    if executor is not None:
        exp = exp.model_copy(update={"base": with_executor(exp.base, executor)})
    exp_id = new_experiment_id()
    planned = expand(exp, exp_id)
    run_ids = submit(settings, [spec for _, _, spec in planned])
    save_experiment(
        settings,
        exp,
        [(arm, trial, rid) for (arm, trial, _), rid in zip(planned, run_ids, strict=True)],
        exp_id,
    )
    return exp_id, run_ids
