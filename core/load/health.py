"""How busy the load generator itself was during a point (client health): its event loop's
lag, sampled while the point runs, and its CPU share; a saturated client is reported instead
of being mistaken for a slow server (core.metrics.point_caveats says it to the reader)."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import Callable, Coroutine, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from core.metrics import CLIENT_CPU_BOUND_SHARE, SEND_LATE_WARN_MS
from core.records import CANCELLED, RequestRecord

__all__ = [
    "LAG_INTERVAL_S",
    "LOOP_LAG_WARN_MS",
    "MEASURE_SWITCH_INTERVAL_S",
    "MIN_LAG_COVER_S",
    "MIN_LAG_SAMPLES",
    "ClientHealth",
    "fine_gil_switching",
    "finish_health",
    "run_monitored",
]

# Above this event-loop lag the client, not the server, may be what was measured.
LOOP_LAG_WARN_MS = 5.0
# ...judged over at least this many lag samples (one per 10 ms: 1 s of point). A p99 of a few
# dozen samples is their maximum: one GC pause or status write flagged every short point of
# the H200 run while the client used 8-25% of a core (issue 14).
LAG_INTERVAL_S = 0.01  # the lag monitor's sleep
MIN_LAG_SAMPLES = 100
# ...or over samples that together cover this much of the point: a loop too busy to wake its
# 10 ms timer takes few samples, each one long (flooded: 9 samples of ~1 s in a 9 s point).
MIN_LAG_COVER_S = 1.0
# The client is flagged CPU-bound at core.metrics.CLIENT_CPU_BOUND_SHARE of one core even when
# its loop lag stays low: with few streams each callback is short, so a loop that is busy
# all the time still wakes timers on time (docs/BENCHMARKS.md, load-generator headroom).
# The GIL switch interval while the loop measures. Another thread of the run process (the
# Sampler scraping and polling NVML, the pipeline) holding the GIL delays the loop by up to
# the interval: at CPython's default 5 ms a token's timestamp came late by up to 5 ms and
# the H200 points showed loop-lag p99 of 5.0-5.4 ms at 4-20% of a core (docs/BENCHMARKS.md
# §2). 0.5 ms bounds that wait at a cost of more frequent switches, which only matter
# while two threads compete.
MEASURE_SWITCH_INTERVAL_S = 0.0005


@dataclass
class ClientHealth:
    """How busy the load generator itself was during the point."""

    loop_lag_ms_max: float = 0.0
    loop_lag_ms_p99: float = 0.0
    cpu_s: float = 0.0
    wall_s: float = 0.0
    lag_samples_ms: list[float] = field(default_factory=list)
    lag_samples: int = 0  # how many lag samples the p99 is over
    lag_covered_s: float = 0.0  # the time those samples span (their sleeps plus their lags)
    workers: list[ClientHealth] = field(default_factory=list)  # per process (core/load/shards.py)
    # Per scheduled send, ms from when it was due (and a slot free) to its hand-off.
    send_late_samples_ms: list[float] = field(default_factory=list)
    send_late_ms_p99: float | None = None  # None: the point had no arrival times to keep
    send_late_ms_max: float | None = None
    scheduled_sends: int = 0

    def sent_late(self, due_s: float, handed_s: float) -> None:
        """One scheduled send: due at ``due_s`` (or when its slot freed, if later), handed
        to the HTTP client at ``handed_s``, both on the point's clock."""
        self.send_late_samples_ms.append(max(0.0, (handed_s - due_s) * 1e3))

    @classmethod
    def merged(cls, workers: list[ClientHealth]) -> ClientHealth:
        """The client of a sharded point: worst lag, CPU seconds summed (so the share is in
        cores), and each worker kept: one saturated worker flags the point."""
        return cls(
            loop_lag_ms_max=max(w.loop_lag_ms_max for w in workers),
            loop_lag_ms_p99=max(w.loop_lag_ms_p99 for w in workers),
            cpu_s=sum(w.cpu_s for w in workers),
            wall_s=max(w.wall_s for w in workers),
            lag_samples=sum(w.lag_samples for w in workers),
            lag_covered_s=max(w.lag_covered_s for w in workers),
            workers=list(workers),
            send_late_ms_p99=_max_known(w.send_late_ms_p99 for w in workers),
            send_late_ms_max=_max_known(w.send_late_ms_max for w in workers),
            scheduled_sends=sum(w.scheduled_sends for w in workers),
        )

    @property
    def saturated(self) -> bool:
        return bool(self.saturated_why)

    @property
    def saturated_why(self) -> str:
        """Why the client may have limited the numbers, in words; "" when it did not."""
        if self.workers:
            return "; ".join(
                f"worker {k}: {w.saturated_why}" for k, w in enumerate(self.workers) if w.saturated
            )
        why = []
        enough = self.lag_samples >= MIN_LAG_SAMPLES or self.lag_covered_s >= MIN_LAG_COVER_S
        if self.loop_lag_ms_p99 > LOOP_LAG_WARN_MS and enough:
            why.append(
                f"event-loop lag p99 {self.loop_lag_ms_p99:.1f} ms > {LOOP_LAG_WARN_MS:g} ms"
            )
        if self.wall_s > 0 and self.cpu_s / self.wall_s >= CLIENT_CPU_BOUND_SHARE:
            why.append(
                f"client CPU {self.cpu_s / self.wall_s:.0%} of a core >= "
                f"{CLIENT_CPU_BOUND_SHARE:.0%}"
            )
        return "; ".join(why)

    @property
    def sent_late_why(self) -> str:
        """Why the requests went out later than their arrival times, in words; "" when they
        did not (or the point had no arrival times to keep)."""
        if self.send_late_ms_p99 is None or self.send_late_ms_p99 <= SEND_LATE_WARN_MS:
            return ""
        return (
            f"sent p99 {self.send_late_ms_p99:.1f} ms after their arrival times"
            f" > {SEND_LATE_WARN_MS:g} ms (max {self.send_late_ms_max or 0:.1f} ms,"
            f" {self.scheduled_sends} scheduled sends)"
        )

    def as_dict(self) -> dict[str, Any]:
        per_worker = (
            {"client_workers": len(self.workers), "workers": [w.as_dict() for w in self.workers]}
            if self.workers
            else {}
        )
        return {
            **per_worker,
            "loop_lag_ms_max": self.loop_lag_ms_max,
            "loop_lag_ms_p99": self.loop_lag_ms_p99,
            "loop_lag_samples": self.lag_samples,
            "send_late_ms_p99": self.send_late_ms_p99,
            "send_late_ms_max": self.send_late_ms_max,
            "scheduled_sends": self.scheduled_sends,
            "client_sent_late": bool(self.sent_late_why),
            "client_sent_late_why": self.sent_late_why,
            "client_cpu_s": self.cpu_s,
            "client_cpu_share": self.cpu_s / self.wall_s if self.wall_s else None,
            "client_saturated": self.saturated,
            "client_saturated_why": self.saturated_why,
        }


async def _lag_monitor(
    health: ClientHealth,
    stop: asyncio.Event,
    should_stop: Callable[[], bool] | None,
    work: asyncio.Task[None],
) -> None:
    interval_s = LAG_INTERVAL_S
    ticks = 0
    while not stop.is_set():
        before = time.perf_counter()
        await asyncio.sleep(interval_s)
        health.lag_samples_ms.append(max(0.0, (time.perf_counter() - before - interval_s) * 1e3))
        ticks += 1
        if should_stop is not None and ticks % 5 == 0 and should_stop():
            work.cancel()
            return


def finish_health(health: ClientHealth) -> None:
    """Reduce the lag samples of a point to their p99, maximum and count."""
    if health.lag_samples_ms:
        lags = sorted(health.lag_samples_ms)
        health.loop_lag_ms_max = lags[-1]
        health.loop_lag_ms_p99 = lags[min(len(lags) - 1, int(0.99 * len(lags)))]
        health.lag_samples = len(lags)
        health.lag_covered_s = len(lags) * LAG_INTERVAL_S + sum(lags) / 1e3
    health.lag_samples_ms = []
    if health.send_late_samples_ms:
        late = sorted(health.send_late_samples_ms)
        health.send_late_ms_max = late[-1]
        health.send_late_ms_p99 = late[min(len(late) - 1, int(0.99 * len(late)))]
        health.scheduled_sends = len(late)
    health.send_late_samples_ms = []


def _max_known(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


async def run_monitored(
    work: Coroutine[Any, Any, None],
    records: list[RequestRecord],
    health: ClientHealth,
    should_stop: Callable[[], bool] | None,
    timeout_s: float | None,
    t0: float,
    cpu0: float,
) -> None:
    """Run a point's sending under its timeout while the lag monitor samples the loop.

    The one place (single process and each shard worker) that marks what a cancel or the
    point timeout cut short, and closes the point's client health.
    """
    stop = asyncio.Event()
    task = asyncio.create_task(asyncio.wait_for(work, timeout=timeout_s))
    monitor = asyncio.create_task(_lag_monitor(health, stop, should_stop, task))
    try:
        await task
    except (TimeoutError, asyncio.CancelledError) as exc:
        why = (
            CANCELLED
            if isinstance(exc, asyncio.CancelledError)
            else f"point timeout after {timeout_s:g} s"
        )
        now = time.perf_counter() - t0
        for r in records:
            if not r.ok and r.error is None:
                r.error = why
                r.end_s = r.end_s or now
    finally:
        stop.set()
        await monitor
    health.wall_s = time.perf_counter() - t0
    health.cpu_s = time.process_time() - cpu0
    finish_health(health)


@contextlib.contextmanager
def fine_gil_switching(interval_s: float = MEASURE_SWITCH_INTERVAL_S) -> Iterator[None]:
    """The process's GIL switch interval at most ``interval_s`` inside, restored after."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(min(before, interval_s))
    try:
        yield
    finally:
        sys.setswitchinterval(before)
