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
from core.engines import context_problems, kv_fill_problems
from core.errors import ConfigError
from core.executors import executor_for, runs_here, with_executor
from core.executors.queue import submit
from core.experiments.design import ExperimentSpec, expand, new_experiment_id, save_experiment
from core.launch.grid import grid_estimate
from core.launch.host import HostInfo, knob_problems, runnable_problems
from core.launch.kv_pool import plan_pools
from core.settings import Settings
from core.store import Catalog

__all__ = [
    "Queued",
    "dry_run",
    "queue_experiment",
    "queue_launch",
    "refuse_over_context",
    "refuse_unrunnable",
]


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
    host: HostInfo | None = None,
) -> Queued:
    """Queue one run per spec, or every run of an experiment (interleaved, recorded in
    its experiment.json). ``executor``: place every run there; None keeps each spec's own
    placement (``spec.placement.executor``, else ``SERVELAB_EXECUTOR``). ``host``: where
    they run (``launch_host`` / ``host_for``): a run it cannot run is refused, nothing
    queued."""
    if isinstance(launch, ExperimentSpec):
        exp_id, run_ids = _queue_experiment(settings, launch, executor, host)
        return Queued(tuple(run_ids), exp_id)
    specs = [s if executor is None else with_executor(s, executor) for s in launch]
    refuse_unrunnable(specs, host, settings)
    refuse_over_context(settings, specs)
    _refuse_kv_fill(settings, specs)
    return Queued(tuple(submit(settings, specs)))


def refuse_over_context(settings: Settings, specs: Sequence[RunSpec]) -> None:
    """ConfigError for the first point whose requests exceed its model's context without a
    drop/clip choice (or whose trace is unreadable): refused when queued, not an hour later
    when the run reaches that point."""
    for spec in specs:
        for field, message in context_problems(spec, settings.models_dir).items():
            raise ConfigError(field, message)


def refuse_unrunnable(
    specs: Sequence[RunSpec], host: HostInfo | None, settings: Settings | None = None
) -> None:
    """ConfigError for the first thing ``host`` lacks (``HostInfo.cannot_run``: the engine
    or the named installation, a GPU), naming what is missing and how to get it; with
    ``settings``, also a knob or flag an installation's own option list lacks
    (``knob_problems``): refused when queued, not in every run's preflight. None: the
    caller checked (or the run's preflight will)."""
    if host is None:
        return
    problems = runnable_problems(specs, host)
    if settings is not None:
        for field, why in knob_problems(specs, host, settings).items():
            problems.setdefault(field, why)
    for field, why in problems.items():
        raise ConfigError(field, why)


def _refuse_kv_fill(settings: Settings, specs: Sequence[RunSpec]) -> None:
    """kv_fill on an engine that reports no KV pool, refused before anything is queued."""
    for spec in specs:
        for field, why in kv_fill_problems(spec, settings).items():
            raise ConfigError(field, why)


def queue_experiment(
    settings: Settings,
    exp: ExperimentSpec,
    *,
    executor: str | None = None,
    host: HostInfo | None = None,
) -> str:
    """Queue every run of ``exp`` (see ``queue_launch``); return the experiment's id."""
    return _queue_experiment(settings, exp, executor, host)[0]


def _queue_experiment(
    settings: Settings, exp: ExperimentSpec, executor: str | None, host: HostInfo | None = None
) -> tuple[str, list[str]]:
    if executor is not None:
        exp = exp.model_copy(update={"base": with_executor(exp.base, executor)})
    exp_id = new_experiment_id()
    refuse_unrunnable(
        [spec for _, trial, spec in expand(exp, exp_id) if trial == 0], host, settings
    )
    _refuse_kv_fill(settings, [spec for _, _, spec in expand(exp, exp_id)])
    # kv_fill: every arm sized from the smallest arm's pool (core/launch/kv_pool.py); the
    # arms whose pool no earlier run reported get a pool run queued ahead of the experiment.
    pools = plan_pools(settings, exp, exp_id)
    if pools is not None:
        arms = list(pools.to_run)
        pool_ids = submit(settings, [pools.to_run[a] for a in arms]) if arms else []
        exp = pools.with_runs(dict(zip(arms, pool_ids, strict=True)))
    planned = expand(exp, exp_id)
    refuse_over_context(settings, [spec for _, trial, spec in planned if trial == 0])
    run_ids = submit(settings, [spec for _, _, spec in planned])
    save_experiment(
        settings,
        exp,
        [(arm, trial, rid) for (arm, trial, _), rid in zip(planned, run_ids, strict=True)],
        exp_id,
    )
    return exp_id, run_ids


def dry_run(settings: Settings, exp: ExperimentSpec, *, executor: str | None = None) -> list[str]:
    """What queueing ``exp`` would do, in words, queueing nothing: its runs in order (arms
    shuffled per trial), the estimated duration (earlier runs of its engine and model here:
    ``grid_estimate``) and the smallest effect its trials can resolve on this host
    (``core.analysis.power``), with a few other trial counts."""
    # imported here: queueing one run (``python -m core run --executor``) needs no scipy
    from core.analysis.power import host_noise, power_lines

    if executor is not None:
        exp = exp.model_copy(update={"base": with_executor(exp.base, executor)})
    server = exp.base.server
    lines = [f"Dry run of {exp.name!r}: nothing queued. It would queue, in this order:"]
    by_trial: dict[int, list[str]] = {}
    for arm, trial, _ in expand(exp, "dry-run"):
        by_trial.setdefault(trial, []).append(arm)
    for trial, arms in by_trial.items():
        what = "closing baseline" if trial >= exp.first_trials else f"trial {trial}"
        lines.append(f"  {what}: " + ", ".join(arms))
    history = Catalog(settings.catalog_path, settings.runs_dir).recent_durations_s(
        server.engine, server.model
    )
    lines.append(
        "Estimated duration: "
        + grid_estimate(exp, history, parallel=not runs_here(executor_for(exp.base, settings)))
    )
    lines += power_lines(
        host_noise(settings, engine=server.engine, model=server.model),
        exp.max_trials if exp.adaptive else exp.first_trials,
    )
    return lines
