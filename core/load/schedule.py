"""When a point's requests go out: the arrival schedule (seeded, on absolute times of the
point's clock) and the gate that decides when a point has sent enough."""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "SCHEDULE_SLACK_S",
    "Clock",
    "SteadyGate",
    "arrival_times",
    "is_scheduled",
    "send_on_schedule",
    "sleep_until",
    "slots_to_fill",
]

SCHEDULE_SLACK_S = 1e-6  # an arrival this close to due is on time (floats; timer resolution)


@dataclass(frozen=True)
class Clock:
    """Where the arrival schedule reads the time and waits: the real ones, or a virtual clock
    in tests (so that a late-waking event loop can be simulated exactly)."""

    now: Callable[[], float] = time.perf_counter
    sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep


async def sleep_until(due_s: float, t0: float, clock: Clock) -> None:
    """Wait until ``due_s`` after ``t0`` on ``clock`` (to the microsecond): uvloop's timers
    have a resolution of 1 ms and may wake that much early, so an early wake sleeps again."""
    while (wait_s := due_s - (clock.now() - t0)) > SCHEDULE_SLACK_S:
        await clock.sleep(wait_s)


def arrival_times(
    n: int, request_rate: float, seed: int, given: Sequence[float] | None = None
) -> list[float]:
    """The i-th request's arrival on the point's clock (s after the first): ``given`` when
    the workload has its own (a trace's timestamps, scaled), all 0 when ``request_rate`` is
    infinite, else a Poisson process drawn from ``seed``. Computed once per point, so any
    split of it (core/load/shards.py) keeps exactly these times."""
    if given is not None:
        if len(given) < n:
            raise ValueError(f"{len(given)} arrival times for {n} requests")
        return [float(t) for t in given[:n]]
    if math.isinf(request_rate):
        return [0.0] * n
    rng = random.Random(seed)
    times = [0.0] * n
    for i in range(1, n):
        times[i] = times[i - 1] + rng.expovariate(request_rate)
    return times


def is_scheduled(request_rate: float, given: Sequence[float] | None) -> bool:
    """Whether a point's requests have arrival times to keep (Poisson or a trace's), so a
    late send is the client's lateness; otherwise they go at once or as slots free."""
    return given is not None or not math.isinf(request_rate)


async def send_on_schedule(
    n: int,
    request_rate: float,
    seed: int,
    start: Callable[[int], object],
    clock: Clock = Clock(),
    given: Sequence[float] | None = None,
) -> None:
    """Call ``start(i)`` for i = 0 .. n-1 in order at ``arrival_times`` (all at once when
    ``request_rate`` is infinite and nothing is ``given``), counted from the first.
    ``start`` returning False ends the schedule (the point has sent enough)."""
    due = arrival_times(n, request_rate, seed, given)
    t0 = clock.now()
    for i in range(n):
        if start(i) is False:
            return
        if i < n - 1 and due[i + 1] > 0.0:
            # Sleep until an absolute arrival time, not for a relative gap: a busy
            # loop wakes each sleep late, and relative gaps would add those delays up
            # (711 req/s asked for, 230 req/s sent on 2 cores; docs/BENCHMARKS.md).
            await sleep_until(due[i + 1], t0, clock)


def slots_to_fill(
    concurrency: int | None, request_rate: float, n: int, scheduled: bool = False
) -> int:
    """How many requests in flight make a point's slots all busy: the cap; every request when
    an uncapped point sends them at once; 1 for uncapped Poisson or trace arrivals
    (``scheduled``: its steady state starts with the first send)."""
    if concurrency is not None:
        return min(concurrency, n)
    return 1 if scheduled or not math.isinf(request_rate) else n


class SteadyGate:
    """Decides, request by request, whether a point has sent enough: at least
    ``min_requests``, and (with ``min_steady_s``) all ``target`` slots busy for that long.
    Fed the in-flight count as requests start and end; ``clock`` is injectable for tests."""

    def __init__(
        self,
        n: int,
        concurrency: int | None,
        request_rate: float,
        min_requests: int | None,
        min_steady_s: float | None,
        clock: Callable[[], float] = time.perf_counter,
        scheduled: bool = False,
    ) -> None:
        self.min_requests = n if min_requests is None else min(n, min_requests)
        self.min_steady_s = min_steady_s
        self.target = slots_to_fill(concurrency, request_rate, n, scheduled)
        self.clock = clock
        self.in_flight = 0
        self.full_since: float | None = None
        self.closed = False

    def may_send(self, i: int) -> bool:
        """False once the point has sent enough; from then on every later request too."""
        if not self.closed and i >= self.min_requests:
            steady_s = None if self.full_since is None else self.clock() - self.full_since
            if self.min_steady_s is None or (
                steady_s is not None and steady_s >= self.min_steady_s
            ):
                self.closed = True
        return not self.closed

    def started(self) -> None:
        self.in_flight += 1
        if self.full_since is None and self.in_flight >= self.target:
            self.full_since = self.clock()

    def ended(self) -> None:
        self.in_flight -= 1
