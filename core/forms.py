"""The launch form's raw values → validated run specs, with one message per form field.

Pages pass what the widgets hold (strings mostly); everything is parsed and validated
here so the same rules apply to the form, the CLI and any import path.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from core.config import RunSpec, spec_errors
from core.experiments import ExperimentSpec, experiment_from_preset
from core.host import HostInfo
from core.presets import PRESETS, Preset, expand_preset
from core.safety import server_path_problems
from core.settings import load_settings

__all__ = ["FORM_DEFAULTS", "experiment_from_form", "launch_from_form"]

FORM_DEFAULTS: dict[str, Any] = {
    "preset": "Single run", "engine": "transformers", "model": "smollm2-135m-instruct",
    "tokenizer": "", "endpoint_url": "", "device": "auto", "dtype": "auto",
    "cuda_graphs": "engine default", "cuda_graph_max_bs": "", "mem_fraction_static": "",
    "tp_size": 1, "attention_backend": "", "cb_max_memory_percent": "", "extra_args": "",
    "startup_timeout_s": 600, "concurrency": "1,4", "num_prompts": 8, "input_len": 32,
    "output_len": 16, "request_rate": "inf", "seed": 42, "warmup_requests": "",
    "probe": True, "probe_prompt": "What is the capital of France? Answer in one word.",
    "probe_expect": "(?i)paris", "tags": "", "trials": 1,
}


def _opt_float(form: dict[str, Any], key: str, errors: dict[str, str]) -> float | None:
    text = str(form.get(key) or "").strip()
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        errors[key] = f"{text!r} is not a number; leave it empty for the engine's default"
        return None


def _opt_int(form: dict[str, Any], key: str, errors: dict[str, str]) -> int | None:
    text = str(form.get(key) or "").strip()
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        errors[key] = f"{text!r} is not a whole number; leave it empty for the default"
        return None


def _form_key(path: str) -> str:
    """Map a spec path (server.tp_size, plan.points.0.concurrency) to its form field."""
    parts = path.split(".")
    if parts[:2] == ["plan", "points"]:
        return parts[-1] if len(parts) > 3 else "concurrency"
    if parts[:2] == ["plan", "probe"]:
        return {"prompt": "probe_prompt", "expect": "probe_expect"}.get(parts[-1], "probe")
    if parts[0] in ("server", "plan") and len(parts) > 1:
        return parts[1]
    return parts[0] if parts[0] in FORM_DEFAULTS else "engine"


def launch_from_form(form: dict[str, Any], host: HostInfo, *,
                     model_roots: Sequence[Path] | None = None
                     ) -> tuple[list[RunSpec], dict[str, str]]:
    """(specs to queue, {} ) or ([], {form field: message}). ``model_roots``: where model
    and tokenizer folders may be (default: the settings' allowed model roots)."""
    errors: dict[str, str] = {}
    engine = str(form.get("engine", "transformers"))
    if (why := host.unavailable(engine)) is not None:
        errors["engine"] = why
    preset: Preset | None = next((p for p in PRESETS if p.name == form.get("preset")), None)
    if preset is None:
        errors["preset"] = f"unknown preset {form.get('preset')!r}"
    elif (why := preset.unavailable(host, engine)) is not None:
        errors["preset"] = f"{preset.name} is unavailable here: {why}"

    try:
        extra = tuple(shlex.split(str(form.get("extra_args") or "")))
    except ValueError as exc:
        errors["extra_args"] = f"cannot split into arguments: {exc}"
        extra = ()
    try:
        concurrency = [int(c) for c in str(form.get("concurrency", "")).split(",") if c.strip()]
        if not concurrency:
            raise ValueError
    except ValueError:
        errors["concurrency"] = "give one or more whole numbers separated by commas, e.g. 1,4,16"
        concurrency = [1]
    rate_text = str(form.get("request_rate") or "inf").strip().lower()
    rate = math.inf if rate_text in ("inf", "unbounded") else _opt_float(
        form, "request_rate", errors)
    cuda = {"on": True, "off": False}.get(str(form.get("cuda_graphs")))
    server = {
        "engine": engine, "model": str(form.get("model") or "").strip(),
        "tokenizer": str(form.get("tokenizer") or "").strip() or None,
        "endpoint_url": str(form.get("endpoint_url") or "").strip() or None,
        "device": form.get("device") or "auto", "dtype": form.get("dtype") or "auto",
        "cuda_graphs": cuda, "cuda_graph_max_bs": _opt_int(form, "cuda_graph_max_bs", errors),
        "mem_fraction_static": _opt_float(form, "mem_fraction_static", errors),
        "tp_size": 1 if (tp := _opt_int(form, "tp_size", errors)) is None else tp,
        "attention_backend": str(form.get("attention_backend") or "").strip() or None,
        "cb_max_memory_percent": _opt_float(form, "cb_max_memory_percent", errors),
        "extra_args": extra, "startup_timeout_s": form.get("startup_timeout_s") or 600,
    }
    points = [{"concurrency": c, "num_prompts": form.get("num_prompts"),
               "input_len": form.get("input_len"), "output_len": form.get("output_len"),
               "request_rate": rate if rate is not None else math.inf} for c in concurrency]
    plan: dict[str, Any] = {"points": points, "seed": form.get("seed", 42),
                            "warmup_requests": _opt_int(form, "warmup_requests", errors)}
    if form.get("probe", True):
        plan["probe"] = {"prompt": form.get("probe_prompt") or FORM_DEFAULTS["probe_prompt"],
                         "expect": str(form.get("probe_expect") or "") or None}
    else:
        plan["probe"] = None
    tags = tuple(t for t in str(form.get("tags") or "").replace(",", " ").split() if t)
    base, spec_errs = spec_errors({"server": server, "plan": plan, "tags": tags})
    for path, message in spec_errs.items():
        errors.setdefault(_form_key(path), message)
    if base is not None:
        roots = model_roots if model_roots is not None else load_settings().allowed_model_roots
        for path, message in server_path_problems(base.server, roots, must_exist=False).items():
            errors.setdefault(_form_key(path), message)
    if errors or base is None or preset is None:
        return [], errors
    specs = expand_preset(preset, base)
    # An arm may set a knob the engine cannot take (graphs on a CPU-only engine...).
    for spec in specs:
        _, arm_errs = spec_errors(spec.model_dump())
        for path, message in arm_errs.items():
            errors.setdefault("preset", f"{path}: {message}")
    return (specs, {}) if not errors else ([], errors)


def experiment_from_form(form: dict[str, Any], host: HostInfo
                         ) -> tuple[ExperimentSpec | None, dict[str, str]]:
    """A preset with several arms becomes an experiment of ``trials`` trials."""
    specs, errors = launch_from_form(form, host)
    if errors:
        return None, errors
    preset = next(p for p in PRESETS if p.name == form.get("preset"))
    try:
        trials = int(form.get("trials") or 1)
    except (TypeError, ValueError):
        return None, {"trials": "give a whole number of trials (1-50)"}
    if not 1 <= trials <= 50:
        return None, {"trials": "give between 1 and 50 trials (3 or more for intervals)"}
    base = specs[0].model_copy(update={"tags": tuple(
        t for t in specs[0].tags if not t.startswith(("ab-", "arm:")))})
    kind = "aa" if not preset.intended else "ab"
    return experiment_from_preset(preset.name, base, [(label, dict(ch))
                                                      for label, ch in preset.arms],
                                  trials, kind), {}
