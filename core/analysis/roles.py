"""Who is who in a comparison: the knobs under test, one display name per run, the
baseline (the control on the first knob, ``core.experiments.design.control_of``: the one
rule an experiment's baseline arm follows too) and the headline point (the heaviest load
every run measured: ``core.metrics.headline_index``, the rule one run's result follows).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from core.analysis.diff import (
    declared_intended,
    flatten_config,
    group_rank,
    is_intended,
    spec_differences,
)
from core.analysis.engines import engine_arm_fields
from core.analysis.points import MatchedPoint, match_points
from core.analysis.runs import RunView
from core.experiments.design import arm_label, control_of, run_arm
from core.metrics import headline_index

__all__ = ["arm_names", "baseline_index", "field_name", "headline_point", "knob_fields"]


def _arm_tag(view: RunView) -> str | None:
    """The experiment arm a run belongs to (``core.experiments.design.run_arm``)."""
    return run_arm(view.spec.get("tags"), None if view.path is None else view.path.parent)


def knob_fields(views: Sequence[RunView]) -> list[str]:
    """The knobs under test: the declared intended fields that differ, else every
    ``server.*``/``plan.*`` field that differs (a port never counts). When the engine
    differs it is the knob, and the server fields that differ with it are each arm's
    configuration (``core.analysis.engines.engine_arm_fields``)."""
    if len(views) < 2:
        return []
    spec_diff = spec_differences(views)
    intended = declared_intended(views)
    chosen = [f for f in spec_diff if is_intended(f, intended)] if intended else []
    return engine_arm_fields(chosen or spec_diff)[0]


def field_name(field: str) -> str:
    """A server or plan field as a reader names it: ``server.cuda_graphs`` -> ``cuda_graphs``
    (a fact or launch field keeps its group)."""
    return field.split(".", 1)[1] if group_rank(field) < 2 else field


def arm_names(views: Sequence[RunView]) -> list[str]:
    """One display name per run, what a reader tells the runs apart by, never an id
    alone: the experiment arm, else the knob values that differ (``cuda_graphs=on``),
    else where an imported run came from. A name several runs share (trials of one arm,
    identical configurations) gets each run's short id appended."""
    if len(views) == 1:
        arm = _arm_tag(views[0])
        return [arm or views[0].run_id]
    knobs = knob_fields(views)
    flats = [flatten_config(v) for v in views]
    mixed = any(v.imported for v in views) and not all(v.imported for v in views)
    names = []
    for v, flat in zip(views, flats, strict=True):
        arm = _arm_tag(v)
        if arm is not None and all(_arm_tag(o) is not None for o in views):
            names.append(arm)
        elif v.imported and (mixed or len(knobs) > 2):
            origin = v.spec.get("import") or {}
            names.append(f"imported {Path(str(origin.get('source_file') or '?')).name}")
        elif mixed:  # beside an import, what tells them apart is who measured
            names.append(f"ServeLab {v.run_id[-6:]}")
        elif knobs:  # the arm label's spelling: graphs=on mem=0.92
            label = arm_label({f: flat.get(f) for f in knobs[:2]})
            names.append(label + (" …" if len(knobs) > 2 else ""))
        else:
            names.append(v.run_id)
    counts = Counter(names)
    out = [
        n if counts[n] == 1 or n == v.run_id else f"{n} · {v.run_id[-6:]}"
        for n, v in zip(names, views, strict=True)
    ]
    again = Counter(out)  # short ids that collide: the whole id
    return [
        n if again[n] == 1 else f"{n.rsplit(' · ', 1)[0]} · {v.run_id}"
        for n, v in zip(out, views, strict=True)
    ]


def baseline_index(views: Sequence[RunView]) -> int:
    """The baseline run of a comparison: the control (``control_of``) on the first knob
    under test; the first run when nothing differs."""
    knobs = knob_fields(views)
    if not knobs:
        return 0
    return control_of([flatten_config(v).get(knobs[0]) for v in views])


def headline_point(views: Sequence[RunView]) -> MatchedPoint | None:
    """THE headline point of a comparison: the heaviest load every run measured (highest
    concurrency, then request rate; the last such point of the plan on a tie: the rule of
    ``core.metrics.headline_index``, which headlines one run's result). None when no load
    is common to all runs."""
    complete = [mp for mp in match_points(views) if mp.complete]
    index = headline_index([(mp.summaries[0] or {}).get("point") or {} for mp in complete])
    return None if index is None else complete[index]
