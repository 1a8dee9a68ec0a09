"""Experiments: arms × trials of fresh servers, interleaved, on the same seeded prompts.

An experiment is a base RunSpec, arms (each names the knobs it changes from the base)
and a number of trials. Expansion gives one run per arm per trial; within each trial
the arm order is shuffled with a recorded seed (A B / B A ...), so drift over time
(thermal, other tenants) cannot masquerade as an arm effect. Every run gets the same
plan, hence the same prompts. The experiment itself is a small JSON file under
``data/experiments/<id>/``; its runs are ordinary run folders.
"""

from __future__ import annotations

import platform
import random
import re
import secrets
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from core.config import RunSpec
from core.errors import ConfigError, StoreError
from core.run_folder import read_json, write_json_atomic
from core.safety import redact_spec
from core.settings import Settings

__all__ = [
    "Arm",
    "ExperimentSpec",
    "expand",
    "experiment_from_preset",
    "experiment_runs",
    "list_experiments",
    "load_experiment",
    "noise_floor",
    "parse_experiment",
    "save_experiment",
    "submit_experiment",
]


class Arm(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    label: str = Field(min_length=1, max_length=40)
    # dotted RunSpec field → value, e.g. {"server.cuda_graphs": true}
    changes: dict[str, Any] = Field(default_factory=dict)

    @field_validator("label")
    @classmethod
    def _label(cls, v: str) -> str:
        if not re.fullmatch(r"[\w .:+=\-/]{1,40}", v):
            raise ValueError("use letters, digits, spaces and . : + = - /")
        return v


class ExperimentSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, max_length=120)
    base: RunSpec = RunSpec()
    arms: tuple[Arm, ...] = Field(min_length=1, max_length=10)
    trials: int = Field(3, ge=1, le=50)
    order_seed: int = Field(default_factory=lambda: secrets.randbelow(2**31))
    kind: str = Field("ab", description="ab, or aa for a noise-floor check")
    baseline: str | None = Field(None, description="the arm others are compared with; "
                                                   "default: the last arm")

    @field_validator("arms")
    @classmethod
    def _arms(cls, arms: tuple[Arm, ...]) -> tuple[Arm, ...]:
        labels = [a.label for a in arms]
        if len(set(labels)) != len(labels):
            raise ValueError("arm labels must be distinct")
        return arms

    @model_validator(mode="after")
    def _baseline(self) -> ExperimentSpec:
        if self.baseline is not None and self.baseline not in {a.label for a in self.arms}:
            raise ValueError(f"baseline {self.baseline!r} is not one of the arm labels")
        return self

    @property
    def baseline_arm(self) -> str:
        return self.baseline or self.arms[-1].label

    @property
    def knobs(self) -> tuple[str, ...]:
        """The fields the arms vary, in first-seen order."""
        seen: dict[str, None] = {}
        for arm in self.arms:
            seen.update(dict.fromkeys(arm.changes))
        return tuple(seen)


def _apply(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in base.items()}
    for path, value in changes.items():
        group, _, name = path.partition(".")
        if group not in ("server", "plan") or not name or "." in name:
            raise ConfigError("arms.changes", f"{path!r}: name a field like server.cuda_graphs")
        out[group][name] = value
    return out


def expand(exp: ExperimentSpec, exp_id: str) -> list[tuple[str, int, RunSpec]]:
    """(arm label, trial, spec) in execution order: arms shuffled within each trial."""
    base = exp.base.model_dump(mode="json")
    rng = random.Random(exp.order_seed)
    runs = []
    for trial in range(exp.trials):
        arms = list(exp.arms)
        rng.shuffle(arms)
        for arm in arms:
            data = _apply(base, arm.changes)
            data["tags"] = [*base.get("tags", []), f"exp:{exp_id}",
                            "arm:" + arm.label.replace(" ", "-"), f"trial:{trial}"]
            data["intended_diff"] = list(exp.knobs)
            try:
                spec = RunSpec.model_validate(data)
            except ValidationError as exc:
                err = exc.errors()[0]
                where = ".".join(str(p) for p in err["loc"])
                raise ConfigError(f"arms[{arm.label}]", f"{where}: {err['msg']}") from exc
            runs.append((arm.label, trial, spec))
    return runs


def parse_experiment(data: dict[str, Any]) -> ExperimentSpec:
    try:
        return ExperimentSpec.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "experiment"
        raise ConfigError(field, err["msg"].removeprefix("Value error, ")) from exc


def experiment_from_preset(name: str, base: RunSpec, arms: list[tuple[str, dict[str, Any]]],
                           trials: int, kind: str = "ab") -> ExperimentSpec:
    return ExperimentSpec(
        name=name, base=base.model_copy(update={"intended_diff": ()}), trials=trials, kind=kind,
        arms=tuple(Arm(label=label, changes={f"server.{k}": v for k, v in ch.items()})
                   for label, ch in arms))


def _dir(settings: Settings) -> Path:
    return settings.data_dir / "experiments"


def save_experiment(settings: Settings, exp: ExperimentSpec,
                    runs: list[tuple[str, int, str]], exp_id: str) -> Path:
    """Write experiment.json: the spec, the order seed and which run is which arm/trial."""
    folder = _dir(settings) / exp_id
    try:
        folder.mkdir(parents=True, exist_ok=False)
    except OSError as exc:
        raise StoreError(f"cannot create experiment folder {folder}: {exc}") from exc
    write_json_atomic(folder / "experiment.json", {
        "experiment_id": exp_id, "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": platform.node(),
        "spec": redact_spec(exp.model_dump(mode="json")),  # no API key in experiment.json
        "runs": [{"run_id": rid, "arm": arm, "trial": trial} for arm, trial, rid in runs]})
    return folder


def new_experiment_id() -> str:
    return "exp-" + datetime.now(UTC).strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


def load_experiment(settings: Settings, exp_id: str) -> dict[str, Any] | None:
    if not re.fullmatch(r"exp-[\w-]{1,60}", exp_id):
        return None
    data = read_json(_dir(settings) / exp_id / "experiment.json")
    return data if isinstance(data, dict) else None


def list_experiments(settings: Settings) -> list[dict[str, Any]]:
    root = _dir(settings)
    if not root.is_dir():
        return []
    out = []
    for path in sorted(root.iterdir(), reverse=True):
        data = read_json(path / "experiment.json")
        if isinstance(data, dict):
            out.append(data)
    return out


def submit_experiment(settings: Settings, exp: ExperimentSpec) -> str:
    """Queue every run of the experiment, interleaved, and record which is which."""
    from core.jobs import submit

    exp_id = new_experiment_id()
    planned = expand(exp, exp_id)
    run_ids = submit(settings, [spec for _, _, spec in planned])
    save_experiment(settings, exp,
                    [(arm, trial, rid) for (arm, trial, _), rid in zip(planned, run_ids,
                                                                       strict=True)], exp_id)
    return exp_id


def experiment_runs(settings: Settings, record: dict[str, Any]) -> list[Any]:
    """The experiment's runs as ``core.stats.RunOfArm`` (arm, trial, loaded run)."""
    from core.compare import load_run
    from core.run_folder import RunFolder
    from core.stats import RunOfArm

    out = []
    for r in record.get("runs", []):
        path = settings.runs_dir / str(r["run_id"])
        if (path / "spec.json").is_file():
            out.append(RunOfArm(str(r["arm"]), int(r["trial"]), load_run(RunFolder(path))))
    return out


def noise_floor(settings: Settings, host: str | None = None) -> dict[str, Any] | None:
    """From the newest finished A/A experiment on this host: per metric, the largest
    relative difference (or its interval bound) seen between two identical arms."""
    from core.stats import arm_stats

    host = host or platform.node()
    for record in list_experiments(settings):
        spec = record.get("spec") or {}
        if spec.get("kind") != "aa" or record.get("host") != host:
            continue
        runs = experiment_runs(settings, record)
        if not runs or any(r.view.status.get("state") in ("queued", "running") for r in runs):
            continue
        arms = [a["label"] for a in spec.get("arms", [])]
        table = arm_stats(runs, arms[0])
        others = table[table["arm"] != arms[0]].dropna(subset=["rel"])
        if others.empty:
            continue
        floor: dict[str, Any] = {"experiment_id": record["experiment_id"]}
        for metric, rows in others.groupby("metric"):
            bounds = [abs(x) for col in ("rel", "rel_low", "rel_high")
                      for x in rows[col] if x is not None and x == x]
            floor[str(metric)] = max(bounds)
        return floor
    return None
