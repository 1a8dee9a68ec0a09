"""core/load/schedule.py: when a point's requests go out. The arrival schedule is seeded and
absolute (a late-waking loop catches up, never adds its delays up), the same whatever the
number of worker processes; the gate stops sending once a point has sent enough. Every clock
here is virtual."""

from __future__ import annotations

import asyncio
import itertools
import math
import random

import pytest

from core.load.schedule import (
    Clock,
    SteadyGate,
    arrival_times,
    send_on_schedule,
    sleep_until,
    slots_to_fill,
)


def test_one_schedule_whatever_the_number_of_workers() -> None:
    """The one-process dispatcher sends at exactly ``arrival_times``; the workers read the
    same list by index, so the merged schedule is the one-process schedule."""

    class Virtual:
        t = 0.0

        def now(self) -> float:
            return self.t

        async def sleep(self, s: float) -> None:
            self.t += s

    clock = Virtual()
    starts: list[float] = []
    asyncio.run(
        send_on_schedule(
            40, 25.0, 7, lambda _i: starts.append(clock.t), Clock(now=clock.now, sleep=clock.sleep)
        )
    )
    assert starts == pytest.approx(arrival_times(40, 25.0, 7), abs=1e-12)
    assert arrival_times(40, 25.0, 7) == arrival_times(40, 25.0, 7)  # seeded
    assert arrival_times(5, math.inf, 7) == [0.0] * 5


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


def test_arrival_schedule_stops_when_start_says_enough() -> None:
    started: list[int] = []
    asyncio.run(send_on_schedule(10, math.inf, 1, lambda i: started.append(i) if i < 3 else False))
    assert started == [0, 1, 2]


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_gate_sends_the_floor_then_until_the_slots_were_busy_long_enough() -> None:
    clock = FakeClock()
    gate = SteadyGate(
        n=1000, concurrency=2, request_rate=math.inf, min_requests=4, min_steady_s=5.0, clock=clock
    )
    for i in range(2):
        assert gate.may_send(i)
        gate.started()
    assert gate.full_since == 100.0
    for i in range(2, 10):  # each request takes 1 s: slots refill as they free
        clock.t += 1.0
        gate.ended()
        if not gate.may_send(i):
            break
        gate.started()
    assert i == 6  # i = 2..5 sent at t = 101..104; at 105 the slots were busy 5 s: stop
    assert not gate.may_send(8) and not gate.may_send(3)  # never reopens


def test_gate_without_sizing_sends_everything() -> None:
    gate = SteadyGate(
        n=5,
        concurrency=1,
        request_rate=math.inf,
        min_requests=None,
        min_steady_s=None,
        clock=FakeClock(),
    )
    assert all(gate.may_send(i) for i in range(5))


def test_gate_with_waves_only_stops_at_the_floor() -> None:
    gate = SteadyGate(
        n=100,
        concurrency=4,
        request_rate=math.inf,
        min_requests=12,
        min_steady_s=None,
        clock=FakeClock(),
    )
    assert [gate.may_send(i) for i in range(14)] == [True] * 12 + [False] * 2


def test_the_slots_to_fill_are_the_cap_or_every_request_at_once_or_one() -> None:
    assert slots_to_fill(8, math.inf, 100) == 8
    assert slots_to_fill(8, 5.0, 3) == 3  # fewer requests than slots
    assert slots_to_fill(None, math.inf, 40) == 40  # all sent at once
    assert slots_to_fill(None, 5.0, 40) == 1  # uncapped Poisson: steady from the first send


def test_an_early_wake_sleeps_again_until_due() -> None:
    """uvloop's timers may wake up to 1 ms early: the wait goes on to the microsecond."""
    t = [0.0]

    async def early(s: float) -> None:
        t[0] += max(s - 0.001, s / 2)

    asyncio.run(sleep_until(0.01, 0.0, Clock(now=lambda: t[0], sleep=early)))
    assert 0.01 - 1e-6 <= t[0] <= 0.01 + 1e-6


def test_a_traces_own_arrivals_are_kept_even_when_sleeps_wake_late() -> None:
    """Trace replay: the given arrival times replace the Poisson process; each request
    starts at its time (at most one late wake-up after it), in order, none skipped."""
    given = [0.0, 0.0, 0.25, 0.5, 2.0]
    clock = LateClock(0.01)
    starts: list[float] = []
    asyncio.run(
        send_on_schedule(
            len(given),
            float("inf"),  # the point's rate does not apply to a trace's timestamps
            1,
            lambda _i: starts.append(clock.t - 1000.0),
            Clock(now=clock.now, sleep=clock.sleep),
            given=given,
        )
    )
    assert arrival_times(len(given), 3.0, 1, given) == given
    for at, due in zip(starts, given, strict=True):
        assert due - 1e-9 <= at <= due + 0.01 + 1e-9
    with pytest.raises(ValueError, match="2 arrival times for 3 requests"):
        arrival_times(3, math.inf, 1, [0.0, 1.0])


def test_an_uncapped_trace_is_steady_from_its_first_send() -> None:
    assert slots_to_fill(None, math.inf, 10, scheduled=True) == 1
    assert slots_to_fill(None, math.inf, 10) == 10  # everything at once
    assert slots_to_fill(3, math.inf, 10, scheduled=True) == 3
