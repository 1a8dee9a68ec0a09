"""The client-saturation warning: loop lag OR the client's CPU share, shown by the CLI."""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import time
from pathlib import Path

import pytest

from core.load.generator import (
    MIN_LAG_SAMPLES,
    ClientHealth,
    Clock,
    LoadOptions,
    run_load,
    send_on_schedule,
)
from core.load.prompts import Prompt
from core.metrics import CLIENT_CPU_BOUND_SHARE
from core.run_folder import RunFolder
from core.views.report import format_run
from tests.test_loadgen import fake_server


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


def test_a_blocked_loop_is_reported(fake_sglang: Path, tmp_path: Path) -> None:
    def block(_done: int, _total: int) -> None:
        time.sleep(0.03)  # a callback that holds the loop, as an overloaded client does

    with fake_server(tmp_path / "s.log") as base:
        opts = LoadOptions(
            base_url=base,
            model="m",
            concurrency=2,
            request_rate=float("inf"),
            seed=1,
            exact_length_body={"ignore_eos": True},
            request_timeout_s=30.0,
            point_timeout_s=60.0,
        )
        prompt = Prompt(text=" alpha", prompt_tokens=1, output_len=4)
        _, health = run_load(opts, [prompt] * 40, on_done=block)
    assert health.saturated and "lag" in health.saturated_why


def test_cli_report_names_the_point_and_the_reason(tmp_path: Path) -> None:
    folder = RunFolder.create(tmp_path)
    folder.write("status.json", {"state": "succeeded", "steps": []})
    metrics = {
        k: 1.0
        for k in (
            "output_throughput",
            "median_ttft_ms",
            "p99_ttft_ms",
            "median_itl_ms",
            "median_tpot_ms",
            "median_e2e_ms",
        )
    }
    d = folder.point_dir(0)
    (d / "summary.json").write_text(
        json.dumps(
            {
                "index": 0,
                "label": "c=8",
                "metrics": {**metrics, "completed": 8, "num_requests": 8},
                "client": ClientHealth(loop_lag_ms_p99=1.0, cpu_s=0.97, wall_s=1.0).as_dict(),
            }
        )
    )
    text = format_run(folder)
    assert (
        "WARNING: point c=8: load generator saturated (client CPU 97% of a core >= 90%): "
        "the client, not the server, may have limited these numbers"
    ) in text
    # a loop that lagged with CPU to spare: every request went out, the stamps came late
    (d / "summary.json").write_text(
        json.dumps(
            {
                "index": 0,
                "label": "c=8",
                "metrics": {**metrics, "completed": 8, "num_requests": 8},
                "client": ClientHealth(
                    loop_lag_ms_p99=6.0, cpu_s=0.1, wall_s=1.0, lag_samples=MIN_LAG_SAMPLES
                ).as_dict(),
            }
        )
    )
    assert (
        "WARNING: point c=8: client timestamps late (event-loop lag p99 6.0 ms > 5 ms at "
        "10% of a core): its latency tails (p99) may include that much client delay"
    ) in format_run(folder)


class LateClock:
    """A virtual clock whose every real wait wakes ``late_s`` late, as on a busy event loop
    (a zero wait only yields)."""

    def __init__(self, late_s: float) -> None:
        self.t, self.late_s = 1000.0, late_s

    def now(self) -> float:
        return self.t

    async def sleep(self, delay_s: float) -> None:
        if delay_s > 0:
            self.t += delay_s + self.late_s


@pytest.mark.parametrize("late_s", [0.0, 0.02])
def test_poisson_arrivals_keep_their_rate_when_sleeps_wake_late(late_s: float) -> None:
    # A busy event loop wakes every sleep late. Arrivals slept for relative gaps added those
    # delays up (asked 711 req/s, sent 230 req/s); sleeping to absolute times catches up, so
    # every arrival is at most one wake-up late, never early, and none is skipped or reordered.
    n, rate, seed = 60, 100.0, 7
    rng = random.Random(seed)
    planned = list(itertools.accumulate([0.0] + [rng.expovariate(rate) for _ in range(n - 1)]))
    clock = LateClock(late_s)
    starts: list[tuple[int, float]] = []
    asyncio.run(
        send_on_schedule(
            n,
            rate,
            seed,
            lambda i: starts.append((i, clock.t - 1000.0)),
            Clock(now=clock.now, sleep=clock.sleep),
        )
    )
    assert [i for i, _ in starts] == list(range(n))
    for (_, at), due in zip(starts, planned, strict=True):
        assert due - 1e-9 <= at <= due + late_s + 1e-9, (at, due)


def test_infinite_rate_sends_everything_at_once() -> None:
    clock = LateClock(0.02)
    starts: list[float] = []
    asyncio.run(
        send_on_schedule(
            5,
            float("inf"),
            1,
            lambda _i: starts.append(clock.t),
            Clock(now=clock.now, sleep=clock.sleep),
        )
    )
    assert starts == [1000.0] * 5  # no sleep at all between sends
