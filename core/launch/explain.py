"""Explain a difference between two runs: the factorial experiment over exactly the knobs
that differ.

Run A is the baseline: every other field keeps A's value. The knobs are the ``server.*`` and
``plan.*`` fields whose values differ (known on both sides: an imported run's unstated field
is not a difference). What ServeLab cannot set is listed as not explainable: the engine
version and GPU (host facts), the load points and probe (what is measured, not a knob), and
the engine itself. ``python -m core explain RUN_A RUN_B`` and the Compare page's button both
call ``submit_explanation``, after showing ``check_explanation``: how many runs and about how
many GPU-minutes, whether this host (or the chosen executor) can run them, and an existing
experiment that already answers the question.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import ValidationError

from core.analysis.diff import (
    INERT_FIELDS,
    differing_fields,
    environment_differences,
    flatten_config,
    unknown_fields,
    version_change,
)
from core.analysis.runs import RunView, load_run
from core.config import BenchmarkPlan, Point, RunSpec, ServerConfig, config_error, same_value
from core.errors import ConfigError
from core.executors import executor_for, runs_here
from core.experiments.design import (
    MAX_GRID_KNOBS,
    ExperimentSpec,
    KnobGrid,
    expand,
    grid_experiment,
    list_experiments,
)
from core.launch.grid import grid_estimate, run_count
from core.launch.host import HostInfo, gpu_need, host_for
from core.launch.preflight import preflight
from core.launch.queue import queue_experiment
from core.run_folder import find_runs
from core.settings import Settings
from core.shapes import model_label
from core.store import Catalog

__all__ = [
    "ExplainCheck",
    "ExplainPlan",
    "answering_experiment",
    "check_explanation",
    "explain_plan",
    "explanation_experiment",
    "handle",
    "submit_explanation",
]

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
    "facts.engine_version": "the engine installed where it runs (name installations to "
    "vary it: server.engine_install, README 'Engines')",
    "facts.gpu": "the GPU it is placed on",
}


@dataclass(frozen=True)
class ExplainPlan:
    """What an explanation of B vs A would vary, and what it cannot."""

    run_a: str
    run_b: str
    knobs: dict[str, tuple[Any, Any]]  # field → (A's value, B's value)
    not_explainable: dict[str, str]  # field → why ServeLab cannot vary it
    # what a knob explains beyond itself: the engine version an installation brings
    # ("engine version 0.5.14→0.5.17 (installation sglang-0.5.14→sglang-0.5.17)")
    explained: tuple[str, ...] = ()

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
    # The engine version is a fact of the installation: when the runs differ by
    # server.engine_install, that knob varies it (environment_differences leaves it out).
    for f in environment_differences(views):
        # With the two values: the reader sees what the experiment will not reproduce.
        not_explainable[f] = (
            f"{flat_a.get(f)} → {flat_b.get(f)}; ServeLab cannot set "
            f"it, so every arm runs on "
            f"{_WHERE.get(f, 'this host')}"
        )
    version = version_change(views)
    return ExplainPlan(a.run_id, b.run_id, knobs, not_explainable, (version,) if version else ())


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


@dataclass(frozen=True)
class ExplainCheck:
    """What queueing an explanation would take, known before anything is queued."""

    runs: int
    estimate: str  # grid_estimate's words: runs, arms, trials, about how long
    gpu_minutes: float | None  # earlier runs' median × runs × GPUs per run; None: unknown
    gpus_per_run: int  # 0: the runs need no GPU
    problems: dict[str, str]  # field → what the host/executor lacks, and how to get it
    where: str  # "this host" or the Ray cluster
    answered_by: str | None  # an experiment whose arms vary exactly these knobs

    @property
    def runnable(self) -> bool:
        return not self.problems


def answering_experiment(settings: Settings, a: RunView, plan: ExplainPlan) -> str | None:
    """The newest experiment that already answers "which knob made B differ from A": same
    engine and model as A, its arms vary exactly the knobs that differ, and both A's and B's
    values are among its arms. None when there is none."""
    if not plan.knobs:
        return None
    server = a.spec.get("server") or {}
    knobs = list(plan.knobs)
    wanted = [tuple(v[0] for v in plan.knobs.values()), tuple(v[1] for v in plan.knobs.values())]
    for rec in list_experiments(settings):
        base = dict((rec.spec.get("base") or {}).get("server") or {})
        same_model = model_label(base) == model_label(server)  # a shape's name, else the model
        if base.get("engine") != server.get("engine") or not same_model:
            continue
        arms = [dict(arm.get("changes") or {}) for arm in rec.spec.get("arms") or []]
        if {k for changes in arms for k in changes} != set(knobs):
            continue
        cells = [
            tuple(changes.get(k, base.get(k.partition(".")[2])) for k in knobs) for changes in arms
        ]
        if all(
            any(all(same_value(c, w) for c, w in zip(cell, want, strict=True)) for cell in cells)
            for want in wanted
        ):
            return rec.experiment_id
    return None


def check_explanation(
    settings: Settings,
    a: RunView,
    b: RunView,
    trials: int = 3,
    design: Design = "factorial",
    *,
    host: HostInfo | None = None,
) -> ExplainCheck:
    """Before queueing: the run count, the estimated GPU-minutes (from earlier succeeded runs
    of the same engine and model here), whether ``host`` (default: where the runs would go,
    this host or the Ray cluster) can run them (THE gate, ``preflight``: what queueing it
    would refuse), and an experiment that already answers.
    Raises ConfigError when there is nothing to explain (``explanation_experiment``)."""
    exp, plan = explanation_experiment(a, b, trials, design)
    server = exp.base.server
    executor = executor_for(exp.base, settings)
    arms = [s for _, t, s in expand(exp, "check") if t == 0]
    host = host or _host(settings, executor, arms)
    problems = {p.field: p.text for p in preflight(exp, host, settings)}
    history = Catalog(settings.catalog_path, settings.runs_dir).recent_durations_s(
        server.engine, server.model
    )
    need = gpu_need(exp.base)
    gpus = need[1] if need else 0
    runs = run_count(exp)
    return ExplainCheck(
        runs=runs,
        estimate=grid_estimate(exp, history, parallel=not runs_here(executor)),
        gpu_minutes=statistics.median(history) * runs * gpus / 60 if history and gpus else None,
        gpus_per_run=gpus,
        problems=problems,
        where=host.where,
        answered_by=answering_experiment(settings, a, plan),
    )


def _host(settings: Settings, executor: str, arms: Sequence[RunSpec]) -> HostInfo:
    """Where the arms would run, with their engines and named installations detected."""
    return host_for(
        settings,
        executor,
        [s.server.engine for s in arms],
        [s.server.engine_install for s in arms],
    )


def _views(settings: Settings, run_a: str, run_b: str) -> tuple[RunView, RunView]:
    out = []
    for field, rid in (("RUN_A", run_a), ("RUN_B", run_b)):
        found, _ = find_runs(settings.runs_dir, [rid])
        if not found or found[0].run_id != rid:
            raise ConfigError(field, f"no run {rid!r}; see `python -m core runs`")
        out.append(load_run(found[0]))
    return out[0], out[1]


def submit_explanation(
    settings: Settings,
    run_a: str,
    run_b: str,
    trials: int = 3,
    design: Design = "factorial",
    *,
    host: HostInfo | None = None,
) -> tuple[str, ExplainPlan]:
    """Queue the experiment that explains B vs A; returns its id and the plan. Refused
    (ConfigError, nothing queued) when ``host`` (default: where the runs would go) cannot
    run them."""
    exp, plan = explanation_experiment(*_views(settings, run_a, run_b), trials, design)
    arms = [s for _, t, s in expand(exp, "check") if t == 0]
    host = host or _host(settings, executor_for(exp.base, settings), arms)
    return queue_experiment(settings, exp, host=host), plan


def explain_views(views: Sequence[RunView], baseline: int = 0) -> ExplainPlan | None:
    """For the Compare page: the plan for the first non-baseline run vs the baseline."""
    others = [v for i, v in enumerate(views) if i != baseline]
    return explain_plan(views[baseline], others[0]) if others else None


def check_text(check: ExplainCheck) -> str:
    """The check in words, for the CLI and the page: runs, time, and what answers already."""
    text = check.estimate.rstrip(".")
    if check.gpu_minutes is not None:
        text += f"; about {check.gpu_minutes:.0f} GPU-minutes ({check.gpus_per_run} GPU per run)"
    elif check.gpus_per_run:
        text += "; GPU-minutes unknown until a run of this engine and model has finished here"
    if check.answered_by:
        text += (
            f". Experiment {check.answered_by} already varies exactly these knobs: "
            f"`python -m core experiment --show {check.answered_by}`"
        )
    return text + "."


# --- command line (the parser: core/cli.py) ------------------------------------------------------


def handle(args: argparse.Namespace) -> int:
    from core.settings import load_settings

    settings = load_settings()
    check = check_explanation(
        settings, *_views(settings, args.run_a, args.run_b), args.trials, args.design
    )
    print(check_text(check))
    exp_id, plan = submit_explanation(settings, args.run_a, args.run_b, args.trials, args.design)
    print(
        f"experiment {exp_id} queued: {args.design} over "
        + ", ".join(f"{k} {va!r}→{vb!r}" for k, (va, vb) in plan.knobs.items())
    )
    for field, why in plan.not_explainable.items():
        print(f"not explainable: {field}: {why}")
    for line in plan.explained:
        print(f"explained by the installation: {line}")
    print(
        f"the portal's worker runs it; `python -m core experiment --show {exp_id}` "
        "prints the attribution"
    )
    return 0
