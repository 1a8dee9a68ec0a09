"""``data/experiments/<id>/experiment.json``: what an experiment recorded, typed.

The file is written once, when the experiment is queued (``design.save_experiment``): the
experiment's spec as it was given (API keys redacted), the order seed inside it, and which
run is which arm and trial. Every reader gets an ``ExperimentRecord``. Files of older
versions load as they are: the fields are the ones every version wrote, unknown keys are
kept, and ``spec`` stays the JSON that was saved (an old spec need not validate against
today's ``ExperimentSpec``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from core.errors import StoreError
from core.run_folder import read_json

__all__ = ["EXPERIMENT_FILE", "ExperimentRecord", "ExperimentRun", "read_experiment"]

EXPERIMENT_FILE = "experiment.json"


class ExperimentRun(BaseModel):
    """One run of an experiment: its id, its arm's label and its trial (0-based).
    ``closing``: the closing repeat of the baseline arm (``ExperimentSpec.closing_baseline``),
    run after the last trial; it bounds the drift and is no trial of the estimator."""

    model_config = ConfigDict(frozen=True, extra="allow")

    run_id: str
    arm: str
    trial: int
    closing: bool = False


class ExperimentRecord(BaseModel):
    """``experiment.json``. ``spec`` is the saved ``ExperimentSpec`` JSON (name, base, arms,
    trials, order_seed, kind, baseline, or a grid's knobs)."""

    model_config = ConfigDict(frozen=True, extra="allow")

    experiment_id: str
    created_at: str | None = None
    host: str | None = None  # the machine it was queued on (the noise floor is per host)
    spec: dict[str, Any] = {}
    runs: list[ExperimentRun] = []

    @property
    def name(self) -> str | None:
        name = self.spec.get("name")
        return None if name is None else str(name)

    @property
    def kind(self) -> str | None:
        """``ab``, ``aa``, ``grid`` ... as the spec says (None: not recorded)."""
        kind = self.spec.get("kind")
        return None if kind is None else str(kind)

    @property
    def arm_labels(self) -> list[str]:
        return [str(a.get("label")) for a in self.spec.get("arms") or [] if isinstance(a, dict)]

    @property
    def run_ids(self) -> list[str]:
        return [r.run_id for r in self.runs]

    def as_json(self) -> dict[str, Any]:
        """The JSON object as written (every key it had, nothing added)."""
        return self.model_dump(mode="json", exclude_unset=True)


def read_experiment(path: Path) -> ExperimentRecord | None:
    """The record in ``path`` (an experiment.json); None when there is none, or it is not
    readable as one (a half-copied folder, a file of something else)."""
    try:
        data = read_json(path)
    except StoreError:
        return None
    if not isinstance(data, dict):
        return None
    try:
        return ExperimentRecord.model_validate(data)
    except ValidationError:
        return None
