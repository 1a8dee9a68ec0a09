"""core/views/report.py: how a run's steps read (the Run page's table)."""

from __future__ import annotations

from core.run_folder import Step
from core.views.report import step_rows


def test_steps_read_as_clock_times_and_durations_in_a_fitting_unit() -> None:
    steps = [
        {
            "step": "preflight",
            "outcome": "ok",
            "duration_s": 0.1320,
            "started_at": "2026-12-01T04:18:47.344+00:00",
        },
        {
            "step": "wait_ready",
            "outcome": "ok",
            "duration_s": 55.524,
            "started_at": "2026-12-01T04:18:47.495+00:00",
            "detail": "ready after 55.5 s",
        },
        {
            "step": "point 0",
            "outcome": "ok",
            "duration_s": 130.2,
            "started_at": "2026-12-01T23:59:59.950+00:00",
        },
        {"step": "point 1", "outcome": "running", "started_at": "2026-12-02T00:02:10.150+00:00"},
        {"step": "stop", "outcome": "ok"},
    ]  # an older folder: no start recorded
    assert step_rows([Step.model_validate(s) for s in steps]) == [
        {
            "step": "preflight",
            "outcome": "ok",
            "started (UTC)": "2026-12-01 04:18:47.3",
            "took": "132 ms",
            "detail": "",
        },
        {
            "step": "wait_ready",
            "outcome": "ok",
            "started (UTC)": "04:18:47.4",
            "took": "55.5 s",
            "detail": "ready after 55.5 s",
        },
        {
            "step": "point 0",
            "outcome": "ok",
            "started (UTC)": "23:59:59.9",
            "took": "2 min 10 s",
            "detail": "",
        },
        {
            "step": "point 1",
            "outcome": "running",
            "started (UTC)": "2026-12-02 00:02:10.1",
            "took": "",
            "detail": "",
        },
        {"step": "stop", "outcome": "ok", "started (UTC)": "", "took": "", "detail": ""},
    ]
