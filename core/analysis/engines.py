"""Arms that differ by engine: which flags mean the same thing in each engine, and what
each arm ran with.

When the arms of a comparison run different engines (SGLang vs vLLM, same model, workload
and prompts), the engine is the knob. The fields set only to suit one engine
(``attention_backend: triton`` vs ``triton_attn``, SGLang's ``--sampling-backend`` in
``extra_args``) and each engine's own defaults (vLLM's prefix caching, its
``FULL_AND_PIECEWISE`` graphs) are part of that arm's configuration, never confounders:
``engine_arm_fields`` says which fields those are. The flag table is read from each
engine's declarations (``KnobSpec.flag``), never written by hand.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from core.analysis.runs import RunView
from core.engines.registry import find_engine

__all__ = [
    "ENGINE_FIELD",
    "ArmEngine",
    "arm_engines",
    "engine_arm_fields",
    "engines_differ",
    "same_meaning_flags",
]

ENGINE_FIELD = "server.engine"
# Fields that name the engine's installation: they go with the engine.
_WITH_ENGINE = ("server.engine_install",)


@dataclass(frozen=True)
class ArmEngine:
    """One arm's engine as it ran: name, version (its facts), the server fields it set
    away from the shared base, and the engine's own defaults in words."""

    arm: str
    engine: str
    title: str
    version: str | None
    settings: dict[str, Any]
    defaults: dict[str, str]


def _engine_of(views: Sequence[RunView]) -> str:
    return str((views[0].spec.get("server") or {}).get("engine") or "") if views else ""


def engines_differ(arms: Mapping[str, Sequence[RunView]]) -> bool:
    """Whether the arms run more than one engine."""
    return len({_engine_of(vs) for vs in arms.values() if vs}) > 1


def engine_arm_fields(fields: Sequence[str]) -> tuple[list[str], list[str]]:
    """(knobs, arm configuration) of the differing fields ``fields``: when the engine is
    among them it is the knob and the ``server.*`` fields that differ with it are each
    arm's configuration; otherwise every field stays a knob."""
    if ENGINE_FIELD not in fields:
        return list(fields), []
    config = [f for f in fields if f != ENGINE_FIELD and f.startswith("server.")]
    rest = [f for f in fields if f != ENGINE_FIELD and not f.startswith("server.")]
    return [ENGINE_FIELD, *rest], config


def same_meaning_flags(engines: Sequence[str]) -> list[dict[str, str]]:
    """One row per ServerConfig field that any of ``engines`` honours: the field, what it
    acts on, and each engine's flag for it ("—" where it has none), e.g. the memory
    fraction is ``--mem-fraction-static`` in SGLang and ``--gpu-memory-utilization`` in
    vLLM. Engines this process does not know are left out."""
    specs = [s for name in dict.fromkeys(engines) if (s := find_engine(name)) is not None]
    fields: dict[str, str] = {}
    for spec in specs:
        for knob in spec.knobs:
            fields.setdefault(knob.name, knob.resource)
    rows = []
    for name, resource in fields.items():
        row = {"field": name, "acts on": resource}
        for spec in specs:
            own = spec.knob(name)
            row[spec.title] = (own.flag or "(recorded only)") if own is not None else "—"
        rows.append(row)
    return rows


def _set_fields(views: Sequence[RunView], base: Mapping[str, Any]) -> dict[str, Any]:
    server = (views[0].spec.get("server") or {}) if views else {}
    return {
        k: v
        for k, v in server.items()
        if k not in ("engine", "port", "host") and base.get(k, object()) != v
    }


def arm_engines(arms: Mapping[str, Sequence[RunView]]) -> list[ArmEngine]:
    """Each arm's engine, version, own settings (the server fields not shared by every
    arm) and declared defaults, in arm order."""
    servers = [(vs[0].spec.get("server") or {}) for vs in arms.values() if vs]
    shared = {
        k: v
        for k, v in (servers[0] if servers else {}).items()
        if all(s.get(k) == v for s in servers)
    }
    out = []
    for arm, views in arms.items():
        name = _engine_of(views)
        spec = find_engine(name)
        versions = [v.facts.get("engine_version") for v in views if v.facts.get("engine_version")]
        out.append(
            ArmEngine(
                arm=arm,
                engine=name,
                title=spec.title if spec is not None else name,
                version=str(versions[0]) if versions else None,
                settings=_set_fields(views, shared),
                defaults=dict(spec.defaults) if spec is not None else {},
            )
        )
    return out
