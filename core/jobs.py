"""The portal's job queue and its worker. The queue IS the run folders.

A folder whose ``status.json`` says ``queued`` is a job; nothing else is stored.
``submit`` prepares folders; one ``Worker`` per portal process starts each queued
folder as its own OS process (``python -m core run --run-id ID --quiet``, in its own
session so it survives a portal restart), at most one run per GPU set at a time and in
queue order per set; it reaps the processes, records a run whose process died without a
final state as ``interrupted`` (and kills its server group), and keeps the catalog in
sync. Only one worker per data directory launches anything: it holds an exclusive
``flock`` on ``data/worker.lock``; any other stays passive (it only reports the queue)
until that lock is free. A folder whose executor is ``ray`` (``spec.placement.executor``,
else ``SERVELAB_EXECUTOR``) is not launched here: the worker hands it to its
``core.executors.ray_cluster.RayDispatcher``, which runs it on a Ray cluster.

Who writes ``status.json`` when (every transition of a queued folder happens under the
folder's ``.jobs.lock``, so a cancel and a launch never both win):

* ``submit``: ``queued`` (``prepare_run``);
* the worker, right after starting the run process: ``running`` + ``pid`` (the run
  process then writes its own steps, and its final state);
* ``cancel`` of a queued folder: ``cancelled`` plus a ``CANCEL`` file;
* the worker or ``recover_runs``, for a run whose process is gone without a final
  state: ``interrupted`` (or ``cancelled`` when a cancel had been asked for).

Plain Python: no Streamlit here. Every public function and ``Worker`` method may be
called from any thread.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import secrets
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import IO, Any

import psutil

from core.config import RunSpec
from core.errors import StoreError
from core.gpu import nvml_available
from core.launcher import run_processes
from core.pipeline import prepare_run
from core.run_folder import ACTIVE_STATES, FINAL_STATES, RunFolder, new_run_id, utc_now
from core.settings import REPO_ROOT, Settings
from core.store import Catalog

__all__ = [
    "GpuSet",
    "Worker",
    "cancel",
    "gpu_set",
    "kill_server_group",
    "plan_launches",
    "recover_runs",
    "submit",
]

log = logging.getLogger(__name__)

GpuSet = frozenset[int | str]
"""What a run occupies: GPU indexes, ``"cpu"``, or ``"endpoint:<url>"``."""

RUNNER_LOG = "runner.log"
FOLDER_LOCK = ".jobs.lock"
WORKER_LOCK = "worker.lock"
SERVER_GRACE_S = 3.0
_CLOCK_SLACK_S = 2.0
_RUN_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


# --- run ids and submission ----------------------------------------------------------

_id_lock = threading.Lock()
_last_id = ""


def _next_run_id() -> str:
    """A new run id, greater than every id this process made before.

    ``new_run_id`` sorts by the second only (then a random suffix); within one second
    this bumps the suffix of the last id instead, so the queue (run_id order) is the
    submission order in this process. Still unique without coordination across
    processes: the bump is random and the folder creation is the final arbiter.
    """
    global _last_id
    with _id_lock:
        deadline = time.monotonic() + 2.0
        while True:
            rid = new_run_id()
            if rid > _last_id:
                break
            prefix, suffix = _last_id[:-6], int(_last_id[-6:], 16)
            bumped = suffix + 1 + secrets.randbelow(4096)
            if bumped < 16**6:
                rid = f"{prefix}{bumped:06x}"
                break
            if time.monotonic() > deadline:  # clock went back far: unique is what matters
                break
            time.sleep(0.01)  # this second's ids are used up: wait for the next second
        _last_id = max(_last_id, rid)
        return rid


def submit(settings: Settings, specs: Sequence[RunSpec]) -> list[str]:
    """Queue one run per spec; return their run ids in the same order.

    Safe from many threads and processes at once: each folder is created with an
    exclusive ``mkdir`` (a clash just takes another id) and its ``status.json`` is
    written atomically after ``spec.json``, so a worker never sees a half-made job.
    """
    ids: list[str] = []
    for spec in specs:
        for _attempt in range(50):
            rid = _next_run_id()
            try:
                folder = prepare_run(spec, settings, rid)
            except StoreError as exc:
                if isinstance(exc.__cause__, FileExistsError):
                    continue
                raise
            ids.append(folder.run_id)
            break
        else:
            raise StoreError(f"could not create a new run folder in {settings.runs_dir}")
    return ids


# --- GPU sets and scheduling ------------------------------------------------------------

def gpu_set(spec: RunSpec, has_gpu: bool | None = None) -> GpuSet:
    """What a run occupies while it runs. ``has_gpu`` defaults to NVML's answer."""
    server = spec.server
    if server.engine == "endpoint":
        return frozenset({f"endpoint:{(server.endpoint_url or '').rstrip('/')}"})
    if has_gpu is None:
        has_gpu = nvml_available()
    if server.device == "cpu" or not has_gpu:
        return frozenset({"cpu"})
    if server.device == "mps":
        return frozenset({"mps"})
    m = re.fullmatch(r"cuda:(\d+)", server.device)
    base = int(m.group(1)) if m else 0  # cuda / auto start at GPU 0
    return frozenset(range(base, base + server.tp_size))


def plan_launches(queue: Sequence[tuple[str, GpuSet]], busy: Collection[int | str],
                  not_ready: Collection[str] = ()) -> list[str]:
    """Which queued runs may start now, in queue order.

    A run starts when its set is disjoint from ``busy`` and from the set of every run
    before it that is still waiting (so a later job never jumps ahead of an earlier one
    that wants an overlapping set). ``not_ready`` runs wait, and hold their place.
    """
    taken: set[int | str] = set(busy)
    out: list[str] = []
    for rid, gpus in queue:
        if rid not in not_ready and taken.isdisjoint(gpus):
            out.append(rid)
        taken |= gpus
    return out


def _spec_of(folder: RunFolder) -> RunSpec:
    data = folder.read("spec.json")
    if not isinstance(data, dict):
        raise StoreError(f"{folder.run_id} has no spec.json")
    return RunSpec.model_validate({k: v for k, v in data.items()
                                   if k not in ("run_id", "created_at")})


# --- processes --------------------------------------------------------------------------

def _parse_time(text: Any) -> float | None:
    if not isinstance(text, str):
        return None
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def _live(proc: psutil.Process) -> bool:
    try:
        return bool(proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def _run_process(pid: Any, run_id: str, started_at: Any) -> psutil.Process | None:
    """The live ServeLab run process of ``run_id`` with this pid, or None.

    Really a run process: alive (not a zombie), its command line is ``... core run ...``
    and names the run id, or is a plain CLI run (no ``--run-id``: it made the folder
    itself, so its command line cannot name it). It must also be older than the run's
    ``started_at``: a pid reused after the run began is someone else.
    """
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return None
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        argv = proc.cmdline()
        created = proc.create_time()
    except psutil.Error:
        return None
    if "core" not in argv or "run" not in argv:
        return None
    started = _parse_time(started_at)
    if started is not None and created > started + _CLOCK_SLACK_S:
        return None
    if run_id in argv or ("--run-id" not in argv and started is not None):
        return proc
    return None


def kill_server_group(status: dict[str, Any], grace_s: float = SERVER_GRACE_S) -> str:
    """Kill what is left of a run's server: SIGTERM to its process group (the server is
    its group leader), a grace period, then SIGKILL to the group and to any descendant
    that left it. Returns what it did, or "" when there was nothing (left) to kill.

    The server's processes are found three ways, so none survives its leader: the
    leader and its descendants; every process still in its group after the leader died
    (a scheduler orphaned when the run process was SIGKILLed and took the leader with
    it); every process carrying the run's ``SERVELAB_RUN_ID`` in its environment (one
    that left the group). Guards against reused pids: only processes younger than the
    run's ``started_at`` count.
    """
    raw_pid = status.get("server_pid")
    pid = raw_pid if isinstance(raw_pid, int) and not isinstance(raw_pid, bool) else 0
    run_id = status.get("run_id")
    started = _parse_time(status.get("started_at"))

    def young(p: psutil.Process) -> bool:
        try:
            return started is None or p.create_time() >= started - _CLOCK_SLACK_S
        except psutil.Error:
            return False

    members: dict[int, psutil.Process] = {}
    group = pid > 1
    if group:
        with contextlib.suppress(psutil.Error, OSError):
            leader = psutil.Process(pid)
            if _live(leader) and os.getpgid(pid) == pid and young(leader):
                members[pid] = leader
                members.update((c.pid, c) for c in leader.children(recursive=True))
        for proc in psutil.process_iter():
            with contextlib.suppress(psutil.Error, OSError):
                if os.getpgid(proc.pid) == pid and proc.pid != os.getpid():
                    members[proc.pid] = proc
    if isinstance(run_id, str) and run_id:
        members.update((p.pid, p) for p in run_processes(run_id))
    members = {k: p for k, p in members.items() if _live(p) and young(p)}
    if not members:
        return ""
    if group:
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGTERM)
    for p in members.values():
        with contextlib.suppress(psutil.Error):
            p.terminate()
    deadline = time.monotonic() + grace_s
    while any(_live(p) for p in members.values()) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = [p for p in members.values() if _live(p)]
    if left:
        if group:
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
        for p in left:
            with contextlib.suppress(psutil.Error):
                p.kill()
    what = f"server process group {pid}" if group else "server processes"
    return f"{what} killed ({len(members)} process(es)" + (", SIGKILL)" if left else ")")


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "ended without recording a final state"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name} without recording a final state"
    return f"exited with code {code} without recording a final state"


def _close_dead_run(folder: RunFolder, status: dict[str, Any], how: str) -> str:
    """Record the end of a run whose process is gone without a final state; kill its
    server group if it is still alive. Returns the new state."""
    pid = status.get("pid")
    killed = kill_server_group(status)
    if folder.cancel_requested:
        state, reason = "cancelled", f"cancelled on request; run process {pid} {how}"
    else:
        state, reason = "interrupted", f"run process {pid} {how}; server log kept"
    if killed:
        reason += f"; {killed}"
    steps = [{**s, "outcome": "failed", "detail": f"interrupted: {how}"}
             if isinstance(s, dict) and s.get("outcome") == "running" else s
             for s in status.get("steps") or []]
    folder.update_status(state=state, reason=reason, steps=steps, finished_at=utc_now(),
                         progress=None)
    log.warning("run %s: %s", folder.run_id, reason)
    return state


@contextlib.contextmanager
def _folder_lock(folder: RunFolder) -> Iterator[None]:
    """Serialises queued-folder transitions (launch vs cancel) across threads and
    processes. flock belongs to the open file, so two threads exclude each other too."""
    with (folder.path / FOLDER_LOCK).open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def _folder(settings: Settings, run_id: str) -> RunFolder | None:
    if not _RUN_ID_RE.fullmatch(run_id) or ".." in run_id:
        return None
    folder = RunFolder(settings.runs_dir / run_id)
    return folder if (folder.path / "spec.json").is_file() else None


def _run_ids(settings: Settings) -> list[str]:
    try:
        return sorted(p.name for p in settings.runs_dir.iterdir()
                      if not p.name.startswith(".") and p.is_dir())
    except OSError:
        return []


def _status(folder: RunFolder) -> dict[str, Any]:
    try:
        st = folder.status()
    except StoreError:
        return {}
    return st if isinstance(st, dict) else {}


# --- recovery and cancel ----------------------------------------------------------------

def recover_runs(settings: Settings) -> list[str]:
    """After a portal (re)start: every folder left ``running`` whose run process is gone
    is marked ``interrupted`` (its server group killed if alive). Runs whose process is
    alive are left alone; queued folders stay queued. Returns the ids it changed."""
    changed = []
    for rid in _run_ids(settings):
        folder = RunFolder(settings.runs_dir / rid)
        st = _status(folder)
        if st.get("state") != "running" or st.get("executor") == "ray":
            continue  # a Ray run's process is on a Ray node: the worker's dispatcher owns it
        if _run_process(st.get("pid"), rid, st.get("started_at")) is not None:
            continue
        st = _status(folder)  # it may have written its final state just before exiting
        if st.get("state") != "running":
            continue
        try:
            _close_dead_run(folder, st, "is gone (portal restarted or process killed)")
        except StoreError as exc:
            log.error("run %s: cannot record its end: %s", rid, exc)
            continue
        changed.append(rid)
    return changed


def cancel(settings: Settings, run_id: str) -> str:
    """Cancel a queued or running run; return a one-line message for the user.

    Queued: ``cancelled`` at once (the worker re-reads the state under the folder lock
    right before launching, so it never starts it). Running: a ``CANCEL`` file plus
    SIGTERM to the run process, which stops its server and records ``cancelled``.
    """
    folder = _folder(settings, run_id)
    if folder is None:
        return f"no run {run_id}"
    with _folder_lock(folder):
        st = _status(folder)
        state = st.get("state")
        if state == "queued":
            # The CANCEL file too: a run process started by a racing launcher stops at once.
            folder.request_cancel()
            folder.update_status(state="cancelled", phase="done",
                                 reason="cancelled before it started", finished_at=utc_now())
            return f"{run_id} cancelled before it started"
        if state != "running":
            return f"{run_id} already ended ({state or 'unknown state'})"
        folder.request_cancel()
        if st.get("executor") == "ray":  # the worker's Ray dispatcher passes it on
            return (f"cancel requested for {run_id}: its Ray run on "
                    f"{st.get('node_ip') or 'a Ray node'} stops the server and records the "
                    "result")
        pid = st.get("pid")
        proc = _run_process(pid, run_id, st.get("started_at"))
        if proc is not None:
            with contextlib.suppress(psutil.Error):
                proc.send_signal(signal.SIGTERM)
            return (f"cancel requested for {run_id}: its run process {pid} stops the server "
                    "and records the result")
        st = _status(folder)
        if st.get("state") != "running":
            return f"{run_id} already ended ({st.get('state')})"
        _close_dead_run(folder, st, "was already gone")
        return f"{run_id} cancelled (its run process {pid} was already gone)"


# --- the worker -------------------------------------------------------------------------

@dataclass
class _Job:
    """A run process the worker watches: its own child (``proc``), or one it found
    running (``attached``: after a portal restart, or started from the CLI)."""

    run_id: str
    gpus: GpuSet
    pid: int
    proc: subprocess.Popen[bytes] | None = None
    attached: psutil.Process | None = None

    def exited(self) -> tuple[bool, int | None]:
        if self.proc is not None:
            code = self.proc.poll()  # reaps it: no zombie
            return code is not None, code
        assert self.attached is not None
        return not _live(self.attached), None

    def as_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "gpus": sorted(self.gpus, key=str), "pid": self.pid,
                "attached": self.proc is None}


class Worker:
    """Starts queued runs, one run per GPU set at a time. One per portal process.

    ``start()`` launches a daemon thread; ``stop()`` ends it without touching the runs
    (they live in their own sessions; a later worker re-attaches to them).
    """

    def __init__(self, settings: Settings, poll_interval_s: float = 1.0, *,
                 settle_s: float = 0.5, has_gpu: bool | None = None) -> None:
        """``settle_s``: a queued folder starts only once its status is that old, so a
        CLI run (which prepares its folder queued, then marks it running a few ms later
        in the same process) is never taken as a job."""
        self.settings = settings
        self.poll_interval_s = poll_interval_s
        self.settle_s = settle_s
        self._has_gpu = has_gpu
        self._lock = threading.Lock()  # guards everything snapshot() reads
        self._control = threading.Lock()  # serialises start/stop
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock_file: IO[str] | None = None
        self._active = False
        self._reason = "not started"
        self._last_error = ""
        self._jobs: dict[str, _Job] = {}
        self._queued: list[str] = []
        self._others: list[dict[str, Any]] = []  # passive: runs the active worker runs
        # Worker-thread only: folders known final, GPU sets, states seen last tick.
        self._final: set[str] = set()
        self._gpus: dict[str, GpuSet] = {}
        self._seen: dict[str, Any] = {}
        self._tick_error = ""
        self._execs: dict[str, str] = {}  # executor per queued folder (core/executors)
        self._remote: Any = None  # core.executors.ray_cluster.RayDispatcher, made on demand

    # --- public ---------------------------------------------------------------------
    def start(self) -> None:
        with self._control:
            if self._thread is not None and self._thread.is_alive():
                return
            self._stop.clear()
            self._take_lock()
            self._thread = threading.Thread(target=self._main, name="servelab-worker",
                                            daemon=True)
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
            if self._remote is not None:  # Ray runs keep running; a later worker re-attaches
                self._remote.close()
                self._remote = None

    def wake(self) -> None:
        """Look at the queue now rather than at the next poll (e.g. after ``submit``)."""
        self._wake.set()

    @property
    def active(self) -> bool:
        with self._lock:
            return self._active

    def snapshot(self) -> dict[str, Any]:
        """``active``, ``reason``, ``running`` (dicts with ``run_id``, ``gpus``, ``pid``,
        ``attached``), ``queued`` (ids in queue order), ``last_error``. Copies."""
        with self._lock:
            running = ([j.as_dict() for j in self._jobs.values()] if self._active
                       else [dict(d) for d in self._others])
            if self._active and self._remote is not None:
                running += self._remote.running()
            return {"active": self._active, "reason": self._reason,
                    "running": sorted(running, key=lambda d: d["run_id"]),
                    "queued": list(self._queued), "last_error": self._last_error,
                    "data_dir": str(self.settings.data_dir)}

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
                self._reason = (f"cannot open {path}: {exc.strerror or exc}; "
                                "fix the data folder's permissions or set SERVELAB_DATA_DIR")
            return False
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            with contextlib.suppress(OSError):
                f.seek(0)
                holder = f.read().strip()
            f.close()
            with self._lock:
                self._reason = (f"another ServeLab portal (pid {holder or '?'}) runs the queue "
                                f"for {self.settings.data_dir}; this one only shows it")
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
            self._wake.wait(self.poll_interval_s)
            self._wake.clear()

    def _tick(self) -> None:
        active = self.active
        changed = self._reap() if active else False
        settings = self.settings
        queued: list[str] = []
        ray_queued: list[str] = []  # waiting for Ray resources (core/executors/ray_cluster)
        others: list[dict[str, Any]] = []
        ids = _run_ids(settings)
        present = set(ids)
        self._final &= present  # forget deleted folders
        for cache in (self._seen, self._gpus, self._execs):
            for rid in [r for r in cache if r not in present and r not in self._jobs]:
                del cache[rid]
        for rid in ids:
            if rid in self._final or rid in self._jobs:
                continue
            folder = RunFolder(settings.runs_dir / rid)
            st = _status(folder)
            state = st.get("state")
            if state is None:
                continue  # being created, or unreadable
            if self._seen.get(rid) != state:
                self._seen[rid] = state
                changed = True
            if state in FINAL_STATES:
                self._final.add(rid)
                self._seen.pop(rid, None)
                self._gpus.pop(rid, None)
            elif self._runs_on_ray(folder, st):
                if state == "queued":
                    ray_queued.append(rid)
                if active:
                    changed |= self._ray().consider(folder, st)
                elif state == "running":  # the active worker's Ray run, for this one's view
                    others.append({"run_id": rid, "gpus": st.get("gpu_ids") or [], "pid": None,
                                   "attached": True, "executor": "ray",
                                   "node": st.get("node_ip")})
            elif state == "queued":
                queued.append(rid)
            elif state == "running":
                if active:
                    changed |= self._adopt(folder, st)
                else:
                    others.append({"run_id": rid, "gpus": sorted(self._gpu_set(folder) or (),
                                                                 key=str),
                                   "pid": st.get("pid"), "attached": True})
        if active:
            launched = self._schedule(queued)
            changed |= bool(launched)
            queued = [rid for rid in queued if rid not in launched and rid not in self._final]
        if active and self._remote is not None:
            changed |= self._remote.tick()
            self._tick_error = self._tick_error or self._remote.error
        queued = sorted(queued + ray_queued)
        with self._lock:
            self._queued = queued
            self._others = others
        if changed and active:
            self._sync_catalog()

    def _reap(self) -> bool:
        changed = False
        for job in list(self._jobs.values()):
            done, code = job.exited()
            if not done:
                continue
            with self._lock:
                del self._jobs[job.run_id]
            changed = True
            folder = RunFolder(self.settings.runs_dir / job.run_id)
            st = _status(folder)
            # Untouched if it recorded a final state, or if another process now owns it.
            if st.get("state") in ACTIVE_STATES and st.get("pid") in (None, job.pid):
                try:
                    _close_dead_run(folder, st, _describe_exit(code))
                except StoreError as exc:
                    log.error("run %s: cannot record its end: %s", job.run_id, exc)
        return changed

    def _adopt(self, folder: RunFolder, st: dict[str, Any]) -> bool:
        """A ``running`` folder this worker does not watch: watch its process, or record
        that it is gone. Returns True when the folder changed."""
        proc = _run_process(st.get("pid"), folder.run_id, st.get("started_at"))
        if proc is not None:
            gpus = self._gpu_set(folder) or frozenset({f"run:{folder.run_id}"})
            with self._lock:
                self._jobs[folder.run_id] = _Job(folder.run_id, gpus, proc.pid,
                                                 attached=proc)
            return False
        st = _status(folder)
        if st.get("state") != "running":
            return True
        try:
            _close_dead_run(folder, st, "is gone (portal restarted or process killed)")
        except StoreError as exc:
            log.error("run %s: cannot record its end: %s", folder.run_id, exc)
        return True

    def _runs_on_ray(self, folder: RunFolder, st: dict[str, Any]) -> bool:
        """Whether the Ray executor owns this active folder (core/executors)."""
        if st.get("executor") == "ray":
            return True
        if st.get("state") != "queued":
            return False
        ex = self._execs.get(folder.run_id)
        if ex is None:
            from core.executors import executor_for

            try:
                ex = executor_for(_spec_of(folder), self.settings)
            except Exception:
                return False  # unreadable: _schedule fails it
            self._execs[folder.run_id] = ex
        return ex == "ray"

    def _ray(self) -> Any:
        if self._remote is None:
            from core.executors.ray_cluster import RayDispatcher

            self._remote = RayDispatcher(self.settings)
        return self._remote

    def _gpu_set(self, folder: RunFolder) -> GpuSet | None:
        gpus = self._gpus.get(folder.run_id)
        if gpus is None:
            try:
                spec = _spec_of(folder)
            except Exception:
                return None
            if self._has_gpu is None:
                self._has_gpu = nvml_available()
            gpus = self._gpus[folder.run_id] = gpu_set(spec, self._has_gpu)
        return gpus

    def _schedule(self, queued: list[str]) -> list[str]:
        queue: list[tuple[str, GpuSet]] = []
        not_ready: set[str] = set()
        now = time.time()
        for rid in queued:
            folder = RunFolder(self.settings.runs_dir / rid)
            gpus = self._gpu_set(folder)
            if gpus is None:
                self._fail_unreadable(folder)
                continue
            with contextlib.suppress(OSError):
                if now - (folder.path / "status.json").stat().st_mtime < self.settle_s:
                    not_ready.add(rid)
            queue.append((rid, gpus))
        with self._lock:
            busy = {g for job in self._jobs.values() for g in job.gpus}
        launched = []
        gpus_of = dict(queue)
        for rid in plan_launches(queue, busy, not_ready):
            if self._launch(rid, gpus_of[rid]):
                launched.append(rid)
        return launched

    def _fail_unreadable(self, folder: RunFolder) -> None:
        try:
            _spec_of(folder)
            return  # readable after all (it was being written)
        except Exception as exc:
            problem = str(exc).splitlines()[0][:300]
        with _folder_lock(folder):
            if _status(folder).get("state") == "queued":
                folder.update_status(state="failed", phase="done", finished_at=utc_now(),
                                     reason=f"cannot read its spec.json: {problem}")
        self._final.add(folder.run_id)

    def _launch(self, rid: str, gpus: GpuSet) -> bool:
        """Start the run process of a queued folder; False when it is no longer queued."""
        folder = RunFolder(self.settings.runs_dir / rid)
        settings = self.settings
        with _folder_lock(folder):
            if _status(folder).get("state") != "queued":
                return False
            if folder.cancel_requested:
                folder.update_status(state="cancelled", phase="done", finished_at=utc_now(),
                                     reason="cancelled before it started")
                return False
            argv = [sys.executable, "-m", "core", "run", "--run-id", rid, "--quiet"]
            env = {**os.environ, "SERVELAB_DATA_DIR": str(settings.data_dir),
                   "SERVELAB_MODEL_ROOTS": os.pathsep.join(map(str, settings.model_roots)),
                   "SERVELAB_SGLANG_PYTHON": settings.sglang_python,
                   "SERVELAB_TRANSFORMERS_PYTHON": settings.transformers_python}
            try:
                with (folder.path / RUNNER_LOG).open("ab") as out:
                    out.write(f"# servelab worker {utc_now()}: {shlex.join(argv)}\n".encode())
                    out.flush()
                    proc = subprocess.Popen(argv, cwd=REPO_ROOT, env=env,
                                            stdin=subprocess.DEVNULL, stdout=out,
                                            stderr=subprocess.STDOUT, start_new_session=True)
            except OSError as exc:
                folder.update_status(state="failed", phase="done", finished_at=utc_now(),
                                     reason=f"could not start the run process: {exc}")
                return False
            with self._lock:
                self._jobs[rid] = _Job(rid, gpus, proc.pid, proc=proc)
            try:
                folder.update_status(state="running", phase="starting", pid=proc.pid,
                                     started_at=utc_now())
            except StoreError as exc:  # the run process writes its own status anyway
                log.error("run %s: cannot mark it running: %s", rid, exc)
        log.info("run %s started (pid %d, %s)", rid, proc.pid, sorted(gpus, key=str))
        return True

    def _sync_catalog(self) -> None:
        try:
            Catalog(self.settings.catalog_path, self.settings.runs_dir).sync()
        except StoreError as exc:
            log.warning("catalog sync failed: %s", exc)
            self._tick_error = f"catalog sync failed: {exc}"
