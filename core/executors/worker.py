"""The portal's worker: hands queued runs to their executors and polls them.

The queue is the run folders (``core/executors/queue.py``: submit, cancel, recover_runs).
One ``Worker`` per portal process hands each queued folder to its executor
(``core/executors``: ``spec.placement.executor``, else ``SERVELAB_EXECUTOR``) and polls the
executors: the local one runs ``python -m core run --run-id ID`` on this host, one run per
GPU set; the Ray one runs it on a Ray cluster. The worker schedules and dispatches; how a
run process is started, watched, cancelled or found dead is the executor's. Only one
worker per data directory launches anything: it holds an exclusive ``flock`` on
``data/worker.lock``; any other stays passive (it only reports the queue) until that lock
is free.

Plain Python: no Streamlit here. Every ``Worker`` method may be called from any thread.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import threading
from collections import defaultdict
from collections.abc import Callable
from typing import IO, Any

from core.errors import StoreError
from core.executors import executor_for
from core.executors.base import EXECUTORS, Executor
from core.executors.queue import recover_runs, run_ids
from core.executors.registry import executor_class, executor_of
from core.run_folder import RunFolder, RunStatus
from core.settings import Settings
from core.store import Catalog

__all__ = ["Worker"]

log = logging.getLogger(__name__)

WORKER_LOCK = "worker.lock"


# --- the worker -------------------------------------------------------------------------


class Worker:
    """Hands queued runs to their executors and polls them. One per portal process.

    ``start()`` launches a daemon thread; ``stop()`` ends it without touching the runs
    (they live in their own sessions or on Ray; a later worker re-attaches to them).
    """

    def __init__(
        self,
        settings: Settings,
        poll_interval_s: float = 1.0,
        *,
        settle_s: float = 0.5,
        has_gpu: bool | None = None,
        on_change: Callable[[], bool] | None = None,
    ) -> None:
        """``settle_s``: a queued folder starts only once its status is that old, so a
        CLI run (which prepares its folder queued, then marks it running a few ms later
        in the same process) is never taken as a job. ``has_gpu``: NVML's answer when
        None. ``on_change``: called by the active worker after its first look at the queue
        and after each look in which a run changed state (the composition points pass
        ``core.launch.adaptive.advance_experiments``: executors sit below experiments, so
        the worker cannot call it by name); True when it queued something. An unknown
        ``SERVELAB_EXECUTOR`` is a ConfigError here, at start-up."""
        self.settings = settings
        self.poll_interval_s = poll_interval_s
        self._options: dict[str, Any] = {"settle_s": settle_s, "has_gpu": has_gpu}
        self._lock = threading.Lock()  # guards everything snapshot() reads
        self._control = threading.Lock()  # serialises start/stop
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock_file: IO[str] | None = None
        self._active = False
        self._reason = "not started"
        self._last_error = ""
        self._executors: dict[str, Executor] = {}  # made on first use (Ray's: a Ray run)
        self._queued: list[str] = []
        self._others: list[dict[str, Any]] = []  # passive: runs the active worker runs
        # Worker-thread only: folders known final, executor per folder, states seen last tick.
        self._final: set[str] = set()
        self._kinds: dict[str, str] = {}
        self._seen: dict[str, Any] = {}
        self._tick_error = ""
        self._ticks = 0  # looks at the queue so far (public: ``ticks``)
        self._on_change = on_change
        self._hooked = False  # on_change has run once since this worker became active
        # At start-up: an unknown SERVELAB_EXECUTOR is a ConfigError now, not at the
        # first run; the default executor is ready before the first tick.
        self._executor(settings.executor)

    # --- public ---------------------------------------------------------------------
    def start(self) -> None:
        with self._control:
            if self._thread is not None and self._thread.is_alive():
                return
            self._stop.clear()
            self._take_lock()
            self._thread = threading.Thread(target=self._main, name="servelab-worker", daemon=True)
            self._thread.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        """End the thread (runs keep running) and give up the worker lock."""
        with self._control:
            self._stop.set()
            self._wake.set()
            if self._thread is not None:
                self._thread.join(timeout_s)
            self._thread = None
            with self._lock:
                if self._lock_file is not None:
                    self._lock_file.close()  # releases the flock
                    self._lock_file = None
                self._active = False
                self._reason = "stopped"
            for ex in list(self._executors.values()):  # the runs keep running
                ex.close()

    def keep_off(self, why: str) -> None:
        """This worker will not be started: ``snapshot()`` says why (the Runs page shows it)."""
        with self._lock:
            self._reason = why

    def wake(self) -> None:
        """Look at the queue now rather than at the next poll (e.g. after ``submit``)."""
        self._wake.set()

    @property
    def active(self) -> bool:
        with self._lock:
            return self._active

    @property
    def ticks(self) -> int:
        """How many times the thread has looked at the queue and the runs (failed looks
        count too). Two more than now: it has looked at least once after this moment."""
        with self._lock:
            return self._ticks

    def snapshot(self) -> dict[str, Any]:
        """``active``, ``reason``, ``running`` (dicts with ``run_id``, ``gpus``, ``pid``,
        ``attached``), ``queued`` (ids in queue order), ``last_error``. Copies."""
        with self._lock:
            running = (
                [d for ex in self._executors.values() for d in ex.running()]
                if self._active
                else [dict(d) for d in self._others]
            )
            return {
                "active": self._active,
                "reason": self._reason,
                "running": sorted(running, key=lambda d: d["run_id"]),
                "queued": list(self._queued),
                "last_error": self._last_error,
                "data_dir": str(self.settings.data_dir),
            }

    # --- the lock -------------------------------------------------------------------
    def _take_lock(self) -> bool:
        if self._lock_file is not None:
            return True
        path = self.settings.data_dir / WORKER_LOCK
        try:
            self.settings.data_dir.mkdir(parents=True, exist_ok=True)
            f = path.open("a+")
        except OSError as exc:
            with self._lock:
                self._reason = (
                    f"cannot open {path}: {exc.strerror or exc}; "
                    "fix the data folder's permissions or set SERVELAB_DATA_DIR"
                )
            return False
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            with contextlib.suppress(OSError):
                f.seek(0)
                holder = f.read().strip()
            f.close()
            with self._lock:
                self._reason = (
                    f"another ServeLab portal (pid {holder or '?'}) runs the queue "
                    f"for {self.settings.data_dir}; this one only shows it"
                )
            return False
        with contextlib.suppress(OSError):
            f.seek(0)
            f.truncate()
            f.write(f"{os.getpid()}\n")
            f.flush()
        with self._lock:
            self._lock_file = f
            self._active = True
            self._reason = f"runs the queue for {self.settings.data_dir}"
        return True

    # --- the thread -----------------------------------------------------------------
    def _main(self) -> None:
        recovered = False
        while not self._stop.is_set():
            try:
                if not self.active:
                    self._take_lock()
                if self.active and not recovered:
                    changed = recover_runs(self.settings)
                    recovered = True
                    if changed:
                        self._sync_catalog()
                self._tick_error = ""
                self._tick()
                with self._lock:
                    self._last_error = self._tick_error
            except Exception as exc:  # keep the worker alive; say what went wrong
                log.exception("worker tick failed")
                with self._lock:
                    self._last_error = f"{type(exc).__name__}: {exc}"
            with self._lock:
                self._ticks += 1
            self._wake.wait(self.poll_interval_s)
            self._wake.clear()

    def _executor(self, name: str) -> Executor:
        ex = self._executors.get(name)
        if ex is None:
            ex = executor_class(name)(self.settings, **self._options)  # type: ignore[call-arg]
            with self._lock:
                self._executors[name] = ex
        return ex

    def _tick(self) -> None:
        active = self.active
        changed = False
        if active:  # first what ended: its GPUs are free for the queue below
            for ex in list(self._executors.values()):
                changed |= ex.poll()
        settings = self.settings
        queues: dict[str, list[RunFolder]] = defaultdict(list)
        others: list[dict[str, Any]] = []
        ids = run_ids(settings)
        present = set(ids)
        self._final &= present  # forget deleted folders
        for cache in (self._seen, self._kinds):
            for rid in [r for r in cache if r not in present]:
                del cache[rid]
        for rid in ids:
            if rid in self._final:
                continue
            folder = RunFolder(settings.runs_dir / rid)
            st = folder.status_or_empty()
            if st.state is None:
                continue  # being created, or unreadable
            if self._seen.get(rid) != st.state:
                self._seen[rid] = st.state
                changed = True
            if st.final:
                self._final.add(rid)
                self._seen.pop(rid, None)
                self._kinds.pop(rid, None)
                continue
            kind = self._kind(folder, st)
            if st.state == "queued":
                queues[kind].append(folder)
            elif not active:  # the active worker's run, for this one's view
                others.append(self._executor(kind).describe(folder, st))
            elif not self._executor(kind).tracks(rid):
                changed |= self._executor(kind).adopt(folder, st)
        queued: list[str] = []
        if active:
            for kind in sorted({*queues, *self._executors}):  # an empty queue lets go too
                waiting, admitted = self._executor(kind).admit(queues.get(kind, []))
                queued += waiting
                changed |= admitted
            self._tick_error = self._tick_error or "; ".join(
                ex.error for ex in self._executors.values() if ex.error
            )
        else:
            queued = [f.run_id for folders in queues.values() for f in folders]
        with self._lock:
            self._queued = sorted(queued)
            self._others = others
        if changed and active:
            self._sync_catalog()
        if active and self._on_change is not None and (changed or not self._hooked):
            self._hooked = True
            if self._on_change():
                self._wake.set()  # what it queued starts at the next look, not a poll later

    def _kind(self, folder: RunFolder, status: RunStatus) -> str:
        """The executor of an active folder: the one its status records (it has started,
        or was handed on), else the one its spec asks for (cached)."""
        if status.executor or status.state != "queued":
            return executor_of(status)
        kind = self._kinds.get(folder.run_id)
        if kind is None:
            try:
                kind = executor_for(folder.spec(), self.settings)
            except Exception:
                # Unreadable: the default executor's admit ends it with the reason.
                return EXECUTORS[0]
            self._kinds[folder.run_id] = kind
        return kind

    def _sync_catalog(self) -> None:
        try:
            Catalog(self.settings.catalog_path, self.settings.runs_dir).sync()
        except StoreError as exc:
            log.warning("catalog sync failed: %s", exc)
            self._tick_error = f"catalog sync failed: {exc}"
