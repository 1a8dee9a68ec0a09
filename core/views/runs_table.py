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
from core.experiments.design import run_arm
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


@lru_cache(maxsize=4096)
def _result(path: Path) -> dict[str, Any]:
    """An ended run's result.json (written once, when it ended)."""
    data = read_json(path / "result.json")
    return data if isinstance(data, dict) else {}


def _headline_label(spec: dict[str, Any], result: dict[str, Any]) -> str | None:
    """Where the headline metrics were measured: the point ``result.json`` took them from
    (``core.run_folder.run_result``: the heaviest load the run measured), else, before the run
    ended, the plan's heaviest load (``core.metrics.headline_index``). A run that measured
    fewer points than planned (cancelled, failed) says so: ``c=1 (1 of 3 points)``; one
    that measured none has no headline."""
    points = [p for p in (spec.get("plan") or {}).get("points") or [] if isinstance(p, dict)]
    measured, head = result.get("points"), result.get("headline_point")
    if measured == 0:
        return None
    if not (isinstance(head, int) and 0 <= head < len(points)):
        head = headline_index(points)
    if head is None:
        return None
    conc = points[head].get("concurrency")
    text = "c=∞" if conc is None else f"c={conc}"
    if isinstance(measured, int) and 0 < measured < len(points):
        text += f" ({measured} of {len(points)} points)"
    return text


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
        arm = run_arm(r.get("tags"), runs_dir)
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
        ended = r.get("state") not in LIVE_STATES
        result = _result(runs_dir / str(r["run_id"])) if ended else {}
        row["headline at"] = _headline_label(spec, result)
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
