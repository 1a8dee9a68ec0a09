"""The load generator: streamed chat completions, timed per chunk, one point at a time.

One asyncio event loop drives every request of a point (or, with ``client_workers`` > 1,
one loop per worker process: core/load/shards.py). The only work on the timing path is
reading an SSE line, one JSON parse and ``perf_counter`` (core/load/requests.py,
core/load/openai.py); re-tokenizing happens after the point. The loop's own lag is sampled
(core/load/health.py) so a saturated client is reported instead of being mistaken for a slow
server. When requests go out: core/load/schedule.py; how many: core/load/sizing.py.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import replace

from core.load.health import ClientHealth, fine_gil_switching, run_monitored
from core.load.prompts import Prompt
from core.load.requests import (
    ClientOptions,
    Connections,
    LoadOptions,
    event_loop_factory,
    event_loop_name,
)
from core.load.schedule import (
    SteadyGate,
    arrival_times,
    is_scheduled,
    send_on_schedule,
)
from core.load.shards import ShardPool
from core.load.sizing import point_budget, workers_for
from core.records import RequestRecord

__all__ = ["LoadGenerator", "LoadOptions", "run_load"]


async def _run(
    conns: Connections,
    opts: LoadOptions,
    prompts: list[Prompt],
    on_done: Callable[[int, int], None] | None,
) -> tuple[list[RequestRecord], ClientHealth]:
    if opts.sessions is not None:
        return await _run_sessions(conns, opts, prompts, on_done)
    n = len(prompts)
    records = [
        RequestRecord(
            index=i, send_s=0.0, prompt_tokens=p.prompt_tokens, output_tokens_requested=p.output_len
        )
        for i, p in enumerate(prompts)
    ]
    scheduled = is_scheduled(opts.request_rate, opts.arrivals_s)
    due = arrival_times(n, opts.request_rate, opts.seed, opts.arrivals_s)
    sem = asyncio.Semaphore(opts.concurrency or n)
    gate = SteadyGate(
        n,
        opts.concurrency,
        opts.request_rate,
        opts.min_requests,
        opts.min_steady_s,
        scheduled=scheduled,
    )
    refused = [False] * n  # not sent: the point had already sent enough
    health = ClientHealth()
    finished = 0
    t0 = time.perf_counter()
    cpu0 = time.process_time()

    async def guarded(i: int) -> None:
        nonlocal finished
        waited = sem.locked()  # a busy cap, not the client, holds it back
        async with sem:
            if not gate.may_send(i):
                refused[i] = True
                return
            gate.started()
            if scheduled:
                records[i].scheduled_s = due[i]
                now_s = time.perf_counter() - t0
                health.sent_late(now_s if waited else due[i], now_s)
            try:
                await conns.send(opts, records[i], prompts[i], t0)
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
        await send_on_schedule(n, opts.request_rate, opts.seed, start, given=opts.arrivals_s)
        await asyncio.gather(*tasks)

    await run_monitored(
        dispatch(), records, health, opts.should_stop, opts.point_timeout_s, t0, cpu0
    )
    # A point sized by time leaves its unsent prompts out; what was sent is a prefix of
    # them (the semaphore is FIFO and the gate never reopens).
    return [r for r, no in zip(records, refused, strict=True) if not no], health


async def _run_sessions(
    conns: Connections,
    opts: LoadOptions,
    prompts: list[Prompt],
    on_done: Callable[[int, int], None] | None,
) -> tuple[list[RequestRecord], ClientHealth]:
    """Multi-turn sessions: a session's turns one after another, each sent with the
    conversation so far (the user turns and the server's real answers), sessions up to the
    point's concurrency at once. A turn that fails ends its session: the next turn would
    need its answer, so the rest of that session is not sent (and not recorded)."""
    sessions = opts.sessions or ()
    n = sum(len(s) for s in sessions)
    records: list[RequestRecord] = []
    sem = asyncio.Semaphore(opts.concurrency or max(1, len(sessions)))
    health = ClientHealth()
    finished = 0
    t0 = time.perf_counter()
    cpu0 = time.process_time()

    async def session(k: int, turns: tuple[int, ...]) -> None:
        nonlocal finished
        async with sem:
            history: list[tuple[str, str]] = []
            context_tokens = 0  # the conversation so far, in tokens without the template
            for t, i in enumerate(turns):
                if t > 0 and opts.think_time_s > 0:
                    await asyncio.sleep(opts.think_time_s)
                user = prompts[i]
                prompt = replace(user, history=tuple(history))
                rec = RequestRecord(
                    index=i,
                    send_s=0.0,
                    prompt_tokens=context_tokens + user.prompt_tokens,
                    output_tokens_requested=user.output_len,
                    session=k,
                    turn=t,
                )
                records.append(rec)
                await conns.send(opts, rec, prompt, t0)
                finished += 1
                if on_done:
                    on_done(finished, n)
                if not rec.ok:
                    return
                # The answer's length as the server counted it (the requested one when it
                # sends no usage): what the next turn's prompt holds beyond the user text.
                answer_tokens = rec.output_tokens("server")
                context_tokens += user.prompt_tokens + answer_tokens
                history += [("user", user.text), ("assistant", rec.generated_text)]

    async def all_sessions() -> None:
        await asyncio.gather(*(session(k, s) for k, s in enumerate(sessions)))

    await run_monitored(
        all_sessions(), records, health, opts.should_stop, opts.point_timeout_s, t0, cpu0
    )
    records.sort(key=lambda r: (r.send_s, r.index))
    return records, health


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
        event_loop: str = "auto",
        json_parser: str = "auto",
    ) -> None:
        """``http``: "auto" streams plain ``http://`` through core.load.sse_client (a fraction of
        httpx's CPU per chunk) and everything else through httpx; "httpx" forces httpx.
        ``event_loop`` and ``json_parser``: Settings.event_loop / Settings.json_parser, the
        same in every shard worker."""
        self.client = ClientOptions(
            base_url=base_url,
            max_connections=max_connections,
            request_timeout_s=request_timeout_s,
            headers=headers,
            http=http,
            event_loop=event_loop,
            json_parser=json_parser,
        )
        self._runner = asyncio.Runner(loop_factory=event_loop_factory(event_loop))
        self._conns = Connections(self.client)
        self.event_loop = event_loop_name(event_loop)  # what runs here: "uvloop" or "asyncio"
        self.json_parser = self._conns.json_parser  # "orjson" or "json"
        self.seen: list[RequestRecord] = []  # the latest completed requests: the speed seen
        self._shards: ShardPool | None = None  # worker processes, started when a point asks

    def workers_for(self, setting: int | str, concurrency: int | None, n: int) -> int:
        """The processes for a point: ``setting`` as given, or for "auto" enough for the
        chunk rate the fastest speed seen here would offer (core.load.sizing.workers_for)."""
        return workers_for(setting, concurrency, n, self.seen)

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
        # Sessions stay in this process: a turn needs the answer its session got, which
        # the shared-counter workers have no way to hand each other.
        sharded = opts.workers > 1 and opts.sessions is None
        if sharded and (opts.concurrency or len(prompts)) > 1:
            if self._shards is None or self._shards.size < opts.workers:
                if self._shards is not None:
                    self._shards.close()
                self._shards = ShardPool(opts.workers, self.client)
            records, health = self._shards.run(opts, prompts, opts.workers, on_done)
        else:
            with fine_gil_switching():
                records, health = self._runner.run(_run(self._conns, opts, prompts, on_done))
        self.seen = [*self.seen, *(r for r in records if r.ok)][-2000:]
        return records, health

    def close(self) -> None:
        if self._shards is not None:
            self._shards.close()
        self._runner.run(self._conns.aclose())
        self._runner.close()

    def __enter__(self) -> LoadGenerator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_load(
    opts: LoadOptions, prompts: list[Prompt], on_done: Callable[[int, int], None] | None = None
) -> tuple[list[RequestRecord], ClientHealth]:
    """One point on a fresh connection pool (a convenience for single measurements)."""
    limit = opts.concurrency or len(prompts)
    with LoadGenerator(opts.base_url, limit, opts.request_timeout_s) as gen:
        return gen.run(opts, prompts, on_done)
