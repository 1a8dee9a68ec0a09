"""The load generator: streamed chat completions over httpx, timed per chunk.

One asyncio event loop drives every request of a point. The only work on the
timing path is reading an SSE line, ``json.loads`` and ``perf_counter``; re-tokenizing
happens after the point. The loop's own lag is sampled so a saturated client is
reported instead of being mistaken for a slow server.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from core.prompts import Prompt
from core.records import RequestRecord
from core.sse_client import ProtocolError, SSEConnectionPool

__all__ = ["ClientHealth", "LoadGenerator", "LoadOptions", "run_load"]

# Above this event-loop lag the client, not the server, may be what was measured.
LOOP_LAG_WARN_MS = 5.0
# At or above this share of one core the one-threaded client is the bottleneck even when
# its loop lag stays low: with few streams each callback is short, so a loop that is busy
# all the time still wakes timers on time (docs/BENCHMARKS.md, load-generator headroom).
CPU_SHARE_WARN = 0.9


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


@dataclass
class ClientHealth:
    """How busy the load generator itself was during the point."""

    loop_lag_ms_max: float = 0.0
    loop_lag_ms_p99: float = 0.0
    cpu_s: float = 0.0
    wall_s: float = 0.0
    lag_samples_ms: list[float] = field(default_factory=list)

    @property
    def saturated(self) -> bool:
        return bool(self.saturated_why)

    @property
    def saturated_why(self) -> str:
        """Why the client may have limited the numbers, in words; "" when it did not."""
        why = []
        if self.loop_lag_ms_p99 > LOOP_LAG_WARN_MS:
            why.append(f"event-loop lag p99 {self.loop_lag_ms_p99:.1f} ms > "
                       f"{LOOP_LAG_WARN_MS:g} ms")
        if self.wall_s > 0 and self.cpu_s / self.wall_s >= CPU_SHARE_WARN:
            why.append(f"client CPU {self.cpu_s / self.wall_s:.0%} of a core >= "
                       f"{CPU_SHARE_WARN:.0%}")
        return "; ".join(why)

    def as_dict(self) -> dict[str, Any]:
        return {
            "loop_lag_ms_max": self.loop_lag_ms_max,
            "loop_lag_ms_p99": self.loop_lag_ms_p99,
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
    return value if isinstance(value, int) and not isinstance(value, bool) \
        and 0 <= value < 2**53 \
        else None


def _sse_event(rec: RequestRecord, data: bytes, now: float, parts: list[str]) -> bool:
    """One SSE ``data:`` payload of a stream; True when the request is over ([DONE], or
    an error recorded in ``rec.error``)."""
    if data == b"[DONE]":
        rec.end_s = now
        return True
    try:
        msg = json.loads(data)
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


async def _one_request_raw(pool: SSEConnectionPool, opts: LoadOptions, rec: RequestRecord,
                           prompt: Prompt, t0: float) -> None:
    """_one_request on core.sse_client: the same record, a fraction of the client CPU."""
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


async def _one_request(client: httpx.AsyncClient, opts: LoadOptions, rec: RequestRecord,
                       prompt: Prompt, t0: float) -> None:
    body = _payload(opts, prompt)
    rec.dispatch_s = rec.send_s = time.perf_counter() - t0

    async def trace(event: str, _info: dict[str, Any]) -> None:
        # The clock starts when the request goes on the wire, not when httpx starts
        # building it: with many requests at once httpx's own queueing (tens of ms at
        # 32 streams on 2 cores) would otherwise be counted as server time.
        if event.endswith(".send_request_headers.started"):
            rec.send_s = time.perf_counter() - t0

    try:
        async with client.stream("POST", opts.api_path, json=body,
                                 extensions={"trace": trace}) as resp:
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
                    if line.startswith(b"data:") and _sse_event(rec, line[5:].strip(), now,
                                                                 parts):
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


async def send_on_schedule(n: int, request_rate: float, seed: int,
                           start: Callable[[int], object], clock: Clock = Clock()) -> None:
    """Call ``start(i)`` for i = 0 .. n-1 in order: all at once when ``request_rate`` is
    infinite, else at the arrivals of a Poisson process (``seed``) counted from the first."""
    rng = random.Random(seed)
    t0 = clock.now()
    due = 0.0  # the i-th arrival's time on the point's clock
    for i in range(n):
        start(i)
        if not math.isinf(request_rate) and i < n - 1:
            # Sleep until an absolute arrival time, not for a relative gap: a busy
            # loop wakes each sleep late, and relative gaps would add those delays up
            # (711 req/s asked for, 230 req/s sent on 2 cores; docs/BENCHMARKS.md).
            due += rng.expovariate(request_rate)
            await clock.sleep(max(0.0, due - (clock.now() - t0)))


async def _lag_monitor(health: ClientHealth, stop: asyncio.Event,
                       should_stop: Callable[[], bool] | None,
                       work: asyncio.Task[None]) -> None:
    interval_s = 0.01
    ticks = 0
    while not stop.is_set():
        before = time.perf_counter()
        await asyncio.sleep(interval_s)
        health.lag_samples_ms.append(max(0.0, (time.perf_counter() - before - interval_s) * 1e3))
        ticks += 1
        if should_stop is not None and ticks % 5 == 0 and should_stop():
            work.cancel()
            return


async def _run(client: httpx.AsyncClient | SSEConnectionPool, opts: LoadOptions,
               prompts: list[Prompt],
               on_done: Callable[[int, int], None] | None) -> tuple[list[RequestRecord],
                                                                   ClientHealth]:
    n = len(prompts)
    records = [RequestRecord(index=i, send_s=0.0, prompt_tokens=p.prompt_tokens,
                             output_tokens_requested=p.output_len)
               for i, p in enumerate(prompts)]
    sem = asyncio.Semaphore(opts.concurrency or n)
    health = ClientHealth()
    stop = asyncio.Event()
    finished = 0
    t0 = time.perf_counter()
    cpu0 = time.process_time()

    async def guarded(i: int) -> None:
        nonlocal finished
        async with sem:
            try:
                one = (_one_request_raw(client, opts, records[i], prompts[i], t0)
                       if isinstance(client, SSEConnectionPool)
                       else _one_request(client, opts, records[i], prompts[i], t0))
                await asyncio.wait_for(one,
                                       timeout=opts.request_timeout_s)
            except TimeoutError:
                records[i].error = f"timeout after {opts.request_timeout_s:g} s"
                records[i].ok = False
        finished += 1
        if on_done:
            on_done(finished, n)

    async def dispatch() -> None:
        tasks: list[asyncio.Task[None]] = []
        await send_on_schedule(n, opts.request_rate, opts.seed,
                               lambda i: tasks.append(asyncio.create_task(guarded(i))))
        await asyncio.gather(*tasks)

    work = asyncio.create_task(asyncio.wait_for(dispatch(), timeout=opts.point_timeout_s))
    monitor = asyncio.create_task(_lag_monitor(health, stop, opts.should_stop, work))
    try:
        await work
    except (TimeoutError, asyncio.CancelledError) as exc:
        why = ("cancelled" if isinstance(exc, asyncio.CancelledError)
               else f"point timeout after {opts.point_timeout_s:g} s")
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
    if health.lag_samples_ms:
        lags = sorted(health.lag_samples_ms)
        health.loop_lag_ms_max = lags[-1]
        health.loop_lag_ms_p99 = lags[min(len(lags) - 1, int(0.99 * len(lags)))]
    health.lag_samples_ms = []
    return records, health


class LoadGenerator:
    """One event loop and one connection pool for every load phase on a server, so
    warm-up leaves warm keep-alive connections behind for the measured points."""

    def __init__(self, base_url: str, max_connections: int, request_timeout_s: float,
                 headers: dict[str, str] | None = None, http: str = "auto") -> None:
        """``http``: "auto" streams plain ``http://`` through core.sse_client (a fraction of
        httpx's CPU per chunk) and everything else through httpx; "httpx" forces httpx."""
        self._runner = asyncio.Runner()
        timeout = httpx.Timeout(request_timeout_s, connect=min(30.0, request_timeout_s))
        limits = httpx.Limits(max_connections=max_connections,
                              max_keepalive_connections=max_connections)
        self._client = httpx.AsyncClient(base_url=base_url, timeout=timeout, limits=limits,
                                         headers=headers)
        self._pool = (SSEConnectionPool(base_url, headers)
                      if http == "auto" and base_url.startswith("http://") else None)

    def run(self, opts: LoadOptions, prompts: list[Prompt],
            on_done: Callable[[int, int], None] | None = None
            ) -> tuple[list[RequestRecord], ClientHealth]:
        """Send every prompt under the point's concurrency cap and arrival process."""
        return self._runner.run(_run(self._pool or self._client, opts, prompts, on_done))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
        self._runner.run(self._client.aclose())
        self._runner.close()

    def __enter__(self) -> LoadGenerator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_load(opts: LoadOptions, prompts: list[Prompt],
             on_done: Callable[[int, int], None] | None = None
             ) -> tuple[list[RequestRecord], ClientHealth]:
    """One point on a fresh connection pool (a convenience for single measurements)."""
    limit = opts.concurrency or len(prompts)
    with LoadGenerator(opts.base_url, limit, opts.request_timeout_s) as gen:
        return gen.run(opts, prompts, on_done)
