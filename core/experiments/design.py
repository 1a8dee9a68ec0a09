"""Experiments: arms × trials of fresh servers, interleaved, on the same seeded prompts.

An experiment is a base RunSpec, arms (each names the knobs it changes from the base)
and a number of trials. Expansion gives one run per arm per trial; within each trial
the arm order is shuffled with a recorded seed (A B / B A ...), so drift over time
(thermal, other tenants) cannot masquerade as an arm effect. Every run gets the same
plan, hence the same prompts. The experiment itself is a small JSON file under
``data/experiments/<id>/``; its runs are ordinary run folders, queued by
``core/launch/queue.py`` (this module designs and stores, it queues nothing).
"""

from __future__ import annotations

import itertools
import json
import math
import platform
import random
import re
import secrets
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from core.config import BenchmarkPlan, RunSpec, ServerConfig, config_error, knob_text, same_value
from core.errors import ConfigError, StoreError
from core.experiments.records import (
    EXPERIMENT_FILE,
    ExperimentRecord,
    ExperimentRun,
    read_experiment,
)
from core.metrics import VERDICT_METRICS
from core.run_folder import write_json_atomic
from core.safety import redact_spec
from core.settings import Settings

__all__ = [
    "ARM_TAG",
    "CLOSING_TAG",
    "DEFAULT_MARGIN",
    "GRID_KNOB_FIELDS",
    "MAX_ARMS",
    "MAX_GRID_KNOBS",
    "MAX_TRIALS",
    "Arm",
    "ExperimentRecord",
    "ExperimentSpec",
    "KnobGrid",
    "arm_label",
    "arm_of_tags",
    "arm_tag",
    "baseline_arm",
    "control_of",
    "expand",
    "expand_trial",
    "experiment_from_preset",
    "grid_arms",
    "grid_experiment",
    "list_experiments",
    "load_experiment",
    "new_experiment_id",
    "parse_experiment",
    "run_arm",
    "save_experiment",
    "update_experiment",
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


# The tag of the closing repeat of the baseline arm (``ExperimentSpec.closing_baseline``).
CLOSING_TAG = "closing:baseline"
MAX_GRID_KNOBS = 4
MAX_ARMS = 16  # a 2x2x2x2 factorial
MAX_KNOB_VALUES = 8
_KNOB_FIELDS = frozenset(
    {f"server.{n}" for n in ServerConfig.model_fields}
    | {f"plan.{n}" for n in BenchmarkPlan.model_fields}
)
# Fields a grid cannot vary: what is measured (the load points) or not a setting at all.
_NOT_KNOBS = frozenset(
    {
        "plan.points",
        "plan.probe",
        "server.extra_args",
        "server.port",
        "server.host",
        "server.engine",
        "server.endpoint_url",
    }
)
# What a grid (and the launch form's grid mode) may vary: server knobs first.
GRID_KNOB_FIELDS = tuple(sorted(_KNOB_FIELDS - _NOT_KNOBS, key=lambda f: (f[0] != "s", f)))


class KnobGrid(BaseModel):
    """Knobs and their values; each knob's first value is the baseline's."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # dotted RunSpec field → values, e.g. {"server.cuda_graphs": [false, true]}
    knobs: dict[str, tuple[Any, ...]] = Field(min_length=1, max_length=MAX_GRID_KNOBS)
    design: Literal["auto", "factorial", "one-at-a-time"] = Field(
        "auto", description="auto: factorial up to 16 arms, else one-at-a-time"
    )
    # The configuration whose difference to the baseline is explained; default: every
    # knob's last value.
    after: dict[str, Any] | None = None

    @field_validator("knobs")
    @classmethod
    def _knobs(cls, knobs: dict[str, tuple[Any, ...]]) -> dict[str, tuple[Any, ...]]:
        for name, values in knobs.items():
            if name not in GRID_KNOB_FIELDS:
                raise ValueError(
                    f"{name!r} is not a knob a grid can vary; name a field "
                    "like server.cuda_graphs or server.mem_fraction_static"
                )
            if not 2 <= len(values) <= MAX_KNOB_VALUES:
                raise ValueError(f"{name}: give 2 to {MAX_KNOB_VALUES} values (not {len(values)})")
            keys = [json.dumps(v, sort_keys=True) for v in values]
            if len(set(keys)) != len(keys):
                raise ValueError(f"{name}: the values must be distinct")
        return knobs

    @model_validator(mode="after")
    def _after(self) -> KnobGrid:
        for name, value in (self.after or {}).items():
            if name not in self.knobs:
                raise ValueError(f"after names {name!r}, which is not one of the knobs")
            if not any(same_value(value, v) for v in self.knobs[name]):
                raise ValueError(f"after: {name}={value!r} is not one of its grid values")
        return self

    @property
    def baseline(self) -> dict[str, Any]:
        return {k: v[0] for k, v in self.knobs.items()}

    @property
    def after_config(self) -> dict[str, Any]:
        return {k: (self.after or {}).get(k, v[-1]) for k, v in self.knobs.items()}

    @property
    def factorial_size(self) -> int:
        return math.prod(len(v) for v in self.knobs.values())

    @property
    def resolved_design(self) -> Literal["factorial", "one-at-a-time"]:
        if self.design == "auto":
            return "factorial" if self.factorial_size <= MAX_ARMS else "one-at-a-time"
        return self.design

    def cells(self) -> list[dict[str, Any]]:
        """Every arm's knob values, the baseline first."""
        if self.resolved_design == "factorial":
            names = list(self.knobs)
            return [
                dict(zip(names, combo, strict=True))
                for combo in itertools.product(*self.knobs.values())
            ]
        base = self.baseline
        out = [base]
        for name, values in self.knobs.items():
            out += [{**base, name: v} for v in values[1:]]
        after = self.after_config
        if after not in out:  # the explained configuration is always measured
            out.append(after)
        return out


def _control_rank(value: Any) -> tuple[int, float, str]:
    """How much a knob value reads as the control: off/default first, then the lower
    number, then on; any other text (a model path, a backend name) last."""
    if (
        value is None
        or value is False
        or (
            isinstance(value, str)
            and value.lower() in ("off", "false", "none", "default", "disabled", "")
        )
    ):
        return (0, 0.0, "")
    if isinstance(value, int | float) and not isinstance(value, bool):
        return (1, float(value), "")
    if value is True or (isinstance(value, str) and value.lower() in ("on", "true", "enabled")):
        return (2, 0.0, "")
    return (3, 0.0, "")


def control_of(values: Sequence[Any]) -> int:
    """THE baseline rule: the index of the control among the knob values of the arms
    (or runs): the knob's off / default / lower value. Ties, and values none of which
    reads as a control (two model paths), keep the first: the order the user gave."""
    if not values:
        return 0
    ranks = [_control_rank(v) for v in values]
    return ranks.index(min(ranks))


def baseline_arm(spec: Mapping[str, Any]) -> str:
    """THE baseline of an experiment (``experiment.json``'s spec, or ``ExperimentSpec``
    through its property): its declared ``baseline`` arm, else the control (``control_of``)
    on the first knob the arms vary, the base's value where an arm leaves it alone. Pages,
    exports and the CLI all ask here."""
    arms = [a for a in spec.get("arms") or [] if isinstance(a, dict)]
    labels = [str(a.get("label")) for a in arms]
    if not labels:
        return ""
    declared = spec.get("baseline")
    if declared in labels:
        return str(declared)
    knobs = list(dict.fromkeys(k for a in arms for k in (a.get("changes") or {})))
    if not knobs:
        return labels[0]
    group, _, name = knobs[0].partition(".")
    default = ((spec.get("base") or {}).get(group) or {}).get(name)
    return labels[control_of([(a.get("changes") or {}).get(knobs[0], default) for a in arms])]


# Names a team says for the knobs that meet most often in a grid, so an arm's label reads
# "graphs=on mem=0.92" in legends and verdicts (a label is at most 40 characters).
KNOB_ALIASES = {
    "cuda_graphs": "graphs",
    "mem_fraction_static": "mem",
    "continuous_batching": "batching",
    "tp_size": "tp",
    "attention_backend": "attn",
    "cuda_graph_max_bs": "graph_bs",
    "cb_max_memory_percent": "cb_mem",
    "engine_install": "install",
}


def _short(name: str) -> str:
    """server.mem_fraction_static → mfs (labels are at most 40 characters)."""
    return "".join(part[:1] for part in name.split(".", 1)[-1].split("_"))


_LABEL_UNSAFE = re.compile(r"[^\w.:+=/-]")


def arm_label(changes: Mapping[str, Any], names: str = "alias") -> str:
    """THE name of an arm (or a run) by the knob values it sets: ``graphs=on mem=0.92``
    (``names`` "alias": KNOB_ALIASES, else the field, ``dtype=bfloat16``; "initials":
    ``cg=on``). A grid's arms, Compare's runs of no experiment and the shipped demo all
    read this one spelling."""

    def name(knob: str) -> str:
        field = knob.split(".", 1)[-1]
        if names == "initials":
            return _short(knob)
        return KNOB_ALIASES.get(field, field)

    return " ".join(f"{name(k)}={_LABEL_UNSAFE.sub('_', knob_text(v))}" for k, v in changes.items())


ARM_TAG = "arm-label:"
_OLD_ARM_TAG = "arm:"  # before the label was kept as given: its spaces written as -


def arm_tag(label: str) -> str:
    """The tag that names a run's arm: its label as given (``arm-label:graphs=on mem=0.92``),
    so it reads back exactly (``arm_of_tags``)."""
    return ARM_TAG + label


def arm_of_tags(tags: Any, labels: Sequence[str] = ()) -> str | None:
    """The arm label a run's tags name; None when they name none. An older run's tag
    (``arm:<label>`` with its spaces written as -) reads as the one of ``labels`` (the
    experiment's arm labels, where known) it was written from, else with - read as a space,
    as it always was."""
    for tag in tags or []:
        if isinstance(tag, str) and tag.startswith(ARM_TAG) and len(tag) > len(ARM_TAG):
            return tag[len(ARM_TAG) :]
    for tag in tags or []:
        if isinstance(tag, str) and tag.startswith(_OLD_ARM_TAG) and len(tag) > 4:
            old = tag[len(_OLD_ARM_TAG) :]
            match = [lab for lab in labels if lab.replace(" ", "-") == old]
            return match[0] if len(match) == 1 else old.replace("-", " ")
    return None


@lru_cache(maxsize=256)
def _arm_labels(record: Path) -> tuple[str, ...]:
    found = read_experiment(record)  # an experiment's arms never change once it is saved
    return tuple(found.arm_labels) if found is not None else ()


def run_arm(tags: Any, runs_dir: Path | None) -> str | None:
    """The arm a run's tags name (``arm_of_tags``), an older run's read against its
    experiment's arm labels (the record beside ``runs_dir``, where the data folder keeps
    it), so ``install=sglang-0.5.14`` stays that label, not ``install=sglang 0.5.14``."""
    tags = [t for t in tags or [] if isinstance(t, str)]
    exp = next((t[4:] for t in tags if t.startswith("exp:")), None)
    labels: tuple[str, ...] = ()
    old = not any(t.startswith(ARM_TAG) for t in tags)
    if old and exp is not None and runs_dir is not None and re.fullmatch(r"exp-[\w-]{1,60}", exp):
        labels = _arm_labels(runs_dir.parent / "experiments" / exp / EXPERIMENT_FILE)
    return arm_of_tags(tags, labels)


def _cell_label(cell: dict[str, Any], index: int, names: str) -> str:
    text = arm_label(cell, names)
    return text if len(text) <= 40 else f"arm {index + 1}"


def grid_arms(grid: KnobGrid) -> tuple[tuple[Arm, ...], str]:
    """The grid's arms (every arm sets every knob) and the baseline arm's label."""
    cells = grid.cells()
    if len(cells) > MAX_ARMS:
        fix = (
            "use design one-at-a-time or fewer values"
            if grid.resolved_design == "factorial"
            else "use fewer knobs or values"
        )
        raise ConfigError(
            "grid.design",
            f"{grid.resolved_design} gives {len(cells)} arms, at most {MAX_ARMS}: {fix}",
        )
    for names in ("alias", "initials"):  # the first that fits every label
        labels = [_cell_label(c, i, names) for i, c in enumerate(cells)]
        if len(set(labels)) == len(labels) and not any(x.startswith("arm ") for x in labels):
            break
    if len(set(labels)) != len(labels):
        labels = [f"arm {i + 1}" for i in range(len(cells))]
    arms = tuple(Arm(label=lab, changes=c) for lab, c in zip(labels, cells, strict=True))
    return arms, labels[0]


def grid_experiment(
    name: str,
    base: RunSpec,
    grid: KnobGrid,
    trials: int | Literal["auto"] = 3,
    **extra: Any,
) -> ExperimentSpec:
    """An experiment over the grid's arms; each knob value is checked against the base
    (ConfigError naming ``grid.knobs.<field>[i]``)."""
    base = base.model_copy(update={"intended_diff": ()})
    data = base.model_dump(mode="json")
    for knob, values in grid.knobs.items():
        for i, value in enumerate(values):
            try:
                RunSpec.model_validate(_apply(data, {knob: value}))
            except ValidationError as exc:
                raise config_error(
                    exc, field=f"grid.knobs.{knob}[{i}]", subject=knob_text(value)
                ) from exc
    arms, baseline = grid_arms(grid)
    try:
        return ExperimentSpec(
            name=name, base=base, arms=arms, trials=trials, grid=grid, baseline=baseline, **extra
        )
    except ValidationError as exc:
        raise config_error(exc, default="experiment") from exc


MAX_TRIALS = 50
DEFAULT_MARGIN = 0.05  # the equivalence margin where the plan sets none (±5 %)


class ExperimentSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, max_length=120)
    base: RunSpec = RunSpec()
    arms: tuple[Arm, ...] = Field(min_length=1, max_length=MAX_ARMS)
    # A number of trials, or "auto": trials are added one at a time until the stop rule
    # (core/analysis/sequential.py) decides every headline contrast, or a limit is hit.
    trials: Annotated[int, Field(ge=1, le=MAX_TRIALS)] | Literal["auto"] = 3
    min_trials: int = Field(3, ge=2, le=MAX_TRIALS, description="trials: auto: first look")
    max_trials: int = Field(10, ge=2, le=MAX_TRIALS, description="trials: auto: the last")
    max_minutes: float | None = Field(
        None, gt=0, le=7 * 24 * 60, description="trials: auto: no new trial after this long"
    )
    # metric -> relative margin (0.05 = ±5 %) inside which an arm counts as equivalent to
    # the baseline; a metric left out: equivalence_margin_pct (never an A/A result).
    equivalence_margin: dict[str, float] = Field(default_factory=dict)
    # The margin of the verdict's "equivalent within ±M %" (every metric, fixed or auto
    # trials): a difference whose whole 95 % interval lies inside ±M reads equivalent.
    equivalence_margin_pct: float = Field(DEFAULT_MARGIN * 100)
    order_seed: int = Field(default_factory=lambda: secrets.randbelow(2**31))
    kind: str = Field("ab", description="ab, or aa for a noise-floor check")
    baseline: str | None = Field(
        None, description="the arm others are compared with; default: the last arm"
    )
    grid: KnobGrid | None = Field(None, description="the knob grid the arms came from")
    closing_baseline: bool = Field(
        False,
        description="run the baseline arm once more after the last trial: its difference "
        "from the baseline's first run bounds the host's drift (it is no trial)",
    )

    @field_validator("arms")
    @classmethod
    def _arms(cls, arms: tuple[Arm, ...]) -> tuple[Arm, ...]:
        labels = [a.label for a in arms]
        if len(set(labels)) != len(labels):
            raise ValueError("arm labels must be distinct")
        return arms

    @field_validator("equivalence_margin")
    @classmethod
    def _margins(cls, margins: dict[str, float]) -> dict[str, float]:
        for metric, margin in margins.items():
            if metric not in VERDICT_METRICS:
                raise ValueError(
                    f"{metric!r} is not a headline metric; name one of "
                    + ", ".join(VERDICT_METRICS)
                )
            if not 0 < margin < 1:
                raise ValueError(
                    f"{metric}: give the margin as a fraction between 0 and 1 (0.05 = ±5 %), "
                    f"not {margin}"
                )
        return margins

    @field_validator("equivalence_margin_pct")
    @classmethod
    def _margin_pct(cls, pct: float) -> float:
        if not 0 < pct < 100:
            raise ValueError(
                f"equivalence_margin_pct is a percentage between 0 and 100 (5 = ±5 %), "
                f"not {pct}; give e.g. equivalence_margin_pct: 5"
            )
        return pct

    @model_validator(mode="after")
    def _baseline(self) -> ExperimentSpec:
        if self.baseline is not None and self.baseline not in {a.label for a in self.arms}:
            raise ValueError(f"baseline {self.baseline!r} is not one of the arm labels")
        return self

    @model_validator(mode="after")
    def _adaptive(self) -> ExperimentSpec:
        if self.trials != "auto":
            # a saved fixed-trials spec carries these at their defaults: only a changed one
            # says the user meant auto
            fields = type(self).model_fields
            given = [
                k
                for k in ("min_trials", "max_trials", "max_minutes", "equivalence_margin")
                if getattr(self, k) != fields[k].get_default(call_default_factory=True)
            ]
            if given:
                raise ValueError(
                    f"{', '.join(given)} apply to trials: auto; set trials: auto or leave them out"
                )
        elif self.closing_baseline:
            # the closing run goes after the last trial, which only the stop rule knows
            raise ValueError(
                "closing_baseline needs a fixed number of trials (the last trial of trials: "
                "auto is known only when it stops); set trials to a number or leave it out"
            )
        elif self.min_trials > self.max_trials:
            raise ValueError(
                f"min_trials ({self.min_trials}) is above max_trials ({self.max_trials}); "
                "raise max_trials or lower min_trials"
            )
        return self

    @property
    def adaptive(self) -> bool:
        return self.trials == "auto"

    @property
    def first_trials(self) -> int:
        """How many trials are queued at once: all of them, or min_trials for auto."""
        return self.min_trials if self.trials == "auto" else self.trials

    @property
    def baseline_arm(self) -> str:
        """The arm the others are compared with (``baseline_arm``: the one rule)."""
        return baseline_arm(self.model_dump(mode="json"))

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
    """(arm label, trial, spec) in execution order: arms shuffled within each trial; with
    ``closing_baseline``, the baseline arm once more at the end (``_closing_run``). An
    adaptive experiment (trials: auto) starts with its min_trials; ``expand_trial`` gives
    each later one."""
    runs = [run for trial in range(exp.first_trials) for run in expand_trial(exp, exp_id, trial)]
    if exp.closing_baseline:
        runs.append(_closing_run(exp, runs))
    return runs


def _arm_order(exp: ExperimentSpec, trial: int) -> list[Arm]:
    """Trial ``trial``'s arm order: the seeded shuffle sequence, the same whether the
    trials are expanded at once or one at a time (an adaptive experiment)."""
    rng = random.Random(exp.order_seed)
    arms: list[Arm] = []
    for _ in range(trial + 1):
        arms = list(exp.arms)
        rng.shuffle(arms)
    return arms


def expand_trial(
    exp: ExperimentSpec, exp_id: str, trial: int, only: Sequence[str] | None = None
) -> list[tuple[str, int, RunSpec]]:
    """Trial ``trial``'s runs (arm label, trial, spec) in their shuffled order; ``only``:
    just these arms (a failed arm queued again)."""
    base = exp.base.model_dump(mode="json")
    baseline = arm_tag(exp.baseline_arm)
    runs = []
    for arm in _arm_order(exp, trial):
        if only is not None and arm.label not in only:
            continue
        data = _apply(base, arm.changes)
        data["tags"] = [
            *base.get("tags", []),
            f"exp:{exp_id}",
            arm_tag(arm.label),
            f"trial:{trial}",
        ]
        data["intended_diff"] = list(exp.knobs)
        # the answers check scores the baseline arm's tokens in every run (core/run/answers_step.py)
        answers = data["plan"].get("answers")
        answers = {"enabled": answers} if isinstance(answers, bool) else dict(answers or {})
        data["plan"]["answers"] = {**answers, "baseline_tag": baseline}
        try:
            spec = RunSpec.model_validate(data)
        except ValidationError as exc:
            raise config_error(exc, field=f"arms[{arm.label}]") from exc
        runs.append((arm.label, trial, spec))
    return runs


def _closing_run(
    exp: ExperimentSpec, runs: list[tuple[str, int, RunSpec]]
) -> tuple[str, int, RunSpec]:
    """The baseline arm's run once more, after the last trial: as trial ``exp.trials`` (one
    past the last, so it pairs with nothing) and tagged ``closing:baseline``."""
    label = exp.baseline_arm
    spec = next(s for a, t, s in runs if a == label and t == 0)
    tags = [t for t in spec.tags if not t.startswith("trial:")]
    tags += [f"trial:{exp.first_trials}", CLOSING_TAG]
    return label, exp.first_trials, spec.model_copy(update={"tags": tuple(tags)})


def parse_experiment(data: dict[str, Any]) -> ExperimentSpec:
    """A plan file's experiment: arms, or a ``grid`` (knobs → values, ``design``) whose
    arms are generated (then ``arms`` must be left out)."""
    if isinstance(data, dict) and data.get("grid") is not None and not data.get("arms"):
        return _parse_grid_experiment(data)
    try:
        return ExperimentSpec.model_validate(data)
    except ValidationError as exc:
        raise config_error(exc, default="experiment") from exc


def _parse_grid_experiment(data: dict[str, Any]) -> ExperimentSpec:
    for model, key in ((KnobGrid, "grid"), (RunSpec, "base")):
        try:
            model.model_validate(data.get(key) or {})
        except ValidationError as exc:
            raise config_error(exc, prefix=key) from exc
    grid = KnobGrid.model_validate(data["grid"])
    rest = {k: v for k, v in data.items() if k not in ("grid", "base", "arms")}
    if "baseline" in rest:
        raise ConfigError(
            "baseline", "a grid's baseline is every knob's first value; leave baseline out"
        )
    try:
        probe = ExperimentSpec.model_validate({**rest, "arms": [{"label": "x"}]})
    except ValidationError as exc:
        raise config_error(exc, default="experiment") from exc
    adaptive = {
        k: getattr(probe, k)
        for k in ("min_trials", "max_trials", "max_minutes", "equivalence_margin")
        if k in probe.model_fields_set
    }
    return grid_experiment(
        probe.name,
        RunSpec.model_validate(data.get("base") or {}),
        grid,
        probe.trials,
        order_seed=probe.order_seed,
        kind=probe.kind,
        closing_baseline=probe.closing_baseline,
        equivalence_margin_pct=probe.equivalence_margin_pct,
        **adaptive,
    )


def experiment_from_preset(
    name: str,
    base: RunSpec,
    arms: list[tuple[str, dict[str, Any]]],
    trials: int | Literal["auto"] = 3,
    kind: str = "ab",
    **adaptive: Any,
) -> ExperimentSpec:
    """``adaptive``: min_trials, max_trials, max_minutes for ``trials="auto"``."""
    return ExperimentSpec(
        name=name,
        base=base.model_copy(update={"intended_diff": ()}),
        trials=trials,
        kind=kind,
        **adaptive,
        arms=tuple(
            Arm(label=label, changes={f"server.{k}": v for k, v in ch.items()})
            for label, ch in arms
        ),
    )


def _dir(settings: Settings) -> Path:
    return settings.data_dir / "experiments"


def save_experiment(
    settings: Settings, exp: ExperimentSpec, runs: list[tuple[str, int, str]], exp_id: str
) -> Path:
    """Write experiment.json: the spec, the order seed and which run is which arm/trial."""
    folder = _dir(settings) / exp_id
    try:
        folder.mkdir(parents=True, exist_ok=False)
    except OSError as exc:
        raise StoreError(f"cannot create experiment folder {folder}: {exc}") from exc
    record = ExperimentRecord(
        experiment_id=exp_id,
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        host=platform.node(),
        spec=redact_spec(exp.model_dump(mode="json")),  # no API key in experiment.json
        runs=[
            ExperimentRun(
                run_id=rid,
                arm=arm,
                trial=trial,
                # set only where true: experiment.json keeps the keys every version wrote
                **({"closing": True} if exp.closing_baseline and trial >= exp.first_trials else {}),
            )
            for arm, trial, rid in runs
        ],
    )
    write_json_atomic(folder / EXPERIMENT_FILE, record.as_json())
    return folder


def update_experiment(settings: Settings, record: ExperimentRecord) -> None:
    """Write experiment.json again (atomically): an adaptive experiment's controller adds
    runs and looks. Only the worker that owns the queue calls it, so there is one writer."""
    folder = _dir(settings) / record.experiment_id
    if not folder.is_dir():
        raise StoreError(f"no experiment folder {folder}")
    write_json_atomic(folder / EXPERIMENT_FILE, record.as_json())


def new_experiment_id() -> str:
    return "exp-" + datetime.now(UTC).strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


def load_experiment(settings: Settings, exp_id: str) -> ExperimentRecord | None:
    """The experiment ``exp_id``; None for no such experiment (or not an experiment id)."""
    if not re.fullmatch(r"exp-[\w-]{1,60}", exp_id):
        return None
    return read_experiment(_dir(settings) / exp_id / EXPERIMENT_FILE)


def list_experiments(settings: Settings) -> list[ExperimentRecord]:
    """Every experiment that has a readable record, newest first."""
    root = _dir(settings)
    if not root.is_dir():
        return []
    found = (
        read_experiment(path / EXPERIMENT_FILE) for path in sorted(root.iterdir(), reverse=True)
    )
    return [r for r in found if r is not None]
