"""The load generator: streamed chat completions over httpx, timed per chunk.

One asyncio event loop drives every request of a point. The only work on the
timing path is reading an SSE line, ``json.loads`` and ``perf_counter``; re-tokenizing
happens after the point. The loop's own lag is sampled so a saturated client is
reported instead of being mistaken for a slow server.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import random
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx

from core.load.prompts import Prompt
from core.load.sse_client import ProtocolError, SSEConnectionPool
from core.metrics import CLIENT_CPU_BOUND_SHARE
from core.records import CANCELLED, RequestRecord

if TYPE_CHECKING:
    from core.load.shards import ShardPool

__all__ = [
    "ClientHealth",
    "Clock",
    "LoadGenerator",
    "LoadOptions",
    "SteadyGate",
    "arrival_times",
    "fine_gil_switching",
    "run_load",
    "send_on_schedule",
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


@dataclass(frozen=True)
class LoadOptions:
    base_url: str
    model: str
    concurrency: int | None
    request_rate: float
    seed: int
    exact_length_body: dict[str, Any]  # merged into each request; {} = let the model stop
    request_timeout_s: float
    point_timeout_s: float
    api_path: str = "/v1/chat/completions"
    should_stop: Callable[[], bool] | None = None  # polled every 50 ms; True cancels the point
    # Steady-state sizing (BenchmarkPlan.point_requests): send at least ``min_requests`` of
    # the prompts (None: all), then stop sending once every slot has been busy for
    # ``min_steady_s``; the prompts not sent are not part of the point.
    min_requests: int | None = None
    min_steady_s: float | None = None
    workers: int = 1  # processes sending the point (core/load/shards.py); 1 = this event loop


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
            "client_cpu_s": self.cpu_s,
            "client_cpu_share": self.cpu_s / self.wall_s if self.wall_s else None,
            "client_saturated": self.saturated,
            "client_saturated_why": self.saturated_why,
        }


def _payload(opts: LoadOptions, prompt: Prompt) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": opts.model,
        "messages": [{"role": "user", "content": prompt.text}],
        "max_tokens": prompt.output_len,
        "temperature": 0.0,
        "stream": True,
        # Ask for the server's own token counts; bench_serving's oai-chat backend
        # falls back to the requested length without them.
        "stream_options": {"include_usage": True},
    }
    body.update(opts.exact_length_body)
    return body


def _count(value: Any) -> int | None:
    """A token count from the server, or None when it is not a non-negative integer."""
    return (
        value
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**53
        else None
    )


def event_loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop where it is installed (a network read costs less: docs/
    BENCHMARKS.md part 2), else asyncio's; ``SERVELAB_EVENT_LOOP=asyncio`` forces asyncio's
    (to measure one against the other)."""
    if os.environ.get("SERVELAB_EVENT_LOOP", "auto") == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


_scan = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def _json_loads_std(data: bytes) -> Any:
    """``json.loads`` for one chunk payload at 60 % of its cost: the C scanner straight on the
    text, without json.loads's encoding sniffing and wrapper calls (a chunk's JSON is most
    of the client's CPU per chunk). Anything unusual takes the full ``json.loads``."""
    text = data.decode()
    try:
        msg, end = _scan(text, 0)
    except (StopIteration, ValueError):
        return json.loads(text)  # raises with the usual message
    return msg if end == len(text) else json.loads(text)


_json_loads: Callable[[bytes], Any] = _json_loads_std
JSON_PARSER = "json"
if os.environ.get("SERVELAB_JSON", "auto") != "json":  # "json" forces the stdlib (to compare)
    with contextlib.suppress(ImportError):  # optional: a third of the stdlib's cost per chunk
        import orjson  # (docs/BENCHMARKS.md part 2)

        _json_loads, JSON_PARSER = orjson.loads, "orjson"


def _sse_event(rec: RequestRecord, data: bytes, now: float, parts: list[str]) -> bool:
    """One SSE ``data:`` payload of a stream; True when the request is over ([DONE], or
    an error recorded in ``rec.error``)."""
    if data == b"[DONE]":
        rec.end_s = now
        return True
    try:
        msg = _json_loads(data)
    except (ValueError, RecursionError):  # RecursionError: a deeply nested JSON bomb
        rec.error = f"unparseable SSE data: {data[:200]!r}"
        return True
    try:
        if "error" in msg:
            rec.error = f"server error in stream: {json.dumps(msg['error'])[:300]}"
            return True
        usage = msg.get("usage")
        if usage:
            rec.prompt_tokens_server = _count(usage.get("prompt_tokens"))
            rec.output_tokens_server = _count(usage.get("completion_tokens"))
        for choice in msg.get("choices") or ():
            delta = choice.get("delta") or {}
            text = (delta.get("content") or "") + (delta.get("reasoning_content") or "")
            if text:
                rec.chunk_s.append(now)
                parts.append(text)
            if choice.get("finish_reason"):
                rec.finish_reason = str(choice["finish_reason"])
    except (AttributeError, TypeError, KeyError, IndexError):
        # Valid JSON but not an OpenAI stream event (a list, a number, content that is
        # not text...): a failed request, not a crash.
        rec.error = f"malformed SSE event: {data[:200]!r}"
        return True
    return False


def _complete(rec: RequestRecord, parts: list[str]) -> None:
    """A stream that ended without an error: complete, truncated or empty."""
    rec.generated_text = "".join(parts)
    # transformers serve ends its streams without [DONE]; a stream that ended after a
    # finish_reason is complete, one that ended without either was cut.
    if rec.end_s is None and rec.finish_reason is None:
        rec.error = "stream ended before [DONE] or a finish_reason (truncated)"
        return
    if not rec.chunk_s:
        rec.error = "no content in the stream"
        return
    rec.ok = True


async def _one_request_raw(
    pool: SSEConnectionPool, opts: LoadOptions, rec: RequestRecord, prompt: Prompt, t0: float
) -> None:
    """_one_request on core.load.sse_client: the same record, a fraction of the client CPU."""
    rec.dispatch_s = rec.send_s = time.perf_counter() - t0
    request = pool.request_bytes(opts.api_path, _payload(opts, prompt))
    parts: list[str] = []

    def on_send() -> None:
        rec.send_s = time.perf_counter() - t0  # the bytes go to the socket right after

    def on_data(data: bytes, t: float) -> bool:
        return _sse_event(rec, data, t - t0, parts)

    try:
        result = await pool.post_stream(request, on_data, on_send)
        rec.status_code = result.status
        if result.status != 200:
            text = bytes(result.body).decode(errors="replace")
            rec.error = f"HTTP {result.status}: {text[:300]}"
        elif rec.error is None:
            _complete(rec, parts)
    except ProtocolError as exc:
        rec.error = f"stream cut by the server (truncated): {exc}"[:300]
    except OSError as exc:
        rec.error = f"{type(exc).__name__}: {exc}"[:300]
    finally:
        if rec.end_s is None:
            rec.end_s = time.perf_counter() - t0


async def _one_request(
    client: httpx.AsyncClient, opts: LoadOptions, rec: RequestRecord, prompt: Prompt, t0: float
) -> None:
    body = _payload(opts, prompt)
    rec.dispatch_s = rec.send_s = time.perf_counter() - t0

    async def trace(event: str, _info: dict[str, Any]) -> None:
        # The clock starts when the request goes on the wire, not when httpx starts
        # building it: with many requests at once httpx's own queueing (tens of ms at
        # 32 streams on 2 cores) would otherwise be counted as server time.
        if event.endswith(".send_request_headers.started"):
            rec.send_s = time.perf_counter() - t0

    try:
        async with client.stream(
            "POST", opts.api_path, json=body, extensions={"trace": trace}
        ) as resp:
            rec.status_code = resp.status_code
            if resp.status_code != 200:
                text = (await resp.aread()).decode(errors="replace")
                rec.error = f"HTTP {resp.status_code}: {text[:300]}"
                return
            parts: list[str] = []
            buf = b""
            stop = False
            # Raw bytes, split by hand: one timestamp per network read (every event in
            # it arrived together) and less work per chunk than aiter_lines().
            async for raw in resp.aiter_raw():
                now = time.perf_counter() - t0
                buf += raw
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    if line.startswith(b"data:") and _sse_event(rec, line[5:].strip(), now, parts):
                        stop = True
                        break
                if stop:
                    break
            if rec.error is None:
                _complete(rec, parts)
    except httpx.TimeoutException as exc:
        rec.error = f"timeout after {opts.request_timeout_s:g} s ({type(exc).__name__})"
    except httpx.RemoteProtocolError as exc:
        rec.error = f"stream cut by the server (truncated): {exc}"[:300]
    except httpx.HTTPError as exc:
        rec.error = f"{type(exc).__name__}: {exc}"[:300]
    finally:
        if rec.end_s is None:
            rec.end_s = time.perf_counter() - t0


@dataclass(frozen=True)
class Clock:
    """Where the arrival schedule reads the time and waits: the real ones, or a virtual clock
    in tests (so that a late-waking event loop can be simulated exactly)."""

    now: Callable[[], float] = time.perf_counter
    sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep


SCHEDULE_SLACK_S = 1e-6  # an arrival this close to due is on time (floats; timer resolution)


async def sleep_until(due_s: float, t0: float, clock: Clock) -> None:
    """Wait until ``due_s`` after ``t0`` on ``clock`` (to the microsecond): uvloop's timers
    have a resolution of 1 ms and may wake that much early, so an early wake sleeps again."""
    while (wait_s := due_s - (clock.now() - t0)) > SCHEDULE_SLACK_S:
        await clock.sleep(wait_s)


def arrival_times(n: int, request_rate: float, seed: int) -> list[float]:
    """The i-th request's arrival on the point's clock (s after the first): all 0 when
    ``request_rate`` is infinite, else a Poisson process drawn from ``seed``. Computed once
    per point, so any split of it (core/load/shards.py) keeps exactly these times."""
    if math.isinf(request_rate):
        return [0.0] * n
    rng = random.Random(seed)
    times = [0.0] * n
    for i in range(1, n):
        times[i] = times[i - 1] + rng.expovariate(request_rate)
    return times


async def send_on_schedule(
    n: int, request_rate: float, seed: int, start: Callable[[int], object], clock: Clock = Clock()
) -> None:
    """Call ``start(i)`` for i = 0 .. n-1 in order: all at once when ``request_rate`` is
    infinite, else at the arrivals of a Poisson process (``seed``) counted from the first.
    ``start`` returning False ends the schedule (the point has sent enough)."""
    due = arrival_times(n, request_rate, seed)
    t0 = clock.now()
    for i in range(n):
        if start(i) is False:
            return
        if i < n - 1 and due[i + 1] > 0.0:
            # Sleep until an absolute arrival time, not for a relative gap: a busy
            # loop wakes each sleep late, and relative gaps would add those delays up
            # (711 req/s asked for, 230 req/s sent on 2 cores; docs/BENCHMARKS.md).
            await sleep_until(due[i + 1], t0, clock)


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
    ) -> None:
        self.min_requests = n if min_requests is None else min(n, min_requests)
        self.min_steady_s = min_steady_s
        # Slots to fill: the cap; every request when an uncapped point sends them at once;
        # none for uncapped Poisson arrivals (its steady state starts with the first send).
        self.target = (
            min(concurrency, n) if concurrency is not None else n if math.isinf(request_rate) else 1
        )
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


async def _run(
    client: httpx.AsyncClient | SSEConnectionPool,
    opts: LoadOptions,
    prompts: list[Prompt],
    on_done: Callable[[int, int], None] | None,
) -> tuple[list[RequestRecord], ClientHealth]:
    n = len(prompts)
    records = [
        RequestRecord(
            index=i, send_s=0.0, prompt_tokens=p.prompt_tokens, output_tokens_requested=p.output_len
        )
        for i, p in enumerate(prompts)
    ]
    sem = asyncio.Semaphore(opts.concurrency or n)
    gate = SteadyGate(n, opts.concurrency, opts.request_rate, opts.min_requests, opts.min_steady_s)
    refused = [False] * n  # not sent: the point had already sent enough
    health = ClientHealth()
    finished = 0
    t0 = time.perf_counter()
    cpu0 = time.process_time()

    async def guarded(i: int) -> None:
        nonlocal finished
        async with sem:
            if not gate.may_send(i):
                refused[i] = True
                return
            gate.started()
            try:
                one = (
                    _one_request_raw(client, opts, records[i], prompts[i], t0)
                    if isinstance(client, SSEConnectionPool)
                    else _one_request(client, opts, records[i], prompts[i], t0)
                )
                await asyncio.wait_for(one, timeout=opts.request_timeout_s)
            except TimeoutError:
                records[i].error = f"timeout after {opts.request_timeout_s:g} s"
                records[i].ok = False
            finally:
                gate.ended()
        finished += 1
        if on_done:
            on_done(finished, n)

    def start(i: int) -> bool:
        if gate.closed:
            refused[i:] = [True] * (n - i)
            return False  # sent enough: no more arrivals to wait for
        tasks.append(asyncio.create_task(guarded(i)))
        return True

    tasks: list[asyncio.Task[None]] = []

    async def dispatch() -> None:
        await send_on_schedule(n, opts.request_rate, opts.seed, start)
        await asyncio.gather(*tasks)

    await run_monitored(
        dispatch(), records, health, opts.should_stop, opts.point_timeout_s, t0, cpu0
    )
    # A point sized by time leaves its unsent prompts out; what was sent is a prefix of
    # them (the semaphore is FIFO and the gate never reopens).
    return [r for r, no in zip(records, refused, strict=True) if not no], health


# A point sized by time gets its prompts beforehand (making one costs 0.4 ms at 64 tokens,
# 8.5 ms at 1,024: too slow to make while streaming), as many as the fastest speed seen so far
# on this server would need, times this margin: the warm-up runs at the largest concurrency,
# and a lower one is faster per token.
BUDGET_MARGIN = 4.0


def _fast_speed(seen: list[RequestRecord]) -> tuple[float, float] | None:
    """(TTFT, seconds per chunk) at the fast end (10th percentile) of the requests seen."""
    ttfts = sorted(r.chunk_s[0] - r.send_s for r in seen if r.ok and r.chunk_s)
    per_token = sorted(
        (r.chunk_s[-1] - r.chunk_s[0]) / (len(r.chunk_s) - 1)
        for r in seen
        if r.ok and len(r.chunk_s) > 1
    )
    if not ttfts or not per_token:
        return None
    return ttfts[len(ttfts) // 10], per_token[len(per_token) // 10]


def point_budget(
    low: int,
    high: int,
    concurrency: int | None,
    request_rate: float,
    output_len: int,
    min_steady_s: float | None,
    seen: list[RequestRecord],
) -> int:
    """How many prompts to prepare for a point that sends between ``low`` and ``high``
    requests: ``low`` when its size is fixed, else enough to keep every slot busy for
    ``min_steady_s`` at the fastest speed in ``seen`` (``high`` when nothing was seen)."""
    if min_steady_s is None or high <= low:
        return low
    speed = _fast_speed(seen)
    if speed is None:
        return high
    ttft_s, per_token_s = speed
    latency_s = max(1e-4, ttft_s + (output_len - 1) * per_token_s)
    slots = concurrency if concurrency is not None else (low if math.isinf(request_rate) else None)
    rate = request_rate if slots is None else min(request_rate, slots / latency_s)
    need = (slots or 0) + rate * min_steady_s * BUDGET_MARGIN
    return max(low, min(high, math.ceil(need)))


class LoadGenerator:
    """One event loop and one connection pool for every load phase on a server, so
    warm-up leaves warm keep-alive connections behind for the measured points."""

    def __init__(
        self,
        base_url: str,
        max_connections: int,
        request_timeout_s: float,
        headers: dict[str, str] | None = None,
        http: str = "auto",
    ) -> None:
        """``http``: "auto" streams plain ``http://`` through core.load.sse_client (a fraction of
        httpx's CPU per chunk) and everything else through httpx; "httpx" forces httpx."""
        self._runner = asyncio.Runner(loop_factory=event_loop_factory())
        timeout = httpx.Timeout(request_timeout_s, connect=min(30.0, request_timeout_s))
        limits = httpx.Limits(
            max_connections=max_connections, max_keepalive_connections=max_connections
        )
        self._client = httpx.AsyncClient(
            base_url=base_url, timeout=timeout, limits=limits, headers=headers
        )
        self._pool = (
            SSEConnectionPool(base_url, headers)
            if http == "auto" and base_url.startswith("http://")
            else None
        )
        self.seen: list[RequestRecord] = []  # the latest completed requests: the speed seen
        self._shards: ShardPool | None = None  # worker processes, started when a point asks
        self._shard_args = (base_url, headers, http, max_connections, request_timeout_s)

    def workers_for(self, setting: int | str, concurrency: int | None, n: int) -> int:
        """The processes for a point: ``setting`` as given, or for "auto" enough for the
        chunk rate the fastest speed seen here would offer (core.load.shards.auto_workers)."""
        if setting != "auto":
            return int(setting)
        from core.load.shards import auto_workers

        speed = _fast_speed(self.seen)
        slots = concurrency or n
        rate = None if speed is None else slots / max(speed[1], 1e-6)
        return auto_workers(concurrency, n, rate)

    def budget(
        self,
        low: int,
        high: int,
        concurrency: int | None,
        request_rate: float,
        output_len: int,
        min_steady_s: float | None,
    ) -> int:
        """``point_budget`` from the requests this generator has seen complete."""
        return point_budget(
            low, high, concurrency, request_rate, output_len, min_steady_s, self.seen
        )

    def run(
        self,
        opts: LoadOptions,
        prompts: list[Prompt],
        on_done: Callable[[int, int], None] | None = None,
    ) -> tuple[list[RequestRecord], ClientHealth]:
        """Send the prompts under the point's concurrency cap and arrival process (all of
        them, or as many as ``opts.min_requests``/``min_steady_s`` need)."""
        if opts.workers > 1 and (opts.concurrency or len(prompts)) > 1:
            if self._shards is None or self._shards.size < opts.workers:
                from core.load.shards import ShardPool

                if self._shards is not None:
                    self._shards.close()
                self._shards = ShardPool(opts.workers, *self._shard_args)
            records, health = self._shards.run(opts, prompts, opts.workers, on_done)
        else:
            with fine_gil_switching():
                records, health = self._runner.run(
                    _run(self._pool or self._client, opts, prompts, on_done)
                )
        self.seen = [*self.seen, *(r for r in records if r.ok)][-2000:]
        return records, health

    def close(self) -> None:
        if self._shards is not None:
            self._shards.close()
        if self._pool is not None:
            self._pool.close()
        self._runner.run(self._client.aclose())
        self._runner.close()

    def __enter__(self) -> LoadGenerator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextlib.contextmanager
def fine_gil_switching(interval_s: float = MEASURE_SWITCH_INTERVAL_S) -> Iterator[None]:
    """The process's GIL switch interval at most ``interval_s`` inside, restored after."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(min(before, interval_s))
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def run_load(
    opts: LoadOptions, prompts: list[Prompt], on_done: Callable[[int, int], None] | None = None
) -> tuple[list[RequestRecord], ClientHealth]:
    """One point on a fresh connection pool (a convenience for single measurements)."""
    limit = opts.concurrency or len(prompts)
    with LoadGenerator(opts.base_url, limit, opts.request_timeout_s) as gen:
        return gen.run(opts, prompts, on_done)
