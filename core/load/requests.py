"""One request of a point: its chat request sent, its stream read into a RequestRecord
(core/load/openai.py), over httpx or the raw SSE pool (core/load/sse_client.py).

``Connections`` is one process's way to the server (the load generator's own, and each shard
worker's): built from ``ClientOptions``, which also carries the event-loop and JSON-parser
choices (core/settings.py reads them from the environment; nothing here does).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from core.load.openai import (
    CHAT_PATH,
    Loads,
    chat_request,
    finish_stream,
    json_loads,
    read_chat_event,
    sse_payloads,
)
from core.load.prompts import Prompt
from core.load.sse_client import ProtocolError, SSEConnectionPool
from core.records import RequestRecord

__all__ = [
    "ClientOptions",
    "Connections",
    "LoadOptions",
    "event_loop_factory",
    "event_loop_name",
    "one_request",
    "one_request_raw",
    "payload",
]


@dataclass(frozen=True)
class LoadOptions:
    """One point: what to send, how hard, and when to stop."""

    base_url: str
    model: str
    concurrency: int | None
    request_rate: float
    seed: int
    exact_length_body: dict[str, Any]  # merged into each request; {} = let the model stop
    request_timeout_s: float
    point_timeout_s: float
    api_path: str = CHAT_PATH
    should_stop: Callable[[], bool] | None = None  # polled every 50 ms; True cancels the point
    # Steady-state sizing (BenchmarkPlan.point_requests): send at least ``min_requests`` of
    # the prompts (None: all), then stop sending once every slot has been busy for
    # ``min_steady_s``; the prompts not sent are not part of the point.
    min_requests: int | None = None
    min_steady_s: float | None = None
    workers: int = 1  # processes sending the point (core/load/shards.py); 1 = this event loop
    # A trace's own arrival times (s on the point's clock, one per prompt): they replace the
    # Poisson process of ``request_rate``; the cap still applies when the point sets one.
    arrivals_s: tuple[float, ...] | None = None
    # multi_turn: each session's prompt indices, turn by turn; turns of a session go one
    # after another (each carries the answers so far), sessions run ``concurrency`` at once.
    sessions: tuple[tuple[int, ...], ...] | None = None
    think_time_s: float = 0.0  # multi_turn: from an answer's end to the next turn's send


@dataclass(frozen=True)
class ClientOptions:
    """How one load-generator process connects to the server; the same for the parent and
    every shard worker (pickled to them, never on argv: the headers may hold an API key)."""

    base_url: str
    max_connections: int
    request_timeout_s: float
    headers: dict[str, str] | None = None
    # "auto" streams plain http:// through core.load.sse_client (a fraction of httpx's CPU
    # per chunk) and everything else through httpx; "httpx" forces httpx.
    http: str = "auto"
    event_loop: str = "auto"  # Settings.event_loop: "auto" (uvloop where installed), "asyncio"
    json_parser: str = "auto"  # Settings.json_parser: "auto" (orjson where installed), "json"


def event_loop_factory(choice: str = "auto") -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop where it is installed (a network read costs less: docs/
    BENCHMARKS.md part 2), else asyncio's (None); ``choice`` "asyncio" forces asyncio's
    (to measure one against the other)."""
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def event_loop_name(choice: str = "auto") -> str:
    """The event loop ``choice`` gives on this host: "uvloop" or "asyncio"."""
    return "asyncio" if event_loop_factory(choice) is None else "uvloop"


def payload(opts: LoadOptions, prompt: Prompt) -> dict[str, Any]:
    """The request body of one prompt of a point."""
    return chat_request(
        opts.model,
        prompt.text,
        prompt.output_len,
        usage=True,
        extra=opts.exact_length_body,
        history=prompt.history,
    )


async def one_request_raw(
    pool: SSEConnectionPool,
    opts: LoadOptions,
    rec: RequestRecord,
    prompt: Prompt,
    t0: float,
    loads: Loads,
) -> None:
    """``one_request`` on core.load.sse_client: the same record, a fraction of the client CPU."""
    rec.dispatch_s = rec.send_s = time.perf_counter() - t0
    request = pool.request_bytes(opts.api_path, payload(opts, prompt))
    parts: list[str] = []

    def on_send() -> None:
        rec.send_s = time.perf_counter() - t0  # the bytes go to the socket right after

    def on_data(data: bytes, t: float) -> bool:
        return read_chat_event(rec, data, t - t0, parts, loads)

    try:
        result = await pool.post_stream(request, on_data, on_send)
        rec.status_code = result.status
        if result.status != 200:
            text = bytes(result.body).decode(errors="replace")
            rec.error = f"HTTP {result.status}: {text[:300]}"
        elif rec.error is None:
            finish_stream(rec, parts)
    except ProtocolError as exc:
        rec.error = f"stream cut by the server (truncated): {exc}"[:300]
    except OSError as exc:
        rec.error = f"{type(exc).__name__}: {exc}"[:300]
    finally:
        if rec.end_s is None:
            rec.end_s = time.perf_counter() - t0


async def one_request(
    client: httpx.AsyncClient,
    opts: LoadOptions,
    rec: RequestRecord,
    prompt: Prompt,
    t0: float,
    loads: Loads,
) -> None:
    """One streamed request over httpx into ``rec``, stamped on the point's clock ``t0``."""
    body = payload(opts, prompt)
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
            # Raw bytes, split by hand: one timestamp per network read (every event in
            # it arrived together) and less work per chunk than aiter_lines().
            async for raw in resp.aiter_raw():
                now = time.perf_counter() - t0
                events, buf = sse_payloads(buf + raw)
                if any(read_chat_event(rec, data, now, parts, loads) for data in events):
                    break
            if rec.error is None:
                finish_stream(rec, parts)
    except httpx.TimeoutException as exc:
        rec.error = f"timeout after {opts.request_timeout_s:g} s ({type(exc).__name__})"
    except httpx.RemoteProtocolError as exc:
        rec.error = f"stream cut by the server (truncated): {exc}"[:300]
    except httpx.HTTPError as exc:
        rec.error = f"{type(exc).__name__}: {exc}"[:300]
    finally:
        if rec.end_s is None:
            rec.end_s = time.perf_counter() - t0


class Connections:
    """One process's connections to the server: httpx's pool, and the raw SSE pool where
    ``http`` is "auto" and the URL plain ``http://``; the JSON parser its streams use."""

    def __init__(self, client: ClientOptions) -> None:
        self.loads, self.json_parser = json_loads(client.json_parser)
        timeout = httpx.Timeout(
            client.request_timeout_s, connect=min(30.0, client.request_timeout_s)
        )
        limits = httpx.Limits(
            max_connections=client.max_connections,
            max_keepalive_connections=client.max_connections,
        )
        self.httpx = httpx.AsyncClient(
            base_url=client.base_url, timeout=timeout, limits=limits, headers=client.headers
        )
        self.raw = (
            SSEConnectionPool(client.base_url, client.headers)
            if client.http == "auto" and client.base_url.startswith("http://")
            else None
        )

    async def send(self, opts: LoadOptions, rec: RequestRecord, prompt: Prompt, t0: float) -> None:
        """One request of a point into ``rec``, cut at ``opts.request_timeout_s``."""
        one = (
            one_request_raw(self.raw, opts, rec, prompt, t0, self.loads)
            if self.raw is not None
            else one_request(self.httpx, opts, rec, prompt, t0, self.loads)
        )
        try:
            await asyncio.wait_for(one, timeout=opts.request_timeout_s)
        except TimeoutError:
            rec.error = f"timeout after {opts.request_timeout_s:g} s"
            rec.ok = False

    async def aclose(self) -> None:
        if self.raw is not None:
            self.raw.close()
        await self.httpx.aclose()
