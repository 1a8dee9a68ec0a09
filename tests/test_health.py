"""core/load/health.py: the client's own health over a point (event-loop lag, CPU share),
judged over enough samples, merged over worker processes, and how a point's sending is run
under its timeout and cancel while the loop is sampled."""

from __future__ import annotations

import asyncio
import sys
import time

import pytest

from core.load.health import (
    LAG_INTERVAL_S,
    MIN_LAG_SAMPLES,
    ClientHealth,
    fine_gil_switching,
    finish_health,
    run_monitored,
)
from core.metrics import CLIENT_CPU_BOUND_SHARE
from core.records import CANCELLED, RequestRecord


def test_busy_client_with_a_punctual_loop_is_saturated() -> None:
    # Few streams, every callback short: the loop wakes timers on time but never rests
    # (measured with the fake streaming as fast as it can: lag p99 4 ms at 95 % CPU).
    h = ClientHealth(loop_lag_ms_p99=1.0, cpu_s=0.95, wall_s=1.0)
    assert h.saturated and "CPU 95%" in h.saturated_why
    assert h.as_dict()["client_saturated_why"] == h.saturated_why
    lagging = ClientHealth(loop_lag_ms_p99=12.0, cpu_s=0.3, wall_s=1.0, lag_samples=MIN_LAG_SAMPLES)
    assert lagging.saturated and "lag p99 12.0 ms" in lagging.saturated_why
    idle = ClientHealth(loop_lag_ms_p99=1.0, cpu_s=(CLIENT_CPU_BOUND_SHARE - 0.1), wall_s=1.0)
    assert not idle.saturated and idle.saturated_why == ""
    assert not ClientHealth().saturated


def test_a_handful_of_lag_samples_does_not_flag_the_client() -> None:
    few = ClientHealth(loop_lag_ms_p99=26.4, cpu_s=0.25, wall_s=1.0, lag_samples=60)
    assert not few.saturated
    many = ClientHealth(loop_lag_ms_p99=26.4, cpu_s=0.25, wall_s=10.0, lag_samples=1000)
    assert many.saturated and "lag p99 26.4 ms" in many.saturated_why
    busy = ClientHealth(loop_lag_ms_p99=0.1, cpu_s=0.95, wall_s=1.0, lag_samples=60)
    assert busy.saturated and "CPU" in busy.saturated_why
    assert few.as_dict()["loop_lag_samples"] == 60
    # a loop too busy to take samples: 9 samples of ~1 s lag span 9 s of the point
    starved = ClientHealth(
        loop_lag_ms_p99=1000.0, cpu_s=0.2, wall_s=9.0, lag_samples=9, lag_covered_s=9.1
    )
    assert starved.saturated


def test_one_saturated_worker_flags_the_point_and_is_named() -> None:
    calm = ClientHealth(cpu_s=0.2, wall_s=1.0)
    busy = ClientHealth(cpu_s=0.95, wall_s=1.0)
    merged = ClientHealth.merged([calm, busy])
    assert merged.saturated and merged.saturated_why.startswith("worker 1: client CPU 95%")
    assert merged.cpu_s == pytest.approx(1.15)  # in cores: 1.15 cores over the point
    assert not ClientHealth.merged([calm, calm]).saturated


def test_lag_samples_reduce_to_p99_max_count_and_span() -> None:
    h = ClientHealth(lag_samples_ms=[float(k) for k in range(200, 0, -1)])
    finish_health(h)
    assert (h.loop_lag_ms_max, h.loop_lag_ms_p99, h.lag_samples) == (200.0, 199.0, 200)
    assert h.lag_covered_s == pytest.approx(200 * LAG_INTERVAL_S + sum(range(1, 201)) / 1e3)
    assert h.lag_samples_ms == []  # the samples are not kept (nor stored)


def _record(i: int, error: str | None = None, ok: bool = False) -> RequestRecord:
    return RequestRecord(
        index=i, send_s=0.0, prompt_tokens=1, output_tokens_requested=1, error=error, ok=ok
    )


def test_what_the_point_timeout_cut_short_says_so() -> None:
    records = [_record(0, ok=True), _record(1), _record(2, error="HTTP 500: x")]
    health = ClientHealth()

    async def hang() -> None:
        await asyncio.sleep(10)

    t0 = time.perf_counter()
    asyncio.run(run_monitored(hang(), records, health, None, 0.05, t0, time.process_time()))
    assert [r.error for r in records] == [None, "point timeout after 0.05 s", "HTTP 500: x"]
    assert records[1].end_s is not None and health.wall_s >= 0.05 and health.lag_samples > 0


def test_a_cancel_ends_the_point_and_marks_what_was_left() -> None:
    records = [_record(0)]
    asked = [False]

    async def wait_for_cancel() -> None:
        asked[0] = True
        await asyncio.sleep(10)

    t0 = time.perf_counter()
    asyncio.run(
        run_monitored(wait_for_cancel(), records, ClientHealth(), lambda: asked[0], None, t0, 0.0)
    )
    assert records[0].error == CANCELLED
    assert time.perf_counter() - t0 < 5


def test_the_gil_switch_interval_is_fine_inside_and_restored_after() -> None:
    before = sys.getswitchinterval()
    with fine_gil_switching(0.0001):
        assert sys.getswitchinterval() == pytest.approx(min(before, 0.0001))
    assert sys.getswitchinterval() == before


def test_requests_sent_after_their_arrival_times_flag_the_point() -> None:
    """A scheduled send handed over later than SEND_LATE_WARN_MS after it was due (p99) is
    flagged beside client_saturated, and the point's caveats say what it means."""
    from core.metrics import SEND_LATE_WARN_MS, point_caveats

    on_time = ClientHealth()
    for i in range(200):
        on_time.sent_late(i * 0.01, i * 0.01 + 0.0005)
    finish_health(on_time)
    assert on_time.scheduled_sends == 200 and on_time.sent_late_why == ""
    assert on_time.as_dict()["client_sent_late"] is False

    late = ClientHealth()
    for i in range(10):
        late.sent_late(i * 0.01, i * 0.01 + (SEND_LATE_WARN_MS + 5) / 1e3)
    finish_health(late)
    assert late.send_late_ms_p99 == pytest.approx(SEND_LATE_WARN_MS + 5)
    assert late.as_dict()["client_sent_late"] is True
    assert "after their arrival times" in late.sent_late_why
    merged = ClientHealth.merged([on_time, late])
    assert merged.scheduled_sends == 210 and merged.sent_late_why
    kinds = [c.kind for c in point_caveats({"client": merged.as_dict()})]
    assert kinds == ["requests sent late"]
    # a point without arrival times (all at once, or as slots free) has nothing to keep
    assert ClientHealth().as_dict()["send_late_ms_p99"] is None
