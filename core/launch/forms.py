"""The launch form's raw values → validated run specs, with one message per form field.

Pages pass what the widgets hold (strings mostly); everything is parsed and validated
here so the same rules apply to the form, the CLI and any import path.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from core.config import (
    Point,
    RunSpec,
    ServerConfig,
    parse_request_rate,
    parse_whole_number,
    spec_errors,
    validation_errors,
)
from core.engines.model_setup import model_folder
from core.engines.registry import DEFAULT_ENGINE
from core.errors import ConfigError
from core.experiments.design import ARM_TAG, MAX_TRIALS, ExperimentSpec, experiment_from_preset
from core.launch.host import HostInfo
from core.launch.preflight import Refused, preflight
from core.launch.presets import PRESETS, Preset, expand_preset
from core.load.workloads import prefix_reuse_share, preview_point
from core.metrics import wave_warning
from core.safety import server_path_problems
from core.settings import WORKLOADS_DIR, Settings, load_settings
from core.shapes import DUMMY_WEIGHTS

__all__ = [
    "FORM_DEFAULTS",
    "SHAPE_FIELD_LABEL",
    "WORKLOAD_KINDS",
    "WorkloadPreview",
    "check_spec_data",
    "errors_summary",
    "experiment_from_form",
    "form_adaptive",
    "form_key",
    "form_trials",
    "is_grid_field",
    "launch_from_form",
    "launch_warnings",
    "length_histogram",
    "preview_from_form",
    "refusal_errors",
    "shape_choices",
    "trace_choices",
    "trace_location",
    "workload_fields",
]

FORM_DEFAULTS: dict[str, Any] = {
    "preset": "Single run",
    "engine": DEFAULT_ENGINE,
    "model": "smollm2-135m-instruct",
    # a model shape run with dummy weights (data/shapes, core/shapes.py); "" = the model above
    "shape": "",
    "tokenizer": "",
    "endpoint_url": "",
    "device": "auto",
    "dtype": "auto",
    # a named engine installation (README "Engines"); "" = the engine's default one
    "engine_install": "",
    "cuda_graphs": "engine default",
    "cuda_graph_max_bs": "",
    "mem_fraction_static": "",
    "tp_size": 1,
    "attention_backend": "",
    "cb_max_memory_percent": "",
    "extra_args": "",
    "startup_timeout_s": 600,
    "concurrency": "1,4",
    "num_prompts": 8,
    "input_len": 32,
    "output_len": 16,
    "request_rate": "inf",
    "seed": 42,
    "warmup_requests": "",
    "probe": True,
    "probe_prompt": "What is the capital of France? Answer in one word.",
    "probe_expect": "(?i)paris",
    "tags": "",
    "trials": 3,
    # trials: auto (core/analysis/sequential.py): from min_trials to max_trials, until the
    # answer is clear; max_minutes empty: no time limit
    "trials_auto": False,
    "min_trials": 3,
    "max_trials": 10,
    "max_minutes": "",
    "exact_length": True,
    # the workload of every point (core/config.py Workload; docs/METRICS.md, "Workloads")
    "workload_kind": "fixed",
    "range_ratio": "",
    "trace": "",
    "arrivals": "closed_loop",
    "over_context": "error",
    "groups": 4,
    "prompts_per_group": 4,
    "system_prompt_len": 256,
    "question_len": 32,
    "kv_fill": "",
    "kv_fill_by": "concurrency",
}
WORKLOAD_KINDS = ("fixed", "uniform", "trace_lengths", "trace", "shared_prefix")
# Histogram bins of the Launch form's preview (input/output tokens per request).
PREVIEW_BINS = 20
PREVIEW_LIMIT = 500  # requests previewed: enough for a trace's shape, quick to build
# A whole-number field's example in its error ("type digits only, e.g. 256"), and the fields
# that may be left empty (the engine's or the plan's default then).
_EXAMPLES = {"output_len": 256, "input_len": 256, "num_prompts": 64, "tp_size": 2, "seed": 42}
_OPTIONAL = frozenset({"cuda_graph_max_bs", "warmup_requests"})


SHAPE_FIELD_LABEL = f"Model shape ({DUMMY_WEIGHTS})"


def shape_choices() -> dict[str, str]:
    """The Launch form's model-shape choices: "" (a real model) and each shipped shape,
    each with its words (the dummy-weights warning on every shape)."""
    from core.shapes import load_shape, shape_names

    return {"": "none: the model above, its own weights"} | {
        name: f"{name}: {load_shape(name).summary} ({DUMMY_WEIGHTS})" for name in shape_names()
    }


def _text(form: dict[str, Any], key: str) -> str:
    value = form.get(key)
    return "" if value is None else str(value).strip()


def _opt_float(form: dict[str, Any], key: str, errors: dict[str, str]) -> float | None:
    text = _text(form, key)
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        errors[key] = f"{text[:40]!r} is not a number; give one such as 0.85, or leave it empty"
        return None
    return value


def _opt_int(form: dict[str, Any], key: str, errors: dict[str, str]) -> int | None:
    """A whole number from a text field, strictly (``core.config.parse_whole_number``:
    ``1e9``, ``1.5`` or an empty required field is an error beside the field, never another
    value); None: not given, or an optional field left empty."""
    value = form.get(key)
    if value is None or (key in _OPTIONAL and not str(value).strip()):
        return None
    try:
        return parse_whole_number(value, _EXAMPLES.get(key, 8))
    except ValueError as exc:
        errors[key] = f"{exc}, or leave it empty" if key in _OPTIONAL else str(exc)
        return None


def _form_key(path: str, message: str = "") -> str:
    """Map a spec path (server.tp_size, plan.points.0.concurrency) to its form field. A rule
    of a whole point or workload goes beside the field its message names first."""
    parts = path.split(".")
    if parts[:2] == ["plan", "points"]:
        first = message.split(" ", 1)[0]
        if parts[-1] in ("kind", "workload") or (len(parts) <= 4 and first == "kind"):
            return "workload_kind"
        if len(parts) <= 3 and first in FORM_DEFAULTS:
            return first
        return parts[-1] if len(parts) > 3 else "concurrency"
    if parts[:2] == ["plan", "probe"]:
        return {"prompt": "probe_prompt", "expect": "probe_expect"}.get(parts[-1], "probe")
    if parts[0] in ("server", "plan") and len(parts) > 1:
        return parts[1] if parts[1] in FORM_DEFAULTS else "engine"
    return parts[0] if parts[0] in FORM_DEFAULTS else "engine"


def _server_errors(server: dict[str, Any]) -> tuple[ServerConfig | None, dict[str, str]]:
    """The server part on its own, so its problems come with the plan's, not after them.
    A rule about several knobs (mem_fraction_static on a non-sglang engine...) names the
    knob first: its message goes beside that knob."""
    try:
        return ServerConfig.model_validate(server), {}
    except ValidationError as exc:
        return None, validation_errors(exc, "server", "engine", ServerConfig.model_fields)


def _path_errors(server: dict[str, Any], roots: Sequence[Path], must_exist: bool) -> dict[str, str]:
    """Model and tokenizer locations, checked even when another server field is wrong."""
    shell = ServerConfig.model_construct(
        **{
            **ServerConfig().model_dump(),
            **{k: server[k] for k in ("engine", "model", "tokenizer") if server.get(k) is not None},
        }
    )
    try:
        return server_path_problems(shell, roots, must_exist=must_exist)
    except (TypeError, AttributeError):  # a value of the wrong type: pydantic says so
        return {}


def check_spec_data(
    data: dict[str, Any],
    roots: Sequence[Path],
    *,
    must_exist: bool,
    settings: Settings | None = None,
) -> tuple[RunSpec | None, dict[str, str]]:
    """A spec as plain data (a form's fields, a CLI's flags and plan file) → (RunSpec, {})
    or (None, {dotted field: message}) with every problem at once: the server and the plan
    are validated apart, and model locations are checked whatever else is wrong. With
    ``settings``, also what the gate finds wherever the run goes (``preflight`` without a
    host: over the model's context, kv_fill on an engine that reports no KV pool)."""
    server = dict(data.get("server") or {})
    _, errors = _server_errors(server)
    _, rest = spec_errors({k: v for k, v in data.items() if k != "server"})
    if any(k.startswith("plan.points.") for k in rest):
        rest.pop("plan.points", None)  # "no valid point" follows from the point's own error
    for path, message in {**rest, **_path_errors(server, roots, must_exist)}.items():
        errors.setdefault(path, message)
    if errors:
        return None, errors
    spec = RunSpec.model_validate(data)
    if settings is not None and (found := preflight(spec, None, settings)):
        return None, {p.field: p.text for p in found}
    return spec, {}


def trace_choices() -> list[str]:
    """The shipped traces a workload may name by file name (data/workloads/)."""
    if not WORKLOADS_DIR.is_dir():
        return []
    return sorted(p.name for p in WORKLOADS_DIR.glob("*.jsonl"))


def trace_location(text: str) -> str:
    """A shipped trace's file name → its path; any other text is a path as given."""
    if text and "/" not in text and (WORKLOADS_DIR / text).is_file():
        return str(WORKLOADS_DIR / text)
    return text


def workload_fields(form: dict[str, Any], errors: dict[str, str]) -> dict[str, Any]:
    """The point fields the form's workload part sets (``workload``, ``kv_fill``,
    ``kv_fill_by``), the same a plan file's point takes; a value that is not a number goes
    into ``errors`` beside its field, the rest is core.config's to check."""
    kind = str(form.get("workload_kind") or "fixed")
    workload: dict[str, Any] = {"kind": kind}
    if kind == "uniform" and (ratio := _opt_float(form, "range_ratio", errors)) is not None:
        workload["range_ratio"] = ratio
    if kind in ("trace", "trace_lengths"):
        workload["trace"] = trace_location(_text(form, "trace")) or None
        workload["over_context"] = str(form.get("over_context") or "error")
        if kind == "trace":
            workload["arrivals"] = str(form.get("arrivals") or "closed_loop")
    if kind == "shared_prefix":
        for key in ("groups", "prompts_per_group", "system_prompt_len", "question_len"):
            if (value := _opt_int(form, key, errors)) is not None:
                workload[key] = value
    out: dict[str, Any] = {"workload": workload}
    if (fill := _opt_float(form, "kv_fill", errors)) is not None:
        out["kv_fill"] = fill
        out["kv_fill_by"] = str(form.get("kv_fill_by") or "concurrency")
    return out


@dataclass(frozen=True)
class WorkloadPreview:
    """What the form's first point will send: per request (core/load/workloads.py
    preview_rows), a length histogram and the prefix-reuse share."""

    rows: list[dict[str, Any]]
    summary: dict[str, Any]
    prefix_reuse_share: float | None
    histogram: dict[str, list[Any]]  # tokens (bin start), input requests, output requests


def length_histogram(
    rows: Sequence[dict[str, Any]], bins: int = PREVIEW_BINS
) -> dict[str, list[Any]]:
    """Requests per length bin, input and output tokens on one axis of equal-width bins."""
    lengths = [int(r["input_tokens"]) for r in rows] + [int(r["output_tokens"]) for r in rows]
    if not lengths:
        return {"tokens": [], "input requests": [], "output requests": []}
    low, high = min(lengths), max(lengths)
    width = max(1, math.ceil((high - low + 1) / bins))
    n = math.ceil((high - low + 1) / width)
    ins, outs = [0] * n, [0] * n
    for r in rows:
        ins[(int(r["input_tokens"]) - low) // width] += 1
        outs[(int(r["output_tokens"]) - low) // width] += 1
    return {
        "tokens": [low + i * width for i in range(n)],
        "input requests": ins,
        "output requests": outs,
    }


def preview_from_form(
    form: dict[str, Any], settings: Settings, limit: int = PREVIEW_LIMIT
) -> tuple[WorkloadPreview | None, dict[str, str]]:
    """The form's first point's workload as it will be sent (the pipeline's seed, the
    model's tokenizer and context length), or None and {form field: message}."""
    errors: dict[str, str] = {}
    point: dict[str, Any] = {
        k: v
        for k in ("num_prompts", "input_len", "output_len")
        if (v := _opt_int(form, k, errors)) is not None
    }
    point.update(workload_fields(form, errors))
    seed = _opt_int(form, "seed", errors)
    if errors:
        return None, errors
    try:
        parsed = Point.model_validate(point)
    except ValidationError as exc:
        found = validation_errors(exc, "plan.points.0")
        return None, {_form_key(path, msg): msg for path, msg in found.items()}
    # The same model locations a launch may use, and nothing else is read.
    server = {"model": _text(form, "model"), "tokenizer": _text(form, "tokenizer") or None}
    if found := _path_errors(server, settings.allowed_model_roots, must_exist=True):
        return None, {_form_key(path): msg for path, msg in found.items()}
    model = _text(form, "tokenizer") or _text(form, "model")
    folder = model_folder(model, settings.models_dir)
    try:
        rows, summary = preview_point(parsed, (42 if seed is None else seed) * 1000, folder, limit)
    except ConfigError as exc:
        key = _form_key(exc.field.replace("plan.points.workload", "plan.points.0.workload"))
        return None, {key if key in FORM_DEFAULTS else "workload_kind": exc.message}
    except (OSError, ValueError) as exc:  # no tokenizer there
        return None, {"model": f"cannot read a tokenizer in {folder.name!r}: {exc}"[:300]}
    return WorkloadPreview(rows, summary, prefix_reuse_share(rows), length_histogram(rows)), {}


def _server_data(form: dict[str, Any], errors: dict[str, str]) -> dict[str, Any]:
    """The form's server fields as ServerConfig data; a field that cannot be read goes into
    ``errors`` beside it."""
    try:
        extra = tuple(shlex.split(str(form.get("extra_args") or "")))
    except ValueError as exc:
        errors["extra_args"] = f"cannot split into flags ({exc}); close the quote"
        extra = ()
    cuda = {"on": True, "off": False}.get(str(form.get("cuda_graphs")))
    shape = _text(form, "shape") or None
    return {
        "engine": str(form.get("engine", DEFAULT_ENGINE)),
        "engine_install": _text(form, "engine_install") or None,
        # a shape gives the model (its folder is built when the run starts)
        "model": FORM_DEFAULTS["model"] if shape else _text(form, "model"),
        "shape": shape,
        "tokenizer": _text(form, "tokenizer") or None,
        "endpoint_url": _text(form, "endpoint_url") or None,
        "device": form.get("device") or "auto",
        "dtype": form.get("dtype") or "auto",
        "cuda_graphs": cuda,
        "cuda_graph_max_bs": _opt_int(form, "cuda_graph_max_bs", errors),
        "mem_fraction_static": _opt_float(form, "mem_fraction_static", errors),
        "tp_size": 1 if (tp := _opt_int(form, "tp_size", errors)) is None else tp,
        "attention_backend": _text(form, "attention_backend") or None,
        "cb_max_memory_percent": _opt_float(form, "cb_max_memory_percent", errors),
        "extra_args": extra,
        "startup_timeout_s": form.get("startup_timeout_s") or 600,
    }


def _plan_data(form: dict[str, Any], errors: dict[str, str]) -> dict[str, Any]:
    """The form's plan fields (one point per concurrency) as BenchmarkPlan data; a field
    that cannot be read goes into ``errors`` beside it."""
    try:
        concurrency = [
            parse_whole_number(c) for c in _text(form, "concurrency").split(",") if c.strip()
        ]
        if not concurrency:
            raise ValueError
    except ValueError:
        errors["concurrency"] = "give one or more whole numbers separated by commas, e.g. 1,4,16"
        concurrency = [1]
    rate = math.inf
    if rate_text := _text(form, "request_rate"):
        try:
            rate = parse_request_rate(rate_text)
        except ValueError as exc:
            errors["request_rate"] = str(exc)
    numbers = {
        k: _opt_int(form, k, errors) for k in ("num_prompts", "input_len", "output_len", "seed")
    }
    extras = workload_fields(form, errors)
    points = [
        {
            "concurrency": c,
            "request_rate": rate,
            **{k: v for k, v in numbers.items() if k != "seed" and v is not None},
            **extras,
        }
        for c in concurrency
    ]
    plan: dict[str, Any] = {
        "points": points,
        "warmup_requests": _opt_int(form, "warmup_requests", errors),
        # the exact-length request field itself is the engine's (or what
        # an endpoint accepts): the user only says whether to ask
        "ignore_eos": bool(form.get("exact_length", True)),
    }
    if numbers["seed"] is not None:
        plan["seed"] = numbers["seed"]
    if form.get("probe", True):
        # dummy weights (a shape) answer nothing a pattern matches: the default one is dropped
        expect = str(form.get("probe_expect") or "") or None
        if _text(form, "shape") and expect == FORM_DEFAULTS["probe_expect"]:
            expect = None
        plan["probe"] = {
            "prompt": form.get("probe_prompt") or FORM_DEFAULTS["probe_prompt"],
            "expect": expect,
        }
    else:
        plan["probe"] = None
    return plan


def launch_from_form(
    form: dict[str, Any],
    host: HostInfo,
    *,
    model_roots: Sequence[Path] | None = None,
    settings: Settings | None = None,
    local: bool = True,
) -> tuple[list[RunSpec], dict[str, str]]:
    """(specs to queue, {}) or ([], {form field: message}), every problem at once.

    ``local``: the runs execute on this host, so model folders must exist here and the
    engine's knobs and flags are checked against what ``host`` detected (a Ray run is
    checked on its node). ``model_roots``: where model and tokenizer folders may be
    (default: the settings' allowed model roots)."""
    settings = settings or load_settings()
    errors: dict[str, str] = {}
    engine = str(form.get("engine", DEFAULT_ENGINE))
    install = _text(form, "engine_install") or None
    # a named installation is checked on its own (cannot_run); the default one here
    if install is None and (why := host.unavailable(engine)) is not None:
        errors["engine"] = why
    preset: Preset | None = next((p for p in PRESETS if p.name == form.get("preset")), None)
    if preset is None:
        errors["preset"] = f"unknown preset {form.get('preset')!r}; pick one from the list"
    elif (why := preset.unavailable(host, engine)) is not None:
        errors["preset"] = f"{preset.name} is unavailable here: {why}"

    server = _server_data(form, errors)
    plan = _plan_data(form, errors)
    tags = tuple(t for t in str(form.get("tags") or "").replace(",", " ").split() if t)

    roots = model_roots if model_roots is not None else settings.allowed_model_roots
    data = {"server": server, "plan": plan, "tags": tags}
    base, spec_errs = check_spec_data(data, roots, must_exist=local)
    for path, message in spec_errs.items():
        errors.setdefault(_form_key(path, message), message)
    for key, message in _preflight_errors(base, server, host, settings, local).items():
        errors.setdefault(key, message)
    if errors or base is None or preset is None:
        return [], errors
    specs = expand_preset(preset, base)
    # An arm may set a knob the engine cannot take (graphs on a CPU-only engine...).
    for spec, (label, _) in zip(specs, preset.arms, strict=True):
        _, arm_errs = spec_errors(spec.model_dump())
        found = preflight(spec, host, settings, local=local)
        for path, message in {**{p.field: p.text for p in found}, **arm_errs}.items():
            errors.setdefault("preset", f"arm {label!r}: {path}: {message}")
    return (specs, {}) if not errors else ([], errors)


def _preflight_errors(
    base: RunSpec | None,
    server: dict[str, Any],
    host: HostInfo,
    settings: Settings,
    local: bool,
) -> dict[str, str]:
    """THE gate's problems (core.launch.preflight) by form field. When the plan is what is
    wrong, the server part is still checked alone (its model, engine, knobs): every problem
    in one pass."""
    target = base
    if target is None:
        server_cfg = _server_errors(server)[0]
        target = RunSpec(server=server_cfg) if server_cfg is not None else None
    if target is None:
        return {}
    out: dict[str, str] = {}
    for problem in preflight(target, host, settings, local=local):
        if base is None and not problem.field.startswith("server."):
            continue  # a stand-in plan's problem, not the form's
        out.setdefault(form_key(problem.field, problem.message, target), problem.text)
    return out


def form_key(field: str, message: str = "", spec: RunSpec | None = None) -> str:
    """The form field a spec field's problem is shown beside. A point longer than the
    model's context goes beside Input tokens when the lengths are what to shorten (fixed
    or uniform lengths), beside the trace's drop/clip choice otherwise."""
    key = _form_key(field, message)
    if spec is not None and re.fullmatch(r"plan\.points\.\d+\.workload\.\w+", field):
        fixed = spec.plan.points[0].workload.kind in ("fixed", "uniform")
        if fixed or key not in FORM_DEFAULTS:
            return "input_len"
    return key


def refusal_errors(exc: ConfigError, spec: RunSpec | None = None) -> dict[str, str]:
    """A refusal raised while queueing (``core.launch.preflight.Refused``: every problem;
    any other ConfigError: one) by form field, to show beside the fields, not raise."""
    if isinstance(exc, Refused):
        return {form_key(p.field, p.message, spec): p.text for p in exc.problems}
    return {form_key(exc.field, exc.message, spec): exc.message}


def form_trials(form: dict[str, Any]) -> tuple[int, str | None]:
    """The form's trials per arm (the default when empty), or 0 and what is wrong."""
    value = form.get("trials")
    try:
        trials = parse_whole_number(FORM_DEFAULTS["trials"] if value in (None, "") else value)
    except ValueError:
        return 0, "give a whole number of trials between 1 and 50 (3 or more for intervals)"
    if not 1 <= trials <= 50:
        return 0, f"give between 1 and 50 trials, not {trials} (3 or more for intervals)"
    return trials, None


def form_adaptive(form: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """The form's trials as ExperimentSpec fields: ``{"trials": N}``, or with "trials
    auto" ticked ``{"trials": "auto", "min_trials", "max_trials"[, "max_minutes"]}``;
    and what is wrong, by form key (every field in one pass)."""
    if not form.get("trials_auto"):
        trials, why = form_trials(form)
        return ({}, {"trials": why}) if why else ({"trials": trials}, {})
    out: dict[str, Any] = {"trials": "auto"}
    errors: dict[str, str] = {}
    for key, low in (("min_trials", 2), ("max_trials", 2)):
        value = form.get(key)
        try:
            n = parse_whole_number(FORM_DEFAULTS[key] if value in (None, "") else value)
        except ValueError:
            errors[key] = f"give a whole number of trials between {low} and {MAX_TRIALS}"
            continue
        if not low <= n <= MAX_TRIALS:
            errors[key] = f"give between {low} and {MAX_TRIALS} trials, not {n}"
        out[key] = n
    if not errors and out["min_trials"] > out["max_trials"]:
        errors["max_trials"] = (
            f"at least min trials ({out['min_trials']}): the first look needs that many"
        )
    minutes = _opt_float(form, "max_minutes", errors)
    if minutes is not None:
        if minutes <= 0:
            errors["max_minutes"] = "give a positive number of minutes, or leave it empty"
        out["max_minutes"] = minutes
    return ({}, errors) if errors else (out, {})


def experiment_from_form(
    form: dict[str, Any], host: HostInfo, *, settings: Settings | None = None, local: bool = True
) -> tuple[ExperimentSpec | None, dict[str, str]]:
    """A preset with several arms becomes an experiment of ``trials`` trials, or trials
    auto (``form_adaptive``), checked with every other field in the same pass."""
    specs, errors = launch_from_form(form, host, settings=settings, local=local)
    trials, trials_errors = form_adaptive(form)
    errors = {**errors, **trials_errors}
    if errors:
        return None, errors
    preset = next(p for p in PRESETS if p.name == form.get("preset"))
    base = specs[0].model_copy(
        update={
            "tags": tuple(t for t in specs[0].tags if not t.startswith(("ab-", "arm:", ARM_TAG)))
        }
    )
    kind = "aa" if not preset.intended else "ab"
    return experiment_from_preset(
        preset.name, base, [(label, dict(ch)) for label, ch in preset.arms], kind=kind, **trials
    ), {}


def launch_warnings(specs: Sequence[RunSpec]) -> dict[str, str]:
    """What a checked launch cannot measure as it claims, by form field: shown beside the
    field before anything is queued, never blocking. The waves rule is the run's own
    (``core.metrics.wave_warning``: the caveat its points get afterwards). A kv_fill point
    is left out: its concurrency is sized from the server's pool once it is up."""
    if not specs:
        return {}
    plan = specs[0].plan
    found = []
    for point in plan.points:
        if point.kv_fill is not None:
            continue
        if why := wave_warning(plan.point_requests(point)[1], point.concurrency):
            # the finding, as the stored point's caveat will name it (core.metrics)
            found.append(f"c={point.concurrency}: {why.split(': ')[0]}")
    if not found:
        return {}
    return {
        "num_prompts": "Not steady state, and the run will say so: "
        + "; ".join(found)
        + ". Send at least 2 × the concurrency in prompts, or set plan.min_waves."
    }


def is_grid_field(key: str) -> bool:
    """A field of the form's Grid / sweep section (``core.launch.grid.grid_from_form``'s keys)."""
    return key == "grid" or key.startswith("grid_")


def _grid_field_words(key: str) -> str:
    """``grid_values_0`` -> "Values 1", as the section labels its fields."""
    kind, _, row = key.removeprefix("grid_").rpartition("_")
    if row.isdigit():
        return f"{kind.capitalize()} {int(row) + 1}"
    return "Knobs" if key == "grid" else key.removeprefix("grid_").capitalize()


def errors_summary(errors: dict[str, str]) -> str:
    """The line under the Launch form when nothing was queued: how many fields need
    attention, and the Grid / sweep ones in full (the section may have been closed when
    its check ran: a message there was found only by opening it)."""
    n = len(errors)
    head = (
        f"Nothing was queued: {n} field{'' if n == 1 else 's'} need{'s' if n == 1 else ''} "
        "attention; each message is beside its field above."
    )
    grid = [
        f"- Grid / sweep, {_grid_field_words(k)}: {m}"
        for k, m in errors.items()
        if is_grid_field(k)
    ]
    return "\n".join([head, *grid])
