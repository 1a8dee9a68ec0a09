"""core/views/report.py: how a run's steps read (the Run page's table), where it ran."""

from __future__ import annotations

from core.run_folder import RunStatus, Step
from core.views.report import node_line, step_rows


def test_where_a_run_ran_reads_as_its_ray_node_or_nothing() -> None:
    assert node_line(RunStatus(executor="ray")) == "Ray: waiting for a node with free GPUs"
    assert node_line(RunStatus(state="running")) == ""
    ray = RunStatus(executor="ray", node_ip="10.1.2.3", node_name="gpu-7", gpu_ids=[0, 1])
    assert node_line(ray) == "Ray node 10.1.2.3 (gpu-7) · GPU ids 0,1"


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
            "step": "point 1/2",  # status.json's 0-based key, counted from 1 for reading
            "outcome": "ok",
            "started (UTC)": "23:59:59.9",
            "took": "2 min 10 s",
            "detail": "",
        },
        {
            "step": "point 2/2",
            "outcome": "running",
            "started (UTC)": "2026-12-02 00:02:10.1",
            "took": "",
            "detail": "",
        },
        {"step": "stop", "outcome": "ok", "started (UTC)": "", "took": "", "detail": ""},
    ]
