"""The sharded load generator: one point's requests spread over W worker processes.

One asyncio process tops out at one core (5.9-7.6 us per chunk flooded: ~150,000 chunks/s,
docs/BENCHMARKS.md part 2); a GPU host serving a small model at high concurrency streams more.
Each worker is a process with its own event loop and connection pool; the point stays one
point: one arrival schedule, one concurrency cap, one records table.

**How the cap stays global and exact.** The point's C slots are split over the workers
(worker w runs C_w slot tasks, sum C_w = C), and every slot runs the same loop: take the next
request index from a counter shared by all workers (a memory-mapped file under flock), wait for
its arrival time, send it, wait for the end, repeat. So

* at most C requests are ever in flight: a slot holds one at a time, and there are C slots;
* no slot idles while a request is due: whichever slot frees first takes the next index, in
  any worker, so the point is the same first-come first-served queue with C servers as the
  one-process generator's semaphore of C (the alternative, each worker owning a fixed list of
  requests, lets a request wait in a busy worker while another worker has a free slot);
* the arrival times are computed once (``core.load.schedule.arrival_times``: seeded, absolute, on
  the point's clock, or a trace's own timestamps) and read by index, so every request is due
  exactly when the one-process schedule says, whichever worker sends it.

The shared counter costs one uncontended ``flock`` per request (microseconds), against no message
at all per request to the parent. ``time.perf_counter`` is CLOCK_MONOTONIC, one clock for all
processes of the host, so every worker stamps its records on the parent's point clock and
the merged records need no shifting.

A worker that dies (killed, out of memory) fails its point with the reason; the parent then
stops every worker, so no process is left behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import mmap
import os
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, ClassVar

from core.errors import ServeLabError
from core.load.health import ClientHealth, run_monitored
from core.load.prompts import Prompt
from core.load.requests import (
    ClientOptions,
    Connections,
    LoadOptions,
    event_loop_factory,
    event_loop_name,
)
from core.load.schedule import Clock, arrival_times, is_scheduled, sleep_until, slots_to_fill
from core.load.sizing import slot_shares
from core.records import RequestRecord
from core.settings import REPO_ROOT, environ_values

__all__ = ["ClientWorkerDied", "ShardPool"]

START_MARGIN_S = 0.05  # the job reaches every worker before the point's clock starts
READY_TIMEOUT_S = 120.0  # a worker's imports on a loaded host


class ClientWorkerDied(ServeLabError):
    """A load-generator worker process ended during a point."""


@dataclass(frozen=True)
class _Job:
    opts: LoadOptions  # should_stop dropped: the parent polls it and sets ``cancel``
    prompts: list[Prompt]
    due_s: list[float]
    slots: int
    target: int  # slots of the whole point (for the steady-state gate)
    t0: float  # the point's clock origin, perf_counter of the parent


class _Shared:
    """The state every worker of a point shares: a few counters in a small memory-mapped
    file, changed under ``flock`` on it. (multiprocessing's Lock and Value would do, but
    under ``spawn`` they start a resource-tracker process that outlives the pool.)"""

    _FIELDS: ClassVar[dict[str, tuple[int, str]]] = {
        "next_index": (0, "q"),
        "in_flight": (8, "q"),
        "finished": (16, "q"),
        "full_since": (24, "d"),
        "closed": (32, "q"),
        "cancel": (40, "q"),
    }
    _SIZE = 48

    def __init__(self, path: str) -> None:
        self.path = path
        self._file = Path(path).open("r+b")  # noqa: SIM115 (open for the pool's life)
        self._mem = mmap.mmap(self._file.fileno(), self._SIZE)

    @classmethod
    def create(cls) -> _Shared:
        fd, path = tempfile.mkstemp(prefix="servelab-shards-")
        os.write(fd, bytes(cls._SIZE))
        os.close(fd)
        return cls(path)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        fcntl.flock(self._file, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._file, fcntl.LOCK_UN)

    def get(self, name: str) -> Any:
        offset, fmt = self._FIELDS[name]
        return struct.unpack_from(fmt, self._mem, offset)[0]

    def set(self, name: str, value: float) -> None:
        offset, fmt = self._FIELDS[name]
        struct.pack_into(fmt, self._mem, offset, value)

    def reset(self) -> None:
        with self.locked():
            self._mem[:] = bytes(self._SIZE)

    def close(self, unlink: bool = False) -> None:
        self._mem.close()
        self._file.close()
        if unlink:
            Path(self.path).unlink(missing_ok=True)


async def _worker_point(
    conns: Connections, job: _Job, sh: _Shared
) -> tuple[list[RequestRecord], ClientHealth]:
    opts, n = job.opts, len(job.prompts)
    min_requests = n if opts.min_requests is None else min(n, opts.min_requests)
    records: list[RequestRecord] = []
    health = ClientHealth()
    cpu0 = time.process_time()

    def take() -> int | None:
        """The next request index for a free slot; None when the point has sent enough."""
        with sh.locked():
            i = int(sh.get("next_index"))
            if sh.get("cancel") or sh.get("closed") or i >= n:
                return None
            if i >= min_requests:
                since = sh.get("full_since")
                if opts.min_steady_s is None or (
                    since and time.perf_counter() - since >= opts.min_steady_s
                ):
                    sh.set("closed", 1)
                    return None
            sh.set("next_index", i + 1)
            return i

    scheduled = is_scheduled(opts.request_rate, opts.arrivals_s)

    async def slot() -> None:
        while (i := take()) is not None:
            # A capped slot that frees after the due time was held back by the cap, not by
            # the client; uncapped, every request has its own slot from the start.
            taken_s = time.perf_counter() - job.t0 if opts.concurrency else 0.0
            await sleep_until(job.due_s[i], job.t0, Clock())
            p = job.prompts[i]
            rec = RequestRecord(
                index=i,
                send_s=0.0,
                prompt_tokens=p.prompt_tokens,
                output_tokens_requested=p.output_len,
            )
            if scheduled:
                rec.scheduled_s = job.due_s[i]
                health.sent_late(max(job.due_s[i], taken_s), time.perf_counter() - job.t0)
            records.append(rec)
            with sh.locked():
                in_flight = sh.get("in_flight") + 1
                sh.set("in_flight", in_flight)
                if not sh.get("full_since") and in_flight >= job.target:
                    sh.set("full_since", time.perf_counter())
            try:
                await conns.send(opts, rec, p, job.t0)
            finally:
                with sh.locked():
                    sh.set("in_flight", sh.get("in_flight") - 1)
                    sh.set("finished", sh.get("finished") + 1)

    async def all_slots() -> None:
        await asyncio.gather(*(slot() for _ in range(job.slots)))

    await run_monitored(
        all_slots(),
        records,
        health,
        lambda: bool(sh.get("cancel")),
        opts.point_timeout_s,
        job.t0,
        cpu0,
    )
    return records, health


def _worker_main() -> None:
    """A worker process (``python -m core.load.shards``): its ClientOptions, then point jobs,
    arrive as pickles on stdin; its answers go back on the original stdout. Anything a library
    prints goes to stderr instead, so it cannot corrupt the answers."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C
    out_fd = os.dup(1)
    os.dup2(2, 1)
    inbox, outbox = Connection(0, writable=False), Connection(out_fd, readable=False)
    shared_path, client = inbox.recv()  # never on argv: the headers may hold an API key
    sh = _Shared(shared_path)
    runner = asyncio.Runner(loop_factory=event_loop_factory(client.event_loop))
    conns = Connections(client)
    try:
        # ready, with what this worker measures with (the parent's choice, checked by tests)
        outbox.send(("ready", event_loop_name(client.event_loop), conns.json_parser))
        while (job := inbox.recv()) is not None:
            outbox.send(runner.run(_worker_point(conns, job, sh)))
    except (EOFError, BrokenPipeError, KeyboardInterrupt):
        pass  # the parent went away: nothing to report to
    finally:
        runner.run(conns.aclose())
        runner.close()
        sh.close()


class ShardPool:
    """W worker processes kept for every point on one server (warm keep-alive connections).
    Each is ``python -m core.load.shards`` (an argv list, a fresh interpreter: nothing of the
    parent's threads or main module comes along), talking over its stdin/stdout pipes."""

    def __init__(self, workers: int, client: ClientOptions) -> None:
        self._shared = _Shared.create()
        self._shared_closed = False
        self._procs: list[subprocess.Popen[bytes]] = []
        self._send: list[Connection] = []
        self._recv: list[Connection] = []
        root = str(REPO_ROOT)  # where ``core`` is importable
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([root, *environ_values(["PYTHONPATH"]).values()]),
        }
        # What each worker measures with, as it said when ready: (event loop, JSON parser).
        self.runtimes: list[tuple[str, str]] = []
        try:
            for _ in range(workers):
                proc = subprocess.Popen(
                    [sys.executable, "-m", "core.load.shards"],
                    env=env,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                )
                self._procs.append(proc)
                assert proc.stdin is not None and proc.stdout is not None
                self._send.append(Connection(os.dup(proc.stdin.fileno()), readable=False))
                self._recv.append(Connection(os.dup(proc.stdout.fileno()), writable=False))
                proc.stdin.close()
                proc.stdout.close()
                self._send[-1].send((self._shared.path, client))
            for k in range(workers):  # imports take seconds on a busy host: not point time
                _ready, loop, parser = self._receive(k, READY_TIMEOUT_S, "while starting")
                self.runtimes.append((loop, parser))
        except BaseException:
            self.close()
            raise

    def _receive(self, k: int, timeout_s: float, during: str) -> Any:
        """Worker ``k``'s next message; ClientWorkerDied when it ends (or stays silent)."""
        conn, proc = self._recv[k], self._procs[k]
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with contextlib.suppress(EOFError, OSError):
                if conn.poll(0.02):
                    return conn.recv()
            if proc.poll() is not None:
                code = proc.returncode
                how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
                self.close()
                raise ClientWorkerDied(
                    f"load-generator worker {k} (pid {proc.pid}) died {during} ({how})"
                )
        self.close()
        raise ClientWorkerDied(
            f"load-generator worker {k} did not answer {during} within {timeout_s:g} s"
        )

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._procs]

    @property
    def size(self) -> int:
        return len(self._procs)

    def run(
        self,
        opts: LoadOptions,
        prompts: list[Prompt],
        workers: int,
        on_done: Callable[[int, int], None] | None = None,
    ) -> tuple[list[RequestRecord], ClientHealth]:
        """One point over ``workers`` of the pool's processes: records of every worker in
        send-time order, and the client's health per worker and overall."""
        n = len(prompts)
        slots = opts.concurrency or n
        shares = slot_shares(slots, min(workers, self.size))
        scheduled = is_scheduled(opts.request_rate, opts.arrivals_s)
        target = slots_to_fill(opts.concurrency, opts.request_rate, n, scheduled)
        should_stop = opts.should_stop
        due = arrival_times(n, opts.request_rate, opts.seed, opts.arrivals_s)
        self._shared.reset()
        t0 = time.perf_counter() + START_MARGIN_S
        job_opts = replace(opts, should_stop=None)
        for k, share in enumerate(shares):
            self._send[k].send(_Job(job_opts, prompts, due, share, target, t0))
        results: dict[int, tuple[list[RequestRecord], ClientHealth]] = {}
        last_done = -1
        while len(results) < len(shares):
            for k in range(len(shares)):
                if k not in results and (
                    self._recv[k].poll(0) or self._procs[k].poll() is not None
                ):
                    results[k] = self._receive(k, 1.0, "during the point")
            time.sleep(0.01)
            if should_stop is not None and should_stop():
                with self._shared.locked():
                    self._shared.set("cancel", 1)
            done = int(self._shared.get("finished"))
            if on_done is not None and done != last_done:
                last_done = done
                on_done(done, n)
        records = sorted(
            (r for recs, _ in results.values() for r in recs), key=lambda r: (r.send_s, r.index)
        )
        per_worker = [results[k][1] for k in range(len(shares))]
        return records, ClientHealth.merged(per_worker)

    def close(self) -> None:
        """Stop every worker (asked politely, then terminated, then killed) and reap it."""
        for conn in self._send:
            with contextlib.suppress(OSError, ValueError):
                conn.send(None)
        deadline = time.monotonic() + 2.0
        for proc in self._procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.0, deadline - time.monotonic()))
        for proc in self._procs:
            for stop in (proc.terminate, proc.kill):
                if proc.poll() is None:
                    stop()
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.wait(1.0)
        for conn in (*self._send, *self._recv):
            conn.close()
        self._procs, self._send, self._recv = [], [], []
        if not self._shared_closed:
            self._shared_closed = True
            self._shared.close(unlink=True)


if __name__ == "__main__":
    _worker_main()
