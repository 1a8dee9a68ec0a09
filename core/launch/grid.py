"""The launch form's "Grid / sweep" mode: knob rows (a knob and its comma-separated values)
→ a grid experiment over the form's configuration, every problem beside its row.

The base configuration is the form's own (checked by ``core.launch.forms`` as for a single run);
each grid value is then checked against that base (``grid_experiment``) and every arm by THE
gate (``core.launch.preflight``), so a value this host, engine or model refuses is reported
beside its row before anything is queued.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from core.config import config_error
from core.errors import ConfigError
from core.experiments.design import (
    GRID_KNOB_FIELDS,
    MAX_GRID_KNOBS,
    ExperimentSpec,
    KnobGrid,
    expand,
    grid_experiment,
)
from core.launch.forms import form_adaptive, launch_from_form
from core.launch.host import HostInfo
from core.launch.preflight import Problem, preflight
from core.launch.presets import PRESETS, rough_text
from core.numbers import minutes_text
from core.settings import Settings, load_settings

__all__ = [
    "GRID_KNOB_FIELDS",
    "GRID_ROWS",
    "grid_estimate",
    "grid_from_form",
    "parse_values",
    "run_count",
]

GRID_ROWS = MAX_GRID_KNOBS
_TRUE, _FALSE, _NONE = ("true", "on", "yes"), ("false", "off", "no"), ("default", "none")


def parse_values(text: str) -> list[Any]:
    """``false, true`` / ``0.85, 0.92`` / ``8, 32, 128`` / ``fa3, triton`` as typed values
    (``default`` = the engine's default, None)."""
    out: list[Any] = []
    for item in (t.strip() for t in str(text).split(",")):
        if not item:
            continue
        low = item.lower()
        if low in _TRUE or low in _FALSE:
            out.append(low in _TRUE)
        elif low in _NONE:
            out.append(None)
        elif re.fullmatch(r"[+-]?\d+", item):
            out.append(int(item))
        else:
            try:
                number = float(item)
            except ValueError:
                out.append(item)
            else:
                out.append(number if math.isfinite(number) else item)
    return out


def _row_of(field: str, message: str, knobs: Sequence[str]) -> str:
    """A grid error's form key: the row of the knob it names, else the grid as a whole."""
    for i, knob in enumerate(knobs):
        if field.startswith(f"grid.knobs.{knob}") or (field == "grid.knobs" and knob in message):
            return f"grid_values_{i}"
    return "grid_design" if field == "grid.design" else "grid"


def grid_from_form(
    form: dict[str, Any],
    rows: Sequence[tuple[str, str]],
    design: str,
    host: HostInfo,
    *,
    settings: Settings | None = None,
    local: bool = True,
) -> tuple[ExperimentSpec | None, dict[str, str]]:
    """(experiment, {}) or (None, {form key: message}); rows are (knob field, values text),
    an empty knob skips its row."""
    settings = settings or load_settings()
    single = next(p.name for p in PRESETS if len(p.arms) == 1 and not p.intended)
    specs, errors = launch_from_form(
        {**form, "preset": single}, host, settings=settings, local=local
    )
    trials, trials_errors = form_adaptive(form)
    errors.update(trials_errors)
    knobs: dict[str, list[Any]] = {}
    used: list[str] = []
    for i, (knob, text) in enumerate(rows):
        if not knob:
            continue
        if knob not in GRID_KNOB_FIELDS:
            errors[f"grid_knob_{i}"] = (
                f"{knob!r} is not a knob a grid can vary; pick one from the list"
            )
        elif knob in knobs:
            errors[f"grid_knob_{i}"] = f"{knob} is already in row {used.index(knob) + 1}"
        else:
            values = parse_values(text)
            if len(values) < 2:
                errors[f"grid_values_{i}"] = (
                    "give two or more values separated by commas, e.g. false, true or 0.85, 0.92"
                )
            knobs[knob] = values
            used.append(knob)
    if not knobs:
        errors["grid"] = "pick at least one knob and its values"
    if errors or not specs:
        return None, errors
    name = "Grid: " + " × ".join(k.split(".", 1)[-1] for k in knobs)
    try:
        grid = KnobGrid.model_validate({"knobs": knobs, "design": design})
        exp = grid_experiment(name, specs[0], grid, **trials)
    except (ConfigError, ValidationError) as exc:
        err = exc if isinstance(exc, ConfigError) else config_error(exc, prefix="grid")
        return None, {_row_of(err.field, err.message, used): err.message}
    for problem, arm, changed in _arm_problems(exp, host, settings, local):
        key = _row_of(f"grid.knobs.{problem.field}", problem.message, used)
        if key == "grid" and changed is not None:
            key = _row_of(f"grid.knobs.{changed}", "", used)  # found in the arm this knob makes
        errors.setdefault(key, f"arm {arm}: {problem.text}")
    return (None, errors) if errors else (exp, {})


def _arm_problems(
    exp: ExperimentSpec, host: HostInfo, settings: Settings, local: bool
) -> list[tuple[Problem, str, str | None]]:
    """THE gate's problems of each arm (``preflight``), with the arm and the first knob it
    changes from the baseline (a problem none of its knobs names, such as a context a
    smaller model cannot hold, belongs to that knob's row)."""
    out: list[tuple[Problem, str, str | None]] = []
    changes = {a.label: a.changes for a in exp.arms}
    base = changes.get(exp.baseline_arm, {})
    for arm, _, spec in expand(exp, "exp-check")[: len(exp.arms)]:
        knob = next((k for k, v in changes.get(arm, {}).items() if base.get(k) != v), None)
        out += [(p, arm, knob) for p in preflight(spec, host, settings, local=local)]
    return out


def run_count(exp: ExperimentSpec) -> int:
    """How many runs ``exp`` queues at most (trials: auto, its largest trial count), its
    closing baseline run included."""
    trials = exp.max_trials if exp.adaptive else exp.first_trials
    return len(exp.arms) * trials + (1 if exp.closing_baseline else 0)


def grid_estimate(
    exp: ExperimentSpec, history_s: Sequence[float], *, parallel: bool = False
) -> str:
    """How many runs the grid queues and about how long they take (median of earlier
    runs of this engine and model here)."""
    arms = len(exp.arms)
    trials = exp.max_trials if exp.adaptive else exp.first_trials
    # "2 arms, factorial" names a grid's design; plain arms need no second word.
    design = f", {exp.grid.resolved_design}" if exp.grid else ""
    closing = " + a closing baseline run" if exp.closing_baseline else ""
    runs = run_count(exp)
    count = (
        f"{arms * exp.min_trials} to {runs} runs ({arms} arms{design} × "
        f"{exp.min_trials} to {trials} trials: auto, until the answer is clear)"
        if exp.adaptive
        else f"{runs} runs ({arms} arms{design} × {trials} trials{closing})"
    )
    if not history_s:
        return (
            f"{count}. No finished run of this engine and model here yet to estimate from. "
            + rough_text(exp.base, runs, parallel)
        )
    per_run = statistics.median(history_s)
    total = per_run if parallel else per_run * runs
    return (
        f"{count}: about {minutes_text(total)} (median {minutes_text(per_run)} per run over "
        f"{len(history_s)} finished run(s) of this engine and model)"
    )
