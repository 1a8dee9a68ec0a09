"""core.views.runs_table: the Runs page's rows."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd

from core.run_folder import run_result
from core.views.runs_table import runs_frame
from tests.runs_by_hand import P1, P4, P8, make_run


def _ended(runs: Path, run_id: str, state: str, measured: int) -> dict[str, object]:
    """A run of plan [c=1, c=4, c=8] that measured its first ``measured`` points."""
    plan = [(P1, {"output_throughput": 10.0}, "d"), (P4, {"output_throughput": 40.0}, "d")]
    folder = make_run(runs, run_id, points=[*plan, (P8, {"output_throughput": 80.0}, "d")])
    for i in range(measured, 3):
        shutil.rmtree(folder.path / "points" / f"{i:03d}")
    folder.write("result.json", run_result(folder))
    return {"run_id": run_id, "state": state, "tags": []}


def test_a_cancelled_run_reads_the_headline_of_the_points_it_has(tmp_path: Path) -> None:
    """Cancelled during c=4: its numbers are c=1's (result.json), so 'headline at' says c=1
    and that only 1 of 3 planned points was measured, never the plan's c=8."""
    rows = [
        _ended(tmp_path, "20260101-000000-cancel", "cancelled", 1),
        _ended(tmp_path, "20260101-000000-failed", "failed", 2),
        _ended(tmp_path, "20260101-000000-succ", "succeeded", 3),
        _ended(tmp_path, "20260101-000000-none", "cancelled", 0),
    ]
    heads = list(runs_frame(rows, tmp_path)["headline at"])
    assert heads[:3] == ["c=1 (1 of 3 points)", "c=4 (2 of 3 points)", "c=8"]
    assert pd.isna(heads[3])  # nothing measured: no headline, not the plan's c=8


def test_a_live_run_reads_the_plans_heaviest_load(tmp_path: Path) -> None:
    make_run(tmp_path, "20260101-000000-live", points=[(P4, {}, "d"), (P1, {}, "d")])
    row = {"run_id": "20260101-000000-live", "state": "running", "tags": []}
    assert runs_frame([row], tmp_path).iloc[0]["headline at"] == "c=4"
