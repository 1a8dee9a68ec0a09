"""The run folder's typed status (core/run_folder.py): old folders load, one way to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.config import RunSpec
from core.errors import StoreError
from core.run_folder import FINAL_STATES, RunFolder, utc_now

DEMO_RUNS = Path(__file__).resolve().parent.parent / "data" / "demo" / "runs"


def test_shipped_demo_status_files_load_typed_and_round_trip() -> None:
    folders = sorted(p for p in DEMO_RUNS.iterdir() if (p / "status.json").is_file())
    assert folders
    for path in folders:
        folder = RunFolder(path)
        status = folder.read_status()
        assert status.state in FINAL_STATES and status.final and status.run_id == path.name
        assert all(s.outcome in ("ok", "skipped", "failed") for s in status.steps)
        assert status.steps or status.reason == "cancelled before it started"
        # Written back, the JSON is what was on disk: no key added, none dropped.
        assert status.as_json() == json.loads((path / "status.json").read_text())


def test_unknown_and_missing_fields_are_tolerated(tmp_path: Path) -> None:
    folder = RunFolder.create(tmp_path)
    assert folder.read_status().state is None  # no status.json yet
    folder.write(
        "status.json",
        {
            "state": "running",
            "ray_actor": "servelab-run-x",
            "steps": [{"step": "launch", "outcome": "ok", "new": 1}],
        },
    )
    status = folder.read_status()
    assert status.state == "running" and status.extra("ray_actor") == "servelab-run-x"
    assert status.steps[0].model_extra == {"new": 1}
    folder.update_status(phase="point 0")
    assert folder.status()["ray_actor"] == "servelab-run-x"


def test_a_status_of_the_wrong_shape_is_a_store_error(tmp_path: Path) -> None:
    folder = RunFolder.create(tmp_path)
    folder.write("status.json", {"state": "exploded"})
    with pytest.raises(StoreError, match="not a run status"):
        folder.read_status()
    with pytest.raises(StoreError, match="pid"):
        folder.update_status(state="running", pid="not a pid")


def test_end_records_the_final_state_and_marks_unfinished_steps(tmp_path: Path) -> None:
    folder = RunFolder.create(tmp_path)
    folder.write(
        "status.json",
        {
            "run_id": folder.run_id,
            "state": "running",
            "progress": {"point": 0},
            "steps": [
                {"step": "launch", "outcome": "ok"},
                {"step": "point 0", "outcome": "running"},
            ],
        },
    )
    folder.write_secrets({"extra_args": {"0": "--api-key=sekret-value"}})
    status = folder.end("interrupted", "run process 7 is gone", interrupted="it was killed")
    assert status.state == "interrupted" and status.phase == "done"
    assert status.reason == "run process 7 is gone" and status.finished_at
    assert status.progress is None
    assert [(s.step, s.outcome, s.detail) for s in status.steps] == [
        ("launch", "ok", None),
        ("point 0", "failed", "interrupted: it was killed"),
    ]
    assert folder.read_status() == status
    assert not folder.secrets_path.exists()  # no secret outlives its run


def test_end_takes_only_a_final_state(tmp_path: Path) -> None:
    folder = RunFolder.create(tmp_path)
    with pytest.raises(ValueError, match="final state"):
        folder.end("running", "no")  # type: ignore[arg-type]
    for state in FINAL_STATES:
        assert folder.end(state, "ended").final  # type: ignore[arg-type]


def test_spec_reads_a_prepared_folder(tmp_path: Path) -> None:
    spec = RunSpec(note="from spec.json")
    folder = RunFolder.create(tmp_path)
    folder.write(
        "spec.json",
        {"run_id": folder.run_id, "created_at": utc_now(), **spec.model_dump(mode="json")},
    )
    assert folder.spec() == spec
    (folder.path / "spec.json").unlink()
    with pytest.raises(StoreError, match=r"no spec\.json"):
        folder.spec()
