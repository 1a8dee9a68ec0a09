"""``data/experiments/<id>/experiment.json``: what an experiment recorded, typed.

The file is written once, when the experiment is queued (``design.save_experiment``): the
experiment's spec as it was given (API keys redacted), the order seed inside it, and which
run is which arm and trial. Every reader gets an ``ExperimentRecord``. Files of older
versions load as they are: the fields are the ones every version wrote, unknown keys are
kept, and ``spec`` stays the JSON that was saved (an old spec need not validate against
today's ``ExperimentSpec``).

An adaptive experiment (``trials: auto``) is written again after each look of its
controller (``core/launch/adaptive.py``, from the worker that owns the queue): the runs it
added, and ``adaptive`` (each look's decision per contrast, the failed arms queued again,
why it stopped). That state lives here, not in a process, so a restarted worker carries on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from core.errors import StoreError
from core.run_folder import read_json

__all__ = [
    "EXPERIMENT_FILE",
    "AdaptiveState",
    "ContrastLook",
    "Decision",
    "ExperimentRecord",
    "ExperimentRun",
    "Look",
    "Retry",
    "Stop",
    "read_experiment",
]

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


Decision = Literal["better", "worse", "equivalent", "undecided"]


class ContrastLook(BaseModel):
    """One headline contrast at one look: arm vs the baseline on one metric at the
    headline point, its relative change and interval (at the look's adjusted level), the
    equivalence margin and the decision."""

    model_config = ConfigDict(frozen=True, extra="allow")

    arm: str
    metric: str
    point: str
    rel: float | None = None
    low: float | None = None
    high: float | None = None
    margin: float
    decision: Decision
    what: str = ""  # in words: "median TTFT at c=64" (with the arm where there are several)


class Look(BaseModel):
    """The stop rule's look after a complete trial: how many trials were complete (and
    queued), when, and each contrast's decision."""

    model_config = ConfigDict(frozen=True, extra="allow")

    complete_trials: int
    queued_trials: int
    at: str
    minutes: float
    level: float
    contrasts: list[ContrastLook] = []


class Retry(BaseModel):
    """A failed arm of a trial queued again (once): the failed run and its replacement."""

    model_config = ConfigDict(frozen=True, extra="allow")

    arm: str
    trial: int
    failed_run_id: str
    run_id: str


class Stop(BaseModel):
    """Why an adaptive experiment stopped: ``text`` is what the pages say ("decided after 5
    trials (38 min)", "undecided after 10 trials: p99 TTFT at c=64")."""

    model_config = ConfigDict(frozen=True, extra="allow")

    reason: Literal["decided", "max_trials", "max_minutes", "cancelled", "error"]
    complete_trials: int
    queued_trials: int
    minutes: float
    at: str
    text: str


class AdaptiveState(BaseModel):
    model_config = ConfigDict(frozen=True, extra="allow")

    looks: list[Look] = []
    retries: list[Retry] = []
    stop: Stop | None = None


class ExperimentRecord(BaseModel):
    """``experiment.json``. ``spec`` is the saved ``ExperimentSpec`` JSON (name, base, arms,
    trials, order_seed, kind, baseline, or a grid's knobs)."""

    # an inf request_rate in the spec stays a readable "Infinity" (JSON null would not
    # validate as the ExperimentSpec an adaptive experiment's controller reads back)
    model_config = ConfigDict(frozen=True, extra="allow", ser_json_inf_nan="strings")

    experiment_id: str
    created_at: str | None = None
    host: str | None = None  # the host name it was queued on (noise is keyed by fingerprint)
    spec: dict[str, Any] = {}
    runs: list[ExperimentRun] = []
    adaptive: AdaptiveState | None = None  # trials: auto only

    @property
    def is_adaptive(self) -> bool:
        return self.spec.get("trials") == "auto"

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
