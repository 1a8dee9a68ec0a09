"""THE pre-run gate: a run, a list of runs or an experiment, plus where it would run → every
problem that would refuse it, each naming its field and the fix. Nothing is queued unless
this returns [].

Every door asks it: the Launch form and its grid (core/launch/forms.py, grid.py), the CLI's
``run`` and ``experiment`` (core/cli.py), Explain (core/launch/explain.py) and the queue
itself (core/launch/queue.py, which refuses on any problem before it writes a folder). The
checks it combines, each kept where its knowledge lives:

* model and tokenizer locations (``core.safety.server_path_problems``);
* the engine or named installation, and a GPU when asked for (``HostInfo.cannot_run``);
* knobs and extra flags against the installation's own option list
  (``core.engines.launch_problems``), where the host checks knobs (not on Ray: the node does);
* requests longer than the model's context, an unreadable trace (``context_problems``);
* kv_fill on an engine that reports no KV pool (``kv_fill_problems``);
* a model shape (``server.shape``) on an engine that cannot load dummy weights, an unknown
  shape, a tokenizer the shape's vocabulary cannot hold (``shape_problems``), and a probe
  that expects a real answer from dummy weights (``_shape_probe_problems``).

An experiment is checked arm by arm (trial 0 of each: every trial of an arm is the same
configuration) together with the KV-pool runs queueing it would add.

A run that executes elsewhere (Ray) is checked again on its node by the run's own preflight
(core/run/pipeline.py); here its model folders need not exist and its knobs are not read.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from core.config import RunSpec
from core.engines import context_problems, kv_fill_problems, launch_problems, shape_problems
from core.errors import ConfigError
from core.executors import executor_for, runs_here
from core.experiments.design import ExperimentSpec, expand
from core.launch.host import HostInfo
from core.launch.kv_pool import plan_pools
from core.safety import server_path_problems
from core.settings import Settings

__all__ = ["Problem", "Refused", "Target", "preflight", "refuse", "specs_of"]

Target = RunSpec | Sequence[RunSpec] | ExperimentSpec


@dataclass(frozen=True)
class Problem:
    """One reason a launch is refused: the spec field (``server.tp_size``,
    ``plan.points.0.output_len``), what is wrong (``message``) and what to do (``fix``);
    every door shows both, as ``text``."""

    field: str
    message: str
    fix: str = ""

    @property
    def text(self) -> str:
        return f"{self.message} — {self.fix}" if self.fix else self.message


class Refused(ConfigError):
    """A launch refused by ``preflight``: every problem, nothing queued."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        first = problems[0]
        super().__init__(first.field, first.text)
        self.problems = tuple(problems)


def refuse(problems: Sequence[Problem]) -> None:
    """Raise ``Refused`` when there is any problem."""
    if problems:
        raise Refused(problems)


def specs_of(target: Target, settings: Settings) -> list[RunSpec]:
    """The distinct configurations ``target`` would launch: each run; for an experiment,
    each arm once and the KV-pool runs its kv_fill points would queue first."""
    if isinstance(target, RunSpec):
        return [target]
    if not isinstance(target, ExperimentSpec):
        return list(target)
    arms = [spec for _, trial, spec in expand(target, "preflight") if trial == 0]
    pools = plan_pools(settings, target, "preflight")
    return arms + (list(pools.to_run.values()) if pools is not None else [])


def preflight(
    target: Target, host: HostInfo | None, settings: Settings, *, local: bool | None = None
) -> list[Problem]:
    """Every problem of ``target`` on ``host`` (first reason per field). ``host`` None:
    only what does not depend on where it runs (context, kv_fill); the run's own preflight
    checks the rest. ``local``: the runs execute on this host (default: each spec's
    executor), so model folders must exist here."""
    found: dict[str, Problem] = {}
    for spec in specs_of(target, settings):
        here = runs_here(executor_for(spec, settings)) if local is None else local
        for problem in _problems(spec, host, settings, here):
            found.setdefault(problem.field, problem)
    return list(found.values())


def _problems(
    spec: RunSpec, host: HostInfo | None, settings: Settings, local: bool
) -> list[Problem]:
    # each check's {field: why}, with the fix to give when its wording names none
    checks: list[tuple[dict[str, str], str]] = []
    if host is not None:
        checks.append((host.cannot_run(spec), _FIX_HOST))
        checks.append((_knob_problems(spec, host, settings, local), _FIX_KNOB))
        roots = settings.allowed_model_roots
        paths = server_path_problems(spec.server, roots, must_exist=local)
        checks.append((paths, _FIX_PATH))
    checks.append((context_problems(spec, settings.models_dir), _FIX_CONTEXT))
    checks.append((kv_fill_problems(spec, settings), _FIX_KV_FILL))
    shape_local = local and host is not None
    checks.append((shape_problems(spec.server, settings.models_dir, local=shape_local), _FIX_SHAPE))
    checks.append((_shape_probe_problems(spec), _FIX_SHAPE))
    out: dict[str, Problem] = {}
    for found, default in checks:
        for field, why in found.items():
            if field not in out:
                message, fix = split_fix(why)
                out[field] = Problem(field, message, fix or _default_fix(field, default))
    return list(out.values())


# The checks word an error as "what is wrong; what to do" (or ": ", ". "): the fix starts
# at the first such break followed by one of these verbs.
_FIX_VERBS = (
    "add|choose|define|give|install|leave|lower|move|pick|put|raise|reinstall|remove|run"
    "|see|set|shorten|switch|to add|use"
)
# (a question, "did you mean --x?", keeps its mark)
_FIX_BREAK = re.compile(rf"(?:[;:.]|(?<=\?)|\s—)\s+(?=(?:{_FIX_VERBS})\b)", re.IGNORECASE)

_FIX_HOST = "install the engine here (README, 'Engines'), or run it on a host that has it"
_FIX_KNOB = (
    "change or remove that setting: the installed engine's own option list (its --help) "
    "says what it accepts"
)
_FIX_PATH = "put the model folder there, or give one that exists in the allowed model roots"
_FIX_CONTEXT = "shorten the requests, or set over_context to 'drop' or 'clip'"
_FIX_KV_FILL = "give plan.kv_pool.tokens, or leave kv_fill out"
_FIX_SHAPE = "give a model folder instead of a shape, or run the shape on sglang"
_FIX_BY_SUFFIX = {".trace": "give a readable JSONL trace file in Mooncake's shape"}


def _shape_probe_problems(spec: RunSpec) -> dict[str, str]:
    """Dummy weights answer nothing a pattern can match: a shape's probe expects none."""
    probe = spec.plan.probe
    if spec.server.shape is None or probe is None or probe.expect is None:
        return {}
    return {
        "plan.probe.expect": f"a shape runs dummy weights, whose answers are meaningless, so "
        f"/{probe.expect}/ cannot match; set probe.expect to null or drop the probe"
    }


def split_fix(why: str) -> tuple[str, str]:
    """A check's wording split into (what is wrong, what to do); the fix is "" when the
    wording names none."""
    found = _FIX_BREAK.search(why)
    if found is None:
        return why, ""
    fix = why[found.end() :].strip()
    return why[: found.start()].rstrip(), fix[:1].lower() + fix[1:]


def _default_fix(field: str, default: str) -> str:
    for suffix, fix in _FIX_BY_SUFFIX.items():
        if field.endswith(suffix):
            return fix
    return default


def _knob_problems(
    spec: RunSpec, host: HostInfo, settings: Settings, local: bool
) -> dict[str, str]:
    """The engine's own launch check (the argv its run would build), against the
    installation ``host`` detected; {} where it is checked on the node instead."""
    info = host.info_for(spec.server)
    if not (local and host.checks_knobs and info is not None and info.installed):
        return {}
    found = launch_problems(spec.server, info, settings)
    if spec.server.engine_install is None:
        return found
    version = info.version or "version unknown"
    return {f: f"{spec.server.engine_install} ({version}): {why}" for f, why in found.items()}
