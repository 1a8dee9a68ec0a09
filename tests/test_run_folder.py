"""core/run_folder.py: the typed status (old folders load, one way to end) and the one
run-id rule with its lookup."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from core.cli import main as cli_main
from core.config import RunSpec
from core.errors import ConfigError, StoreError
from core.executors.queue import cancel
from core.launch.explain import submit_explanation
from core.run_folder import (
    FINAL_STATES,
    RunFolder,
    RunStatus,
    find_runs,
    is_run_id,
    point_of_step,
    point_step,
    utc_now,
)
from core.settings import Settings
from tests.runs_by_hand import make_run

DEMO_RUNS = Path(__file__).resolve().parent.parent / "data" / "demo" / "runs"


def test_shipped_demo_status_files_load_typed_and_round_trip() -> None:
    folders = sorted(p for p in DEMO_RUNS.iterdir() if (p / "status.json").is_file())
    assert folders
    for path in folders:
        folder = RunFolder(path)
        status = folder.read_status()
        assert status.state in FINAL_STATES and status.final and status.run_id == path.name
        # "warning": a step that measured and flagged (a dummy model's degenerate probe answer)
        assert all(s.outcome in ("ok", "warning", "skipped", "failed") for s in status.steps)
        # no steps: a run that never started (cancelled, or still queued when the lent GPU
        # machine went back: bench/gpu/import_results.py)
        assert (
            status.steps
            or status.reason == "cancelled before it started"
            or ("released while this run was queued" in (status.reason or ""))
        )
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


def test_status_or_empty_is_the_one_lenient_reader(tmp_path: Path) -> None:
    """Missing, half-written or of the wrong shape: an empty status, never an error (the
    worker, executors, catalog and pages poll folders that are being written)."""
    folder = RunFolder.create(tmp_path)
    assert folder.status_or_empty() == RunStatus() and folder.status_or_empty().state is None
    (folder.path / "status.json").write_text('{"state": "runn')  # a copy caught half-way
    assert folder.status_or_empty().state is None
    with pytest.raises(StoreError):
        folder.read_status()  # the strict reader says why
    folder.write("status.json", {"state": "exploded"})
    assert folder.status_or_empty().state is None
    folder.write("status.json", {"state": "queued", "phase": "queued"})
    assert folder.status_or_empty() == folder.read_status()
    assert folder.status_or_empty().active and not folder.status_or_empty().final


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


# --- the run-id rule and the lookup (is_run_id, find_runs) --------------------------------------


def test_run_id_check_and_find_runs(tmp_path: Path) -> None:
    make_run(tmp_path, "20260101-000000-abcdef")
    assert is_run_id("20260101-000000-abcdef") and is_run_id("imp-93c3574437d9")
    for bad in ("../etc", "a/b", "", "-x", "a..b", "x" * 101):
        assert not is_run_id(bad), bad
    found, unknown = find_runs(
        tmp_path, ["20260101-000000-abcdef", "nope", "../etc", " ", "20260101-000000-abcdef"]
    )
    assert [f.run_id for f in found] == ["20260101-000000-abcdef"]
    assert unknown == ["nope", "../etc"]


@pytest.mark.parametrize("bad", ["rün-1", "run-١", "ｒun"])
def test_a_non_ascii_run_id_is_refused_everywhere(
    settings: Settings, bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A folder by that name exists, yet no caller finds it: the CLI, the worker, explain
    and the pages' lookup all apply the one ASCII rule (explain once accepted it)."""
    make_run(settings.runs_dir, bad)
    make_run(settings.runs_dir, "ok-run")
    assert not is_run_id(bad)
    assert find_runs(settings.runs_dir, [bad, "ok-run"])[1] == [bad]
    assert cancel(settings, bad) == f"no run {bad}"
    with pytest.raises(ConfigError) as info:
        submit_explanation(settings, bad, "ok-run")
    assert info.value.field == "RUN_A"
    with pytest.raises(SystemExit):
        cli_main(["run", "--run-id", bad])
    assert "is not a run id" in capsys.readouterr().err


def test_log_tail_reads_the_last_lines_of_the_server_log(tmp_path: Path) -> None:
    folder = RunFolder.create(tmp_path)
    assert folder.log_tail() == ""  # no server.log yet
    lines = [f"line {i}" for i in range(20_000)]  # > 64 KiB: read from the end only
    folder.log_path.write_text("\n".join(lines) + "\nprogress 1\rprogress 2\n")  # \r: a redraw
    assert folder.log_tail(3).splitlines() == ["line 19999", "progress 1", "progress 2"]
    assert folder.log_tail(200).splitlines()[:2] == ["line 19802", "line 19803"]
    assert len(folder.log_tail().splitlines()) == 50


def test_prepare_queues_a_folder_or_starts_it_here(tmp_path: Path) -> None:
    from core.config import ServerConfig

    spec = RunSpec(server=ServerConfig(engine="sglang", extra_args=("--api-key", "sk-0123456789")))
    queued = RunFolder.prepare(tmp_path, spec, "20260101-000000-000001")
    assert queued.run_id == "20260101-000000-000001"
    st = queued.read_status()
    assert (st.state, st.phase, st.pid) == ("queued", "queued", None)
    data = queued.read("spec.json")
    assert data["run_id"] == queued.run_id and data["created_at"]
    # The API key stays out of spec.json: in the owner-only file the run process reads.
    assert data["server"]["extra_args"] == ["--api-key", "***"]
    assert "sk-0123456789" in json.dumps(queued.read_secrets())
    here = RunFolder.prepare(tmp_path, RunSpec(), run_now=True)  # the CLI runs it itself
    st = here.read_status()
    assert (st.state, st.phase, st.pid) == ("running", "starting", os.getpid())
    assert st.started_at and not here.secrets_path.exists()
    with pytest.raises(StoreError, match="cannot create run folder"):
        RunFolder.prepare(tmp_path, spec, queued.run_id)  # an id is taken once


def test_status_json_is_read_only_through_the_typed_readers() -> None:
    """No module reads status.json as a dict of its own, or keeps its own lenient copy."""
    repo = Path(__file__).resolve().parent.parent
    found = []
    for path in sorted([*repo.glob("core/**/*.py"), *repo.glob("pages/*.py")]):
        text = path.read_text()
        rel = path.relative_to(repo).as_posix()
        if re.search(r"read_json\([^)]*status\.json", text) or re.search(
            r"def _status\(folder", text
        ):
            found.append(rel)
    assert found == []


def test_a_point_step_names_its_0_based_index_and_reads_back() -> None:
    assert point_step(0) == "point 0" and point_of_step(point_step(12)) == 12
    assert point_of_step("preflight") is None and point_of_step("point 1/3") is None
