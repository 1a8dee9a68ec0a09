"""Queueing a launch: the one way runs and experiments are queued, all or nothing.

The Launch page (presets and the grid), Explain (the Compare page's button and
``python -m core explain``) and the CLI (``experiment``, and ``run`` on an executor other
than this process) all queue here. Nothing is written before the whole launch passes THE
gate (``core.launch.preflight.preflight``: an experiment's every arm and the KV-pool runs it
adds); if writing then fails midway (disk full), what was written is withdrawn. The queue
itself is the run folders (core/executors/queue.py); an experiment is recorded next to its
runs (core/experiments/design.py: ``expand`` gives the interleaved runs, ``save_experiment``
which run is which arm and trial).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from core.config import RunSpec
from core.executors import executor_for, runs_here, with_executor
from core.executors.queue import cancel, submit
from core.experiments.design import ExperimentSpec, expand, new_experiment_id, save_experiment
from core.launch.grid import grid_estimate
from core.launch.host import HostInfo, detect_host
from core.launch.kv_pool import plan_pools
from core.launch.preflight import preflight, refuse
from core.numbers import trial_text
from core.run_folder import RunFolder
from core.settings import Settings
from core.shapes import model_label
from core.store import Catalog

__all__ = [
    "Queued",
    "dry_run",
    "queue_experiment",
    "queue_launch",
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
    they run (``launch_host`` / ``host_for``; None: only the checks that do not depend on
    it). Any preflight problem refuses the whole launch (``Refused``, a ConfigError naming
    every field) and nothing is queued."""
    if isinstance(launch, ExperimentSpec):
        exp_id, run_ids = _queue_experiment(settings, launch, executor, host)
        return Queued(tuple(run_ids), exp_id)
    specs = [s if executor is None else with_executor(s, executor) for s in launch]
    refuse(preflight(specs, host, settings))
    return Queued(tuple(_write(settings, lambda written: _submit(settings, specs, written))))


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
    refuse(preflight(exp, host, settings))  # every arm and every pool run, before any write
    exp_id = new_experiment_id()

    def write(written: list[str]) -> list[str]:
        # kv_fill: every arm sized from the smallest arm's pool (core/launch/kv_pool.py);
        # the arms whose pool no earlier run reported get a pool run queued ahead.
        planned_exp = exp
        pools = plan_pools(settings, exp, exp_id)
        if pools is not None:
            arms = list(pools.to_run)
            pool_ids = _submit(settings, [pools.to_run[a] for a in arms], written)
            planned_exp = pools.with_runs(dict(zip(arms, pool_ids, strict=True)))
        planned = expand(planned_exp, exp_id)
        run_ids = _submit(settings, [spec for _, _, spec in planned], written)
        save_experiment(
            settings,
            planned_exp,
            [(arm, trial, rid) for (arm, trial, _), rid in zip(planned, run_ids, strict=True)],
            exp_id,
        )
        return run_ids

    return exp_id, _write(settings, write)


def _write(settings: Settings, write: Callable[[list[str]], list[str]]) -> list[str]:
    """Run ``write``, which appends every run id it queues to the list it is given; if it
    fails, withdraw those runs (all or nothing) and raise what failed."""
    written: list[str] = []
    try:
        return write(written)
    except BaseException:
        _withdraw(settings, written)
        raise


def _submit(settings: Settings, specs: Sequence[RunSpec], written: list[str]) -> list[str]:
    """``submit`` one run at a time, each id appended to ``written`` once its folder exists."""
    ids: list[str] = []
    for spec in specs:
        (rid,) = submit(settings, [spec])
        written.append(rid)
        ids.append(rid)
    return ids


def _withdraw(settings: Settings, run_ids: Sequence[str]) -> None:
    """Cancel runs queued by a launch that failed midway; the folder of one that never
    started is removed, so the failed launch leaves nothing behind."""
    for rid in run_ids:
        cancel(settings, rid)
        folder = RunFolder(settings.runs_dir / rid)
        status = folder.status_or_empty()
        if status.state == "cancelled" and not status.started_at:
            shutil.rmtree(folder.path, ignore_errors=True)


def dry_run(
    settings: Settings,
    exp: ExperimentSpec,
    *,
    executor: str | None = None,
    host: HostInfo | None = None,
) -> list[str]:
    """What queueing ``exp`` would do, in words, queueing nothing: what the gate would refuse
    on ``host`` (``preflight``), its runs in order (arms shuffled per trial), the estimated
    duration (earlier runs of its engine and model here: ``grid_estimate``) and the smallest
    effect its trials can resolve on this host (``core.analysis.power``), with a few other
    trial counts."""
    # imported here: queueing one run (``python -m core run --executor``) needs no scipy
    from core.analysis.power import host_noise, power_lines

    if executor is not None:
        exp = exp.model_copy(update={"base": with_executor(exp.base, executor)})
    server = exp.base.server
    problems = preflight(exp, host, settings)
    lines = [f"Dry run of {exp.name!r}: nothing queued."]
    if problems:
        lines.append("Queueing it would be refused, every field at once:")
        lines += [f"  {p.field}: {p.text}" for p in problems]
    lines.append(
        "Once it passes, it would queue, in this order:"
        if problems
        else "It would queue, in this order:"
    )
    by_trial: dict[int, list[str]] = {}
    for arm, trial, _ in expand(exp, "dry-run"):
        by_trial.setdefault(trial, []).append(arm)
    for trial, arms in by_trial.items():
        what = "closing baseline" if trial >= exp.first_trials else trial_text(trial)
        lines.append(f"  {what}: " + ", ".join(arms))
    # the catalog's model column: a shape run's is the shape's name (core.shapes.model_label)
    label = model_label(server.model_dump(mode="json"))
    history = Catalog(settings.catalog_path, settings.runs_dir).recent_durations_s(
        server.engine, str(label)
    )
    lines.append(
        "Estimated duration: "
        + grid_estimate(exp, history, parallel=not runs_here(executor_for(exp.base, settings)))
    )
    lines += power_lines(
        host_noise(
            settings,
            (host or detect_host(settings)).fingerprint(server),
            engine=server.engine,
            model=label,
        ),
        exp.max_trials if exp.adaptive else exp.first_trials,
    )
    return lines
