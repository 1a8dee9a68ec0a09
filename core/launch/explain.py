"""Explain a difference between two runs: the factorial experiment over exactly the knobs
that differ.

Run A is the baseline: every other field keeps A's value. The knobs are the ``server.*`` and
``plan.*`` fields whose values differ (known on both sides: an imported run's unstated field
is not a difference). What ServeLab cannot set is listed as not explainable: the engine
version and GPU (host facts), the load points and probe (what is measured, not a knob), and
the engine itself. ``python -m core explain RUN_A RUN_B`` and the Compare page's button both
call ``submit_explanation``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import ValidationError

from core.analysis.diff import (
    INERT_FIELDS,
    derived_differences,
    differing_fields,
    flatten_config,
    unknown_fields,
)
from core.analysis.runs import RunView, load_run
from core.analysis.stats import ENVIRONMENT_FIELDS
from core.config import BenchmarkPlan, Point, RunSpec, ServerConfig, config_error
from core.errors import ConfigError
from core.experiments.design import (
    MAX_GRID_KNOBS,
    ExperimentSpec,
    KnobGrid,
    grid_experiment,
)
from core.launch.queue import queue_experiment
from core.run_folder import find_runs
from core.settings import Settings

__all__ = ["ExplainPlan", "explain_plan", "explanation_experiment", "handle", "submit_explanation"]

Design = Literal["factorial", "one-at-a-time"]
_NOT_SETTABLE = {
    "server.engine": "a different engine is not a knob of one engine",
    "server.endpoint_url": "an already-running server is not launched by ServeLab",
    "server.extra_args": "free-form engine flags: give each as its own knob",
    "server.host": "where the server listens, not how it serves",
}
# ExperimentSpec.name's own limit, read from the model so the two cannot drift apart.
_NAME_MAX = min(
    getattr(m, "max_length", 10**6) for m in ExperimentSpec.model_fields["name"].metadata
)
_WHERE = {
    "facts.engine_version": "the engine installed where it runs",
    "facts.gpu": "the GPU it is placed on",
}


@dataclass(frozen=True)
class ExplainPlan:
    """What an explanation of B vs A would vary, and what it cannot."""

    run_a: str
    run_b: str
    knobs: dict[str, tuple[Any, Any]]  # field → (A's value, B's value)
    not_explainable: dict[str, str]  # field → why ServeLab cannot vary it

    @property
    def explainable(self) -> bool:
        return 1 <= len(self.knobs) <= MAX_GRID_KNOBS


def _value(view: RunView, field: str) -> Any:
    group, _, name = field.partition(".")
    return (view.spec.get(group) or {}).get(name)


def explain_plan(a: RunView, b: RunView) -> ExplainPlan:
    """The knobs that differ between A (baseline) and B, and the differences no knob
    explains."""
    views = [a, b]
    unknown = {f for fields in unknown_fields(views).values() for f in fields}
    knobs: dict[str, tuple[Any, Any]] = {}
    not_explainable: dict[str, str] = {}
    settable = {f"server.{n}" for n in ServerConfig.model_fields} | {
        f"plan.{n}" for n in BenchmarkPlan.model_fields
    }
    for f in differing_fields(views):
        if f in INERT_FIELDS or f in unknown or not f.startswith(("server.", "plan.")):
            continue
        if f.startswith(("plan.points", "plan.probe")):
            not_explainable.setdefault(
                "plan.points/probe",
                "the load or probe differs: that is what is measured, not a knob",
            )
        elif f in _NOT_SETTABLE:
            not_explainable[f] = _NOT_SETTABLE[f]
        elif f in settable:
            knobs[f] = (_value(a, f), _value(b, f))
    flat_a, flat_b = flatten_config(a), flatten_config(b)
    for f in derived_differences(views):
        if f in ENVIRONMENT_FIELDS:
            # With the two values: the reader sees what the experiment will not reproduce.
            not_explainable[f] = (
                f"{flat_a.get(f)} → {flat_b.get(f)}; ServeLab cannot set "
                f"it, so every arm runs on "
                f"{_WHERE.get(f, 'this host')}"
            )
    return ExplainPlan(a.run_id, b.run_id, knobs, not_explainable)


def _base_spec(view: RunView) -> RunSpec:
    """A's settings as a RunSpec (an imported run states fewer: defaults fill the rest)."""
    server = {
        k: v
        for k, v in (view.spec.get("server") or {}).items()
        if k in ServerConfig.model_fields and v is not None
    }
    plan = {
        k: v for k, v in (view.spec.get("plan") or {}).items() if k in BenchmarkPlan.model_fields
    }
    if "points" in plan:
        plan["points"] = [
            {k: v for k, v in p.items() if k in Point.model_fields and v is not None}
            for p in plan["points"] or []
            if isinstance(p, dict)
        ] or None
        if plan["points"] is None:
            del plan["points"]
    data = {
        "server": server,
        "plan": plan,
        **({"placement": view.spec["placement"]} if view.spec.get("placement") else {}),
    }
    try:
        return RunSpec.model_validate(data)
    except ValidationError as exc:
        raise config_error(
            exc, field="RUN_A", subject=f"{view.run_id} cannot be launched as recorded"
        ) from exc


def explanation_experiment(
    a: RunView, b: RunView, trials: int = 3, design: Design = "factorial"
) -> tuple[ExperimentSpec, ExplainPlan]:
    plan = explain_plan(a, b)
    if not plan.knobs:
        raise ConfigError(
            "RUN_B",
            f"no knob differs between {a.run_id} and {b.run_id}"
            + (
                f" (only {', '.join(plan.not_explainable)}, which ServeLab cannot vary)"
                if plan.not_explainable
                else ""
            )
            + "; nothing to explain",
        )
    if len(plan.knobs) > MAX_GRID_KNOBS:
        raise ConfigError(
            "RUN_B",
            f"{len(plan.knobs)} knobs differ "
            f"({', '.join(plan.knobs)}); at most {MAX_GRID_KNOBS} can "
            "be explained: launch a grid over the ones that matter",
        )
    grid = KnobGrid(
        knobs={k: (va, vb) for k, (va, vb) in plan.knobs.items()},
        design=design,
        after={k: vb for k, (_, vb) in plan.knobs.items()},
    )
    # The knobs in the name: the Experiments list and page title say what is varied.
    name = f"Explain {a.run_id} → {b.run_id}: " + " × ".join(
        k.partition(".")[2] for k in plan.knobs
    )
    if len(name) > _NAME_MAX:
        name = f"Explain {a.run_id} → {b.run_id}"
    return grid_experiment(name, _base_spec(a), grid, trials, kind="explain"), plan


def _views(settings: Settings, run_a: str, run_b: str) -> tuple[RunView, RunView]:
    out = []
    for field, rid in (("RUN_A", run_a), ("RUN_B", run_b)):
        found, _ = find_runs(settings.runs_dir, [rid])
        if not found or found[0].run_id != rid:
            raise ConfigError(field, f"no run {rid!r}; see `python -m core runs`")
        out.append(load_run(found[0]))
    return out[0], out[1]


def submit_explanation(
    settings: Settings, run_a: str, run_b: str, trials: int = 3, design: Design = "factorial"
) -> tuple[str, ExplainPlan]:
    """Queue the experiment that explains B vs A; returns its id and the plan."""
    exp, plan = explanation_experiment(*_views(settings, run_a, run_b), trials, design)
    return queue_experiment(settings, exp), plan


def explain_views(views: Sequence[RunView], baseline: int = 0) -> ExplainPlan | None:
    """For the Compare page: the plan for the first non-baseline run vs the baseline."""
    others = [v for i, v in enumerate(views) if i != baseline]
    return explain_plan(views[baseline], others[0]) if others else None


# --- command line (the parser: core/cli.py) ------------------------------------------------------


def handle(args: argparse.Namespace) -> int:
    from core.settings import load_settings

    settings = load_settings()
    exp_id, plan = submit_explanation(settings, args.run_a, args.run_b, args.trials, args.design)
    print(
        f"experiment {exp_id} queued: {args.design} over "
        + ", ".join(f"{k} {va!r}→{vb!r}" for k, (va, vb) in plan.knobs.items())
    )
    for field, why in plan.not_explainable.items():
        print(f"not explainable: {field}: {why}")
    print(
        f"the portal's worker runs it; `python -m core experiment --show {exp_id}` "
        "prints the attribution"
    )
    return 0
