"""The controller of adaptive experiments (``trials: auto``): trial after trial until the
stop rule (``core.analysis.sequential``) has decided every headline contrast.

``queue_experiment`` queues the first min_trials trials. Each time every run the
experiment has queued is final, ``advance`` acts once, and records what it did in
``experiment.json`` (``ExperimentRecord.adaptive``) before the next call can see it:

1. a run was **cancelled** → stop (someone meant the experiment to end);
2. an arm of a trial **failed** (failed, invalid, interrupted) and was not queued again yet →
   queue that arm of that trial once more (same trial tag, so it pairs with the others);
   a second failure leaves the trial incomplete: it counts toward max_trials and
   its arms pair with nothing;
3. else **look** (once min_trials trials are complete): every open headline contrast's
   interval at its group-sequential level, and its decision (a decided one stays
   decided); **stop** when all are decided, when max_trials trials have been queued, or
   max_minutes have passed since the experiment was queued; otherwise queue the next
   trial (its arms in their seeded shuffled order).

All state is in experiment.json and the run folders, none in memory: a restarted worker
(or the CLI after a portal) carries on where the last one left. It runs from the worker
that owns the queue (``Worker(on_tick=...)``: ``python -m core experiment`` and the portal,
``pages/_services.py``), so experiment.json has one writer.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from pydantic import ValidationError

from core.analysis.card import CARD_METRICS
from core.analysis.sequential import (
    headline_contrasts,
    look_level,
    margins_for,
    open_text,
    undecided,
)
from core.analysis.trials import experiment_runs
from core.executors.queue import submit
from core.experiments.design import (
    ExperimentSpec,
    baseline_arm,
    expand_trial,
    list_experiments,
    update_experiment,
)
from core.experiments.records import (
    AdaptiveState,
    ContrastLook,
    ExperimentRecord,
    ExperimentRun,
    Look,
    Retry,
    Stop,
)
from core.metric_info import metric_name
from core.run_folder import RunFolder
from core.settings import Settings

__all__ = ["advance", "advance_experiments"]

Clock = Callable[[], datetime]
_FAILED = ("failed", "invalid", "interrupted")


def _utc_now() -> datetime:
    return datetime.now(UTC)


def advance_experiments(settings: Settings, now: Clock = _utc_now) -> list[str]:
    """``advance`` every adaptive experiment that has not stopped; the ids of those that
    queued runs or stopped (the worker then looks at the queue at once)."""
    return [
        record.experiment_id
        for record in list_experiments(settings)
        if record.is_adaptive
        and not (record.adaptive and record.adaptive.stop)
        and advance(settings, record, now) is not None
    ]


def advance(
    settings: Settings, record: ExperimentRecord, now: Clock = _utc_now
) -> ExperimentRecord | None:
    """One step of the controller (module docstring); the record as written, or None
    when there is nothing to do yet (runs still queued or running, or it has stopped)."""
    state = record.adaptive or AdaptiveState()
    if not record.is_adaptive or state.stop is not None:
        return None
    states = {
        r.run_id: RunFolder(settings.runs_dir / r.run_id).status_or_empty().state
        for r in record.runs
    }
    if any(s is None or s in ("queued", "running") for s in states.values()):
        return None
    at = now()
    minutes = _minutes(record, at)
    try:
        spec = ExperimentSpec.model_validate(record.spec)
    except ValidationError as exc:  # an edited experiment.json: nothing more is queued
        return _stop(settings, record, state, "error", 0, 0, minutes, at, f"stopped: {exc}")
    queued = 1 + max((r.trial for r in record.runs), default=-1)
    ok = {(r.arm, r.trial) for r in record.runs if states[r.run_id] == "succeeded"}
    arms = [a.label for a in spec.arms]
    complete = sum(all((a, t) in ok for a in arms) for t in range(queued))
    if any(s == "cancelled" for s in states.values()):
        text = f"stopped after {complete} complete trials ({minutes:.0f} min): a run was cancelled"
        return _stop(settings, record, state, "cancelled", complete, queued, minutes, at, text)
    retried = {(x.arm, x.trial) for x in state.retries}
    again = [
        r
        for r in record.runs
        if states[r.run_id] in _FAILED
        and (r.arm, r.trial) not in ok
        and (r.arm, r.trial) not in retried
    ]
    if again:
        return _retry(settings, record, state, spec, again)
    contrasts: list[ContrastLook] | None = None
    level = look_level(spec.min_trials, spec.max_trials)
    if complete >= spec.min_trials:
        runs = experiment_runs(settings, record)
        base = baseline_arm(record.spec)
        margins = margins_for(spec.equivalence_margin, spec.equivalence_margin_pct / 100)
        names = {m: metric_name(m) for m in CARD_METRICS}
        contrasts = headline_contrasts(
            runs,
            base,
            margins,
            complete,
            min_trials=spec.min_trials,
            max_trials=spec.max_trials,
            previous=state.looks[-1].contrasts if state.looks else (),
            names=names,
        )
        look = Look(
            complete_trials=complete,
            queued_trials=queued,
            at=at.isoformat(timespec="seconds"),
            minutes=round(minutes, 2),
            level=level,
            contrasts=contrasts,
        )
        state = state.model_copy(update={"looks": [*state.looks, look]})
    open_ = undecided(contrasts) if contrasts else []
    if contrasts and not open_:
        text = f"decided after {complete} trials ({minutes:.0f} min)"
        return _stop(settings, record, state, "decided", complete, queued, minutes, at, text)
    why = (
        open_text(open_)
        if contrasts
        else f"fewer than {spec.min_trials} complete trials"
        if complete < spec.min_trials
        else "no load point common to every arm"
    )
    if queued >= spec.max_trials:
        text = f"undecided after {queued} trials: {why}"
        return _stop(settings, record, state, "max_trials", complete, queued, minutes, at, text)
    if spec.max_minutes is not None and minutes >= spec.max_minutes:
        text = (
            f"undecided after {queued} trials ({minutes:.0f} min, the limit is "
            f"{spec.max_minutes:g} min): {why}"
        )
        return _stop(settings, record, state, "max_minutes", complete, queued, minutes, at, text)
    planned = expand_trial(spec, record.experiment_id, queued)
    run_ids = submit(settings, [s for _, _, s in planned])
    added = [
        ExperimentRun(run_id=rid, arm=arm, trial=t)
        for (arm, t, _), rid in zip(planned, run_ids, strict=True)
    ]
    out = record.model_copy(update={"runs": [*record.runs, *added], "adaptive": state})
    update_experiment(settings, out)
    return out


def _retry(
    settings: Settings,
    record: ExperimentRecord,
    state: AdaptiveState,
    spec: ExperimentSpec,
    failed: list[ExperimentRun],
) -> ExperimentRecord:
    """Queue each failed arm of its trial once more (its seeded spec, its trial's tag)."""
    added: list[ExperimentRun] = []
    retries = list(state.retries)
    for run in failed:
        if any(x.arm == run.arm and x.trial == run.trial for x in retries):
            continue  # two failed runs of one arm and trial: one re-queue
        ((arm, trial, again),) = expand_trial(spec, record.experiment_id, run.trial, [run.arm])
        (rid,) = submit(settings, [again])
        added.append(ExperimentRun(run_id=rid, arm=arm, trial=trial))
        retries.append(Retry(arm=arm, trial=trial, failed_run_id=run.run_id, run_id=rid))
    out = record.model_copy(
        update={
            "runs": [*record.runs, *added],
            "adaptive": state.model_copy(update={"retries": retries}),
        }
    )
    update_experiment(settings, out)
    return out


def _stop(
    settings: Settings,
    record: ExperimentRecord,
    state: AdaptiveState,
    reason: str,
    complete: int,
    queued: int,
    minutes: float,
    at: datetime,
    text: str,
) -> ExperimentRecord:
    stop = Stop.model_validate(
        {
            "reason": reason,
            "complete_trials": complete,
            "queued_trials": queued,
            "minutes": round(minutes, 2),
            "at": at.isoformat(timespec="seconds"),
            "text": text,
        }
    )
    out = record.model_copy(update={"adaptive": state.model_copy(update={"stop": stop})})
    update_experiment(settings, out)
    return out


def _minutes(record: ExperimentRecord, at: datetime) -> float:
    """Minutes since the experiment was queued (its ``created_at``); 0 when unreadable."""
    try:
        start = datetime.fromisoformat(str(record.created_at))
    except ValueError:
        return 0.0
    if start.tzinfo is None:
        start = start.replace(tzinfo=UTC)
    return max((at - start).total_seconds() / 60, 0.0)
