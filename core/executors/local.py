"""The local executor: each run is ``python -m core run --run-id ID`` on this host.

At most one run per GPU set at a time, in queue order per set (``gpu_set``,
``plan_launches``). The run process starts in its own session, so it survives a portal
restart; this executor reaps it, records a run whose process died without a final state as
``interrupted`` (and kills its server group), and re-attaches to a live one it finds
(``adopt``: a portal restart, or a CLI run).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import psutil

from core.config import RunSpec
from core.engines.registry import get_engine
from core.errors import StoreError
from core.executors.base import end_unfinished, run_argv, run_env
from core.run.gpu import nvml_available
from core.run.launcher import run_processes
from core.run_folder import RunFolder, RunStatus, epoch_s, utc_now
from core.settings import REPO_ROOT, Settings

__all__ = ["GpuSet", "LocalExecutor", "gpu_set", "kill_server_group", "plan_launches"]

log = logging.getLogger(__name__)

GpuSet = frozenset[int | str]
"""What a run occupies: GPU indexes, ``"cpu"``, or ``"endpoint:<url>"``."""

RUNNER_LOG = "runner.log"
SERVER_GRACE_S = 3.0
_CLOCK_SLACK_S = 2.0


def gpu_set(spec: RunSpec, has_gpu: bool | None = None) -> GpuSet:
    """What a run occupies while it runs. ``has_gpu`` defaults to NVML's answer."""
    server = spec.server
    if not get_engine(server.engine).launched:  # an endpoint: its URL, no GPU here
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


def plan_launches(
    queue: Sequence[tuple[str, GpuSet]],
    busy: Collection[int | str],
    not_ready: Collection[str] = (),
) -> list[str]:
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


# --- processes --------------------------------------------------------------------------


def _live(proc: psutil.Process) -> bool:
    try:
        return bool(proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def _run_process(pid: int | None, run_id: str, started_at: str | None) -> psutil.Process | None:
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
    started = epoch_s(started_at)
    if started is not None and created > started + _CLOCK_SLACK_S:
        return None
    if run_id in argv or ("--run-id" not in argv and started is not None):
        return proc
    return None


def kill_server_group(status: RunStatus, grace_s: float = SERVER_GRACE_S) -> str:
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
    pid = status.server_pid or 0
    run_id = status.run_id
    started = epoch_s(status.started_at)

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
    if run_id:
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


def _close_dead_run(folder: RunFolder, status: RunStatus, how: str) -> str:
    """Record the end of a run whose process is gone without a final state; kill its
    server group if it is still alive. Returns the new state."""
    killed = kill_server_group(status)
    ended = end_unfinished(
        folder,
        f"run process {status.pid} {how}",
        step_why=how,
        note="; server log kept",
        tail=f"; {killed}" if killed else "",
    )
    log.warning("run %s: %s", folder.run_id, ended.reason)
    return str(ended.state)


@dataclass
class _Job:
    """A run process this executor watches: its own child (``proc``), or one it found
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
        return {
            "run_id": self.run_id,
            "gpus": sorted(self.gpus, key=str),
            "pid": self.pid,
            "attached": self.proc is None,
        }


class LocalExecutor:
    """Runs queued folders as processes of this host, one run per GPU set at a time."""

    name: ClassVar[str] = "local"
    runs_here: ClassVar[bool] = True

    def __init__(
        self, settings: Settings, *, settle_s: float = 0.5, has_gpu: bool | None = None
    ) -> None:
        """``settle_s``: a queued folder starts only once its status is that old, so a
        CLI run (which prepares its folder queued, then marks it running a few ms later
        in the same process) is never taken as a job."""
        self.settings = settings
        self.settle_s = settle_s
        self._has_gpu = has_gpu
        self._lock = threading.Lock()  # guards _jobs (running() reads it from any thread)
        self._jobs: dict[str, _Job] = {}
        self._gpus: dict[str, GpuSet] = {}  # worker thread only
        self.error = ""

    # --- the protocol -----------------------------------------------------------------
    def admit(self, queued: Sequence[RunFolder]) -> tuple[list[str], bool]:
        queue: list[tuple[str, GpuSet]] = []
        not_ready: set[str] = set()
        ended: set[str] = set()
        now = time.time()
        for folder in queued:
            gpus = self._gpu_set(folder)
            if gpus is None:
                if self._fail_unreadable(folder):
                    ended.add(folder.run_id)
                continue
            with contextlib.suppress(OSError):
                if now - (folder.path / "status.json").stat().st_mtime < self.settle_s:
                    not_ready.add(folder.run_id)
            queue.append((folder.run_id, gpus))
        with self._lock:
            busy = {g for job in self._jobs.values() for g in job.gpus}
        gpus_of = dict(queue)
        with self._lock:  # forget the GPU sets of folders that left the queue unlaunched
            keep = {*gpus_of, *self._jobs}
        self._gpus = {rid: g for rid, g in self._gpus.items() if rid in keep}
        launched = [
            rid for rid in plan_launches(queue, busy, not_ready) if self._launch(rid, gpus_of[rid])
        ]
        waiting = [f.run_id for f in queued if f.run_id not in launched and f.run_id not in ended]
        return waiting, bool(launched or ended)

    def adopt(self, folder: RunFolder, status: RunStatus) -> bool:
        proc = _run_process(status.pid, folder.run_id, status.started_at)
        if proc is not None:
            gpus = self._gpu_set(folder) or frozenset({f"run:{folder.run_id}"})
            with self._lock:
                self._jobs[folder.run_id] = _Job(folder.run_id, gpus, proc.pid, attached=proc)
            return False
        status = folder.status_or_empty()
        if status.state != "running":
            return True
        try:
            _close_dead_run(folder, status, "is gone (portal restarted or process killed)")
        except StoreError as exc:
            log.error("run %s: cannot record its end: %s", folder.run_id, exc)
        return True

    def poll(self) -> bool:
        """Reap the run processes that ended; end those that recorded no final state."""
        changed = False
        with self._lock:
            jobs = list(self._jobs.values())
        for job in jobs:
            done, code = job.exited()
            if not done:
                continue
            with self._lock:
                del self._jobs[job.run_id]
            self._gpus.pop(job.run_id, None)
            changed = True
            folder = RunFolder(self.settings.runs_dir / job.run_id)
            status = folder.status_or_empty()
            # Untouched if it recorded a final state, or if another process now owns it.
            if status.active and status.pid in (None, job.pid):
                try:
                    _close_dead_run(folder, status, _describe_exit(code))
                except StoreError as exc:
                    log.error("run %s: cannot record its end: %s", job.run_id, exc)
        return changed

    def tracks(self, run_id: str) -> bool:
        with self._lock:
            return run_id in self._jobs

    def running(self) -> list[dict[str, Any]]:
        with self._lock:
            return [j.as_dict() for j in self._jobs.values()]

    def describe(self, folder: RunFolder, status: RunStatus) -> dict[str, Any]:
        return {
            "run_id": folder.run_id,
            "gpus": sorted(self._gpu_set(folder) or (), key=str),
            "pid": status.pid,
            "attached": True,
        }

    def close(self) -> None:
        """Nothing to give back: the run processes live in their own sessions."""

    @classmethod
    def cancel_running(cls, settings: Settings, folder: RunFolder, status: RunStatus) -> str:
        """SIGTERM to the run process, which stops its server and records ``cancelled``;
        a run whose process is already gone is ended here."""
        rid, pid = folder.run_id, status.pid
        proc = _run_process(pid, rid, status.started_at)
        if proc is not None:
            with contextlib.suppress(psutil.Error):
                proc.send_signal(signal.SIGTERM)
            return (
                f"cancel requested for {rid}: its run process {pid} stops the server "
                "and records the result"
            )
        status = folder.status_or_empty()
        if status.state != "running":
            return f"{rid} already ended ({status.state})"
        _close_dead_run(folder, status, "was already gone")
        return f"{rid} cancelled (its run process {pid} was already gone)"

    @classmethod
    def recover(cls, settings: Settings, folders: Sequence[RunFolder]) -> list[str]:
        changed = []
        for folder in folders:
            status = folder.status_or_empty()
            if status.state != "running":
                continue
            if _run_process(status.pid, folder.run_id, status.started_at) is not None:
                continue
            status = folder.status_or_empty()  # it may have written its end just before exiting
            if status.state != "running":
                continue
            try:
                _close_dead_run(folder, status, "is gone (portal restarted or process killed)")
            except StoreError as exc:
                log.error("run %s: cannot record its end: %s", folder.run_id, exc)
                continue
            changed.append(folder.run_id)
        return changed

    # --- steps --------------------------------------------------------------------------
    def _gpu_set(self, folder: RunFolder) -> GpuSet | None:
        gpus = self._gpus.get(folder.run_id)
        if gpus is None:
            try:
                spec = folder.spec()
            except Exception:
                return None
            if self._has_gpu is None:
                self._has_gpu = nvml_available()
            gpus = self._gpus[folder.run_id] = gpu_set(spec, self._has_gpu)
        return gpus

    def _fail_unreadable(self, folder: RunFolder) -> bool:
        """End a queued folder whose spec cannot be read; False when it can (it was being
        written) or is no longer queued."""
        try:
            folder.spec()
            return False
        except Exception as exc:
            problem = str(exc).splitlines()[0][:300]
        with folder.transition():
            if folder.status_or_empty().state != "queued":
                return False
            folder.end("failed", f"cannot read its spec.json: {problem}")
        return True

    def _launch(self, rid: str, gpus: GpuSet) -> bool:
        """Start the run process of a queued folder; False when it is no longer queued."""
        folder = RunFolder(self.settings.runs_dir / rid)
        with folder.transition():
            if folder.status_or_empty().state != "queued":
                return False
            if folder.cancel_requested:
                folder.end("cancelled", "cancelled before it started")
                return False
            argv = run_argv(rid)
            env = {**os.environ, **run_env(self.settings)}
            try:
                with (folder.path / RUNNER_LOG).open("ab") as out:
                    out.write(f"# servelab worker {utc_now()}: {shlex.join(argv)}\n".encode())
                    out.flush()
                    proc = subprocess.Popen(
                        argv,
                        cwd=REPO_ROOT,
                        env=env,
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
            except OSError as exc:
                folder.end("failed", f"could not start the run process: {exc}")
                return False
            with self._lock:
                self._jobs[rid] = _Job(rid, gpus, proc.pid, proc=proc)
            try:
                folder.update_status(
                    state="running", phase="starting", pid=proc.pid, started_at=utc_now()
                )
            except StoreError as exc:  # the run process writes its own status anyway
                log.error("run %s: cannot mark it running: %s", rid, exc)
        log.info("run %s started (pid %d, %s)", rid, proc.pid, sorted(gpus, key=str))
        return True
