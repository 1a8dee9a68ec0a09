"""The Runs page's table: the catalog's rows plus what a reader needs to tell runs apart
at a glance: the experiment and arm a run belongs to (with a link), the knobs under test as
columns, which point the headline metrics were measured at, a link to the history of its
configuration, the shipped H200 demo named as such, and which runs are live (only those can
be cancelled).

Pure functions over the catalog rows and the run folders' spec.json (read once per run
and cached: a spec never changes after a run is queued).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import pandas as pd

from core.config import knob_text
from core.experiments.design import arm_of_tags
from core.metrics import headline_index
from core.run_folder import read_json
from core.settings import DEMO_DIR
from core.views.progress import point_words

__all__ = ["LIVE_STATES", "is_demo_run", "knob_columns", "live_runs", "runs_frame"]

LIVE_STATES = ("queued", "running")
_MAX_KNOBS = 4


@lru_cache(maxsize=4096)
def _spec(path: Path) -> dict[str, Any]:
    data = read_json(path / "spec.json")
    return data if isinstance(data, dict) else {}


def is_demo_run(run_id: str) -> bool:
    """The run is one of the shipped H200 demo's (core/portal/demo.py copies them as they are)."""
    return (DEMO_DIR / "runs" / run_id).is_dir()


def _tag(tags: Any, prefix: str) -> str | None:
    for t in tags or []:
        if isinstance(t, str) and t.startswith(prefix) and len(t) > len(prefix):
            return t[len(prefix) :]
    return None


def _headline_label(spec: dict[str, Any]) -> str | None:
    """The plan's heaviest load (``core.metrics.headline_index``), where the pipeline
    takes a run's headline metrics."""
    points = [p for p in (spec.get("plan") or {}).get("points") or [] if isinstance(p, dict)]
    head = headline_index(points)
    if head is None:
        return None
    conc = points[head].get("concurrency")
    return "c=∞" if conc is None else f"c={conc}"


def runs_frame(rows: Sequence[dict[str, Any]], runs_dir: Path) -> pd.DataFrame:
    """The catalog rows as the Runs page shows them: ``experiment`` (a link), ``arm``,
    one column per knob under test (the runs' declared ``intended_diff``), ``headline at``
    (the point of the headline metrics), the model with the demo named "H200 demo", and
    ``live``. A cancelled run's headline error rate is left empty: its last point was cut
    short by the cancel, not failed by the server; an ended run's phase too."""
    specs = {r["run_id"]: _spec(runs_dir / str(r["run_id"])) for r in rows}
    knobs: list[str] = []
    for spec in specs.values():
        for k in spec.get("intended_diff") or []:
            if isinstance(k, str) and k not in knobs:
                knobs.append(k)
    knobs = knobs[:_MAX_KNOBS]
    out = []
    for r in rows:
        spec = specs[r["run_id"]]
        exp = _tag(r.get("tags"), "exp:")
        arm = arm_of_tags(r.get("tags"))
        demo = is_demo_run(str(r["run_id"]))
        row = dict(r)
        row["experiment"] = f"experiment?experiment={exp}" if exp else None
        row["arm"] = arm
        for k in knobs:
            group, _, name = k.partition(".") if "." in k else ("server", ".", k)
            value = (spec.get(group) or {}).get(name)
            row[name] = (
                knob_text(value)
                if k in (spec.get("intended_diff") or []) or value is not None
                else None
            )
        row["headline at"] = _headline_label(spec)
        # a run with results is a point of its configuration's history (pages/history.py)
        row["history"] = f"history?run={r['run_id']}" if r.get("state") == "succeeded" else None
        if demo:
            row["model"] = "H200 demo: " + Path(str(r.get("model") or "")).name
        if r.get("state") == "cancelled":
            row["error_rate"] = None
        row["live"] = r.get("state") in LIVE_STATES
        if not row["live"]:
            row["phase"] = None  # where a live run is; an ended run's is its last step
        elif isinstance(row.get("phase"), str):  # "point 2/3", as every page counts
            plan_points = (spec.get("plan") or {}).get("points") or []
            row["phase"] = point_words(row["phase"], len(plan_points) or None)
        out.append(row)
    frame = pd.DataFrame(out)
    frame.attrs["knobs"] = [k.partition(".")[2] or k for k in knobs]
    return frame


def live_runs(frame: pd.DataFrame, run_ids: Sequence[str]) -> list[str]:
    """Of ``run_ids``, those still queued or running (the only ones a cancel can stop)."""
    if frame.empty:
        return []
    live = set(frame.loc[frame["live"], "run_id"])
    return [r for r in run_ids if r in live]


def knob_columns(frame: pd.DataFrame) -> list[str]:
    """The knob-under-test columns ``runs_frame`` filled (e.g. ``cuda_graphs``)."""
    return list(frame.attrs.get("knobs", []))
