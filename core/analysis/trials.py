"""An experiment's trials as loaded runs."""

from __future__ import annotations

from dataclasses import dataclass

from core.analysis.runs import RunView, load_run
from core.analysis.stats import RunOfArm
from core.experiments.design import load_experiment
from core.experiments.records import ExperimentRecord
from core.numbers import trial_text
from core.run_folder import find_runs
from core.settings import Settings

__all__ = ["RunPlace", "closing_runs", "experiment_runs", "run_place"]


@dataclass(frozen=True)
class RunPlace:
    """Where a run sits in its experiment, as ``experiment.json`` records it."""

    experiment_id: str
    experiment_name: str
    arm: str
    trial: int  # 0-based
    trials: int  # the arm's trials so far (an adaptive experiment adds more)
    closing: bool

    @property
    def title(self) -> str:
        """What the Run page is titled: "graphs=on mem=0.92 · trial 2 of 3"."""
        if self.closing:
            return f"{self.arm} · closing baseline run"
        return f"{self.arm} · {trial_text(self.trial)} of {self.trials}"


def run_place(settings: Settings, view: RunView) -> RunPlace | None:
    """The experiment, arm and trial of a run (its tag ``exp:<id>``, then the experiment's
    record); None for a run of no experiment, or of one whose record is gone."""
    exp_ids = [
        t[4:] for t in view.spec.get("tags") or [] if isinstance(t, str) and t.startswith("exp:")
    ]
    record = load_experiment(settings, exp_ids[0]) if exp_ids else None
    if record is None:
        return None
    mine = next((r for r in record.runs if r.run_id == view.run_id), None)
    if mine is None:
        return None
    trials = {r.trial for r in record.runs if r.arm == mine.arm and not r.closing}
    return RunPlace(
        experiment_id=record.experiment_id,
        experiment_name=record.name or record.experiment_id,
        arm=mine.arm,
        trial=mine.trial,
        trials=len(trials),
        closing=mine.closing,
    )


def experiment_runs(settings: Settings, record: ExperimentRecord) -> list[RunOfArm]:
    """The experiment's trials as ``core.analysis.stats.RunOfArm`` (arm, trial, loaded run).
    A closing baseline run is no trial (``closing_runs``): it never enters the estimator."""
    return _runs(settings, record, closing=False)


def closing_runs(settings: Settings, record: ExperimentRecord) -> list[RunOfArm]:
    """The closing repeat of the baseline arm (``ExperimentSpec.closing_baseline``), if
    any: what bounds the drift (``core.analysis.drift``)."""
    return _runs(settings, record, closing=True)


def _runs(settings: Settings, record: ExperimentRecord, closing: bool) -> list[RunOfArm]:
    out = []
    for r in record.runs:
        if r.closing != closing:
            continue
        found, _ = find_runs(settings.runs_dir, [r.run_id])
        if found:  # an id experiment.json names but no folder (or no valid id): no trial
            out.append(RunOfArm(r.arm, r.trial, load_run(found[0])))
    return out
