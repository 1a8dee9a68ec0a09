"""Where runs are, in words (core/views/progress.py): points counted from 1, what ended
and how, elapsed time and time left on an injected clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from core.run_folder import RunStatus, Step, stop_step, stop_step_read
from core.views.progress import (
    duration_text,
    ended_text,
    experiment_time_text,
    point_words,
    run_time_text,
)
from core.views.report import step_rows

NOW = datetime(2026, 12, 2, 4, 0, 0, tzinfo=UTC)


def _ago(seconds: float) -> str:
    return (NOW - timedelta(seconds=seconds)).isoformat()


def test_stored_points_read_from_one_of_the_plan() -> None:
    assert point_words("point 0", 2) == "point 1/2"
    assert point_words("cancelled during point 6", 7) == "cancelled during point 7/7"
    assert point_words("point 1/2 already counted", 2) == "point 1/2 already counted"
    assert point_words("point timeout after 1.5 s", 3) == "point timeout after 1.5 s"
    assert point_words("point 2", None) == "point 3"


def test_step_rows_count_points_from_one_and_say_how_the_server_stopped() -> None:
    steps = [
        Step(step="point 0", outcome="ok", detail="c=1: 4/4 ok"),
        Step(step="point 1", outcome="ok", detail="c=4: 4/4 ok"),
        Step(step="stop", outcome="ok", duration_s=12.1, detail="exit code -9"),
    ]
    rows = step_rows(steps)
    assert [r["step"] for r in rows] == ["point 1/2", "point 2/2", "stop"]
    # an old folder's "exit code -9" after the whole grace: the stop's own SIGKILL
    assert rows[2]["outcome"] == "killed"
    assert rows[2]["detail"] == "server did not exit on SIGTERM within 10 s, killed (exit -9)"


def test_the_stop_step_names_who_killed_the_server() -> None:
    assert stop_step(-9, True, 10.2) == (
        "killed",
        "server did not exit on SIGTERM within 10 s, killed (exit -9)",
    )
    outcome, detail = stop_step(-9, False, 6.0)  # SGLang SIGKILLs its own tree on SIGTERM
    assert outcome == "ok" and "by killing its own process tree (exit -9" in detail
    assert "ok" not in detail and "exit code" not in detail
    assert stop_step(-15, False, 0.8) == ("ok", "server exited on SIGTERM after 0.8 s (exit -15)")
    # the H200 demo's stop: exit -9 after 6 s of a 10 s grace was SGLang's own
    old = Step(step="stop", outcome="ok", duration_s=6.025, detail="exit code -9")
    assert stop_step_read(old)[0] == "ok" and "own process tree" in stop_step_read(old)[1]


def test_ended_counts_say_what_ended() -> None:
    assert ended_text(["failed"] * 4) == "4/4 ended: 4 failed"
    assert ended_text(["succeeded"] * 3 + ["failed"]) == "4/4 ended: 3 succeeded, 1 failed"
    assert ended_text(["succeeded", "running", "queued"]) == "1/3 ended: 1 succeeded"
    assert ended_text(["queued"]) == "0/1 ended"


def test_a_running_run_has_elapsed_time_and_time_left_from_its_pace() -> None:
    status = RunStatus(
        state="running",
        started_at=_ago(100),
        steps=[Step(step="point 0", outcome="running", started_at=_ago(60))],
        progress={"point": 0, "points_total": 2, "requests_done": 2, "requests_total": 4},
    )
    # a quarter done in the 60 s since the first point began: 180 s to go
    assert run_time_text(status, 500.0, "median of 3 earlier run(s)", NOW) == (
        "elapsed 100.0 s · about 3 min 00 s left (from progress so far)"
    )


def test_before_its_points_a_run_is_timed_by_the_estimate() -> None:
    starting = RunStatus(state="running", started_at=_ago(20), phase="wait_ready")
    assert run_time_text(starting, 80.0, "rough: from the plan at assumed rates", NOW) == (
        "elapsed 20.0 s · about 60.0 s left (rough: from the plan at assumed rates)"
    )
    late = RunStatus(state="running", started_at=_ago(90))
    assert "longer than the 80.0 s estimated" in run_time_text(late, 80.0, "x", NOW)
    assert run_time_text(starting, None, "", NOW).endswith("no earlier run to estimate from")
    queued = RunStatus(state="queued")
    assert run_time_text(queued, 80.0, "x", NOW) == "queued; about 80.0 s once it starts (x)"


def test_an_experiment_is_timed_by_its_own_runs_first() -> None:
    runs = [
        RunStatus(state="succeeded", started_at=_ago(300), duration_s=120.0),
        RunStatus(state="running", started_at=_ago(30)),
        RunStatus(state="queued"),
    ]
    assert experiment_time_text(runs, 999.0, "rough", NOW) == (
        "elapsed 5 min 00 s · about 3 min 30 s left "
        "(median of its 1 succeeded run(s), one run after another)"
    )
    fresh = [RunStatus(state="queued"), RunStatus(state="queued")]
    assert experiment_time_text(fresh, 60.0, "rough", NOW) == (
        "not started yet · about 2 min 00 s left (rough, one run after another)"
    )


def test_durations_read_in_the_unit_that_fits() -> None:
    assert duration_text(0.25) == "250 ms"
    assert duration_text(65.0) == "65.0 s"
    assert duration_text(185.0) == "3 min 05 s"
    assert duration_text(7500.0) == "2 h 05 min"
