"""Configuration differences between runs: what a comparison must check, and which
differences it did not intend.

* ``flatten_config`` lists every field a comparison must check (spec, resolved server
  facts, the launch argv with the random port masked);
* ``config_diff`` shows the fields that differ; ``confounders`` names the ``server.*``/
  ``plan.*`` differences the comparison did not intend, and ``derived_differences`` the
  ``facts.*``/``launch.*`` ones (consequences of the knobs, or of the host);
* an imported run's unstated field is unknown (``unknown_fields``), not different.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

import pandas as pd

from core.analysis.points import point_text
from core.analysis.runs import RunView, run_labels
from core.config import same_value

__all__ = [
    "ENVIRONMENT_FIELDS",
    "FIELD_GROUPS",
    "INERT_FIELDS",
    "config_diff",
    "confounders",
    "declared_intended",
    "derived_differences",
    "differing_fields",
    "environment_differences",
    "flatten_config",
    "gpu_names",
    "group_rank",
    "is_intended",
    "spec_differences",
    "unknown_fields",
    "version_change",
]

# Display and sort order of the field groups in a config diff.
FIELD_GROUPS = ("server", "plan", "facts", "launch")
# Effective-configuration facts of the host and its engine: a difference no knob explains
# is a confounder, except the engine version between runs of different engine
# installations (server.engine_install: choosing one is the knob, its version the fact).
ENVIRONMENT_FIELDS = ("facts.engine_version", "facts.gpu")
INSTALL_FIELD = "server.engine_install"
ENGINE_FIELD = "server.engine"
VERSION_FIELD = "facts.engine_version"
# Fields that differ without changing what is measured (a fixed port vs a free one).
INERT_FIELDS = frozenset({"server.port"})
# ... and whole groups of them: the answers check (plan.answers.*) runs before the warm-up and
# measures nothing; runs of two experiments differ in its baseline_tag, an older run lacks it.
INERT_PREFIXES = ("plan.answers.",)

_PORT_VALUE = "<port>"


def _scalar(value: Any) -> Any:
    """A comparable, displayable cell: lists become one string, scalars stay."""
    if isinstance(value, list | tuple):
        return " ".join(str(_scalar(v)) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k}={_scalar(v)}" for k, v in sorted(value.items()))
    return value


def _flatten(prefix: str, data: Any, out: dict[str, Any]) -> None:
    if isinstance(data, dict):
        for key, value in data.items():
            name = f"{prefix}.{key}"
            if name == "plan.points":
                points = value if isinstance(value, list) else []
                out["plan.points.count"] = len(points)
                for i, p in enumerate(points):
                    out[f"plan.points[{i}]"] = point_text(p) if isinstance(p, dict) else _scalar(p)
            elif isinstance(value, dict):
                _flatten(name, value, out)
            else:
                out[name] = _scalar(value)
    else:
        out[prefix] = _scalar(data)


def gpu_names(gpus: Any) -> str | None:
    """The GPUs a server ran on in words (``facts.gpus``): ``2x NVIDIA H200``; ``none`` on
    a CPU host, None when not stated."""
    if gpus is None:
        return None
    if not isinstance(gpus, list):
        return str(gpus)
    if not gpus:
        return "none"
    names = Counter(str(g.get("name", "?")) if isinstance(g, dict) else str(g) for g in gpus)
    return ", ".join(name if n == 1 else f"{n}x {name}" for name, n in names.items())


def _mask_port(argv: list[Any]) -> list[str]:
    out: list[str] = []
    mask_next = False
    for item in (str(a) for a in argv):
        if mask_next:
            out.append(_PORT_VALUE)
            mask_next = False
        elif item == "--port":
            out.append(item)
            mask_next = True
        elif item.startswith("--port="):
            out.append(f"--port={_PORT_VALUE}")
        else:
            out.append(item)
    return out


def flatten_config(view: RunView) -> dict[str, Any]:
    """Every field a comparison must check, by dotted name: ``server.*`` and ``plan.*``
    from spec.json (``plan.points[i]`` one readable string per point, ``plan.probe.*``),
    the resolved server facts (``facts.*``, None where the engine does not report them)
    and the launch argv (``launch.argv``, the ``--port`` value masked)."""
    out: dict[str, Any] = {}
    for group in ("server", "plan"):
        section = view.spec.get(group)
        if section is None:
            continue
        _flatten(group, section, out)
    facts = view.facts
    for key in (
        "engine_version",
        "kv_cache_tokens",
        "mem_fraction_static",
        "cuda_graph_enabled",
        "cuda_graph_batch_sizes",
        "attention_backend",
    ):
        value = facts.get(key)
        if key == "cuda_graph_batch_sizes" and isinstance(value, list):
            value = ",".join(str(b) for b in value)
        out[f"facts.{key}"] = value
    out["facts.gpu"] = gpu_names(facts.get("gpus"))
    argv = view.launch.get("argv")
    out["launch.argv"] = " ".join(_mask_port(argv)) if isinstance(argv, list) else None
    return out


def group_rank(field: str) -> int:
    """A field's group by its position in FIELD_GROUPS (server 0, plan 1, facts 2, launch 3);
    any other name (a bare knob: ``cuda_graphs``) ranks last."""
    head = re.split(r"[.\[]", field, maxsplit=1)[0]
    return FIELD_GROUPS.index(head) if head in FIELD_GROUPS else len(FIELD_GROUPS)


def _same(values: list[Any]) -> bool:
    return all(same_value(values[0], v) for v in values[1:])


def differing_fields(views: Sequence[RunView]) -> list[str]:
    """The flattened fields whose values are not all equal, ``server.*`` first, then
    ``plan.*``, ``facts.*``, ``launch.*`` (spec order within a group). A field one run
    lacks reads as None there."""
    flats = [flatten_config(v) for v in views]
    fields: list[str] = []
    for flat in flats:
        fields += [f for f in flat if f not in fields]
    diff = [f for f in fields if not _same([flat.get(f) for flat in flats])]
    return sorted(diff, key=group_rank)


def config_diff(views: Sequence[RunView], names: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per differing field: ``field`` then one column per run id (or name)."""
    labels = list(names) if names is not None else run_labels(views)
    flats = [flatten_config(v) for v in views]
    rows = [
        {"field": f, **{lab: flat.get(f) for lab, flat in zip(labels, flats, strict=True)}}
        for f in differing_fields(views)
    ]
    return pd.DataFrame(rows, columns=["field", *labels], dtype=object)


def declared_intended(views: Iterable[RunView]) -> set[str]:
    """The union of the runs' declared intended differences (spec ``intended_diff``)."""
    out: set[str] = set()
    for v in views:
        declared = v.spec.get("intended_diff") or []
        if isinstance(declared, str):
            declared = [declared]
        out |= {str(d) for d in declared}
    return out


def is_intended(field: str, intended: set[str]) -> bool:
    """``field`` is one of the ``intended`` names or lies under one (``plan.probe`` covers
    ``plan.probe.expect``); a bare knob name covers its ``server.``/``plan.`` field."""
    for name in intended:
        candidates = [name]
        if group_rank(name) == len(FIELD_GROUPS):  # a bare knob name: "cuda_graphs"
            candidates = [f"server.{name}", f"plan.{name}"]
        for c in candidates:
            if field == c or field.startswith((f"{c}.", f"{c}[")):
                return True
    return False


def confounders(views: Sequence[RunView], intended: set[str] | None = None) -> list[str]:
    """Differing ``server.*``/``plan.*`` fields the comparison did not intend.

    ``intended`` None reads the runs' declared ``intended_diff`` (their union). An intended
    name covers the fields under it (``plan.probe`` covers ``plan.probe.expect``). With
    nothing intended, a single differing field is the comparison itself; with more than
    one, every one of them is a confounder. ``server.port`` never is (INERT_FIELDS).
    ``facts.*`` and ``launch.*`` are reported by ``derived_differences`` instead: whether
    the intended knob explains them cannot be checked from the folders.
    """
    if intended is None:
        intended = declared_intended(views)
    spec_diff = spec_differences(views)
    if not intended:
        return spec_diff if len(spec_diff) > 1 else []
    return [f for f in spec_diff if not is_intended(f, intended)]


def spec_differences(views: Sequence[RunView]) -> list[str]:
    """The differing ``server.*``/``plan.*`` fields that are known to differ (an imported
    run's unstated field does not count), a port never (INERT_FIELDS): the candidates for
    both the knobs under test and the confounders."""
    flats = [flatten_config(v) for v in views]
    return [
        f
        for f in differing_fields(views)
        if group_rank(f) < 2
        and f not in INERT_FIELDS
        and not f.startswith(INERT_PREFIXES)
        and _known_difference(f, views, flats)
    ]


def derived_differences(views: Sequence[RunView]) -> list[str]:
    """Differing ``facts.*`` and ``launch.*`` fields: what the server resolved or was
    started with. Expected when a knob changed; a warning sign when none did."""
    flats = [flatten_config(v) for v in views]
    return [
        f
        for f in differing_fields(views)
        if group_rank(f) in (2, 3) and _known_difference(f, views, flats)
    ]


def _stated(view: RunView, flat: dict[str, Any], field: str) -> bool:
    return not (view.imported and flat.get(field) is None)


def _point_parts(text: Any, imported: bool) -> dict[str, str] | None:
    """``c=4 rate=inf in=16 ...`` as a dict; an imported run's unstated parts left out."""
    if not isinstance(text, str):
        return None
    parts = dict(t.split("=", 1) for t in text.split() if "=" in t)
    return {k: v for k, v in parts.items() if not (imported and v in ("?", "None"))}


def _known_difference(
    field: str, views: Sequence[RunView], flats: Sequence[dict[str, Any]]
) -> bool:
    """The field differs among the runs that state it (an imported run's missing field is
    unknown, so it is neither a confounder nor a derived difference). A point compares
    on the load parts every run states."""
    if field.startswith("plan.points[") and any(v.imported for v in views):
        parts = [
            _point_parts(flat.get(field), v.imported) for v, flat in zip(views, flats, strict=True)
        ]
        if all(p is not None for p in parts):
            shared = set.intersection(*(set(p) for p in parts if p is not None))
            return any(len({p[k] for p in parts if p is not None}) > 1 for k in shared)
    known = [
        flat.get(field) for v, flat in zip(views, flats, strict=True) if _stated(v, flat, field)
    ]
    return len(known) > 1 and not _same(known)


def unknown_fields(views: Sequence[RunView]) -> dict[str, list[str]]:
    """Per imported run (by label): the differing fields its source does not state. They
    stay in ``config_diff`` (as None) but cannot be checked, so they are listed apart."""
    labels = run_labels(views)
    flats = [flatten_config(v) for v in views]
    out: dict[str, list[str]] = {}
    for f in differing_fields(views):
        for lab, v, flat in zip(labels, views, flats, strict=True):
            if not _stated(v, flat, f):
                out.setdefault(lab, []).append(f)
    return out


def _values(views: Sequence[RunView], field: str) -> list[Any]:
    """The distinct values of ``field`` among the runs that state it, in run order."""
    out: list[Any] = []
    for v in views:
        value = flatten_config(v).get(field)
        stated = value is not None or not v.imported
        if stated and not any(same_value(value, o) for o in out):
            out.append(value)
    return out


def _install_name(value: Any) -> str:
    return "default" if value is None else str(value)


def version_change(views: Sequence[RunView]) -> str | None:
    """When the runs differ by engine installation: the version difference that choice
    explains, e.g. "engine version 0.5.14→0.5.17 (installation sglang-0.5.14→sglang-0.5.17)"
    (the same version in both: "engine version 0.5.17 in both (installation ...)"); None
    when every run used the same installation."""
    installs = _values(views, INSTALL_FIELD)
    if len(installs) < 2:
        return None
    stated = [v for v in views if v.facts]
    versions = [x for x in _values(stated, VERSION_FIELD) if x is not None]
    if not versions:
        version = "unknown"
    elif len(versions) == 1:
        version = f"{versions[0]} in all" if len(installs) > 2 else f"{versions[0]} in both"
    else:
        version = "→".join(str(x) for x in versions)
    return (
        f"engine version {version} (installation "
        + "→".join(_install_name(i) for i in installs)
        + ")"
    )


def environment_differences(views: Sequence[RunView]) -> list[str]:
    """The ``ENVIRONMENT_FIELDS`` that differ among the runs and that no knob explains: the
    GPU always; the engine version unless the runs differ by engine installation
    (``version_change`` says what that choice changed) or by engine. A run cancelled before its
    server started states no facts: it differs in nothing."""
    stated = [v for v in views if v.facts]
    if len(stated) < 2:
        return []
    # another installation, or another engine altogether, explains another version
    by_install = len(_values(views, INSTALL_FIELD)) > 1 or len(_values(views, ENGINE_FIELD)) > 1
    return [
        f
        for f in derived_differences(stated)
        if f in ENVIRONMENT_FIELDS and not (by_install and f == VERSION_FIELD)
    ]
