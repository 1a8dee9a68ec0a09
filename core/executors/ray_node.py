"""The node side of the Ray executor: code that runs inside a Ray worker process on the
node that Ray chose for a run (the portal side is ``core.executors.ray``).

``RunHost`` is the actor: it recreates the run folder in a scratch data folder, starts
the same run process as the local executor (``base.run_argv``) under a ``guard``, reports
status snapshots and returns the finished folder as a tar. ``salvage_folder`` is the task
that fetches what a dead actor left on its node.

The guard (``python -m core.executors.ray_node PARENT_PID RUN_ID``) is what makes the run
end with its actor, whichever way the actor goes (SIGKILL, a Ray ``_exit``, its node's
raylet torn down): it gets SIGTERM when the actor's thread dies (parent-death signal) and
also watches its parent's pid. Then it asks the run process to stop (SIGTERM: the run stops
its server and records its end), and after ``GUARD_GRACE_S`` it kills the run process's
group and every process carrying the run's ``SERVELAB_RUN_ID`` (its server tree), so no
run process or server outlives a dead actor even when it does not stop on its own.
"""

from __future__ import annotations

import contextlib
import io
import os
import platform
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from core.executors.base import run_argv
from core.run.launcher import run_processes
from core.run_folder import RunFolder, utc_now, write_json_atomic
from core.settings import cuda_visible_devices

__all__ = [
    "GUARD_GRACE_S",
    "LOG_TAIL_BYTES",
    "RunHost",
    "guard",
    "guard_argv",
    "pack_folder",
    "salvage_folder",
]

LOG_TAIL_BYTES = 8192  # of the server log, sent with each progress snapshot
UNCOLLECTED_TTL_S = 6 * 3600.0  # a finished run's actor waits this long to be collected
_SKIP = (".secrets.json", ".jobs.lock", "servelab.duckdb", "servelab.duckdb.lock")
# After the run process is told to stop (its actor died, or a cancel), how long it has to
# stop its server and record its end before the guard kills it and its server: the
# server's own stop grace (core/run/launcher.py, 10 s) plus room for a loaded host.
GUARD_GRACE_S = 45.0
_GUARD_POLL_S = 0.2


_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """SIGTERM to this process when its parent (the thread that started it) ends. Called
    by the process itself, at its start: never in a forked child before exec, where an
    import or a dlopen can deadlock on a lock another thread of the parent (a Ray worker
    has many) held at the fork. Linux only; elsewhere the parent-pid checks remain."""
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


# The run process's first step (``python -c`` this PARENT_PID ARGV...): it sets its own
# parent-death signal (SIGTERM when the guard ends), exits if the guard already ended (the
# signal would never come), then becomes the run process (exec: same pid, same
# environment). Plain ``-c`` code: nothing but the standard library to import.
_EXEC_DYING_WITH_PARENT = """\
import contextlib, ctypes, os, signal, sys
with contextlib.suppress(OSError, AttributeError):
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)
if os.getppid() != int(sys.argv[1]):
    sys.exit(f"servelab guard {sys.argv[1]} ended before its run process started")
os.execv(sys.argv[2], sys.argv[2:])
"""


def _dying_with_parent(argv: list[str]) -> list[str]:
    """``argv``, run so that it gets SIGTERM when this process ends (even by SIGKILL)."""
    return [sys.executable, "-c", _EXEC_DYING_WITH_PARENT, str(os.getpid()), *argv]


def guard_argv(run_id: str, parent_pid: int, grace_s: float = GUARD_GRACE_S) -> list[str]:
    """The guard of ``run_id``'s run process, for a parent (the actor) with this pid."""
    return [
        sys.executable,
        "-m",
        "core.executors.ray_node",
        str(parent_pid),
        run_id,
        f"{grace_s:g}",
    ]


def _kill_run(proc: subprocess.Popen[bytes], run_id: str) -> None:
    """SIGKILL the run process's group (it leads its own session) and its server tree."""
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    for p in run_processes(run_id):
        with contextlib.suppress(Exception):
            p.kill()


def guard(parent_pid: int, run_id: str, grace_s: float = GUARD_GRACE_S) -> int:
    """Run ``run_id``'s run process (``base.run_argv``) until it exits; its exit code.

    SIGTERM to the guard (a cancel, or its parent-death signal) is passed on to the run
    process; so is the death of ``parent_pid`` (seen as a new parent). Either way, a run
    process that has not exited ``grace_s`` later is killed with its server tree.
    """
    asked: list[bool] = []  # SIGTERM came (before or after the run process started)
    signal.signal(signal.SIGTERM, lambda _signum, _frame: asked.append(True))
    # SIGTERM when the actor's runner thread ends; had it ended already, the parent-pid
    # check below sees it.
    _die_with_parent()
    # The run process gets SIGTERM if the guard itself is killed.
    proc = subprocess.Popen(
        _dying_with_parent(run_argv(run_id)),
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    stop_at = 0.0  # when the run process was told to stop
    while proc.poll() is None:
        if not stop_at and (asked or os.getppid() != parent_pid):
            stop_at = time.monotonic()  # a cancel, or the actor is gone (whichever way)
            why = "SIGTERM" if asked else f"its actor (pid {parent_pid}) is gone"
            print(
                f"# servelab guard {utc_now()}: {why}: SIGTERM to run process {proc.pid}",
                file=sys.stderr,
                flush=True,
            )
            with contextlib.suppress(OSError):
                proc.send_signal(signal.SIGTERM)
        if stop_at and time.monotonic() - stop_at > grace_s:
            print(
                f"# servelab guard {utc_now()}: run process {proc.pid} still there "
                f"{grace_s:g} s later: killed with its server",
                file=sys.stderr,
                flush=True,
            )
            _kill_run(proc, run_id)
            break
        time.sleep(_GUARD_POLL_S)
    code = proc.wait()
    if stop_at and os.getppid() != parent_pid:
        _kill_run(proc, run_id)  # nobody is left to stop what the run process left behind
    return code


def pack_folder(folder: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for path in sorted(folder.rglob("*")):
            if path.name in _SKIP or path.name.startswith(".") or not path.is_file():
                continue
            tar.add(path, arcname=str(path.relative_to(folder)), recursive=False)
    return buf.getvalue()


def salvage_folder(scratch: str, wait_s: float = 15.0) -> bytes | None:
    """On the node of a dead actor: the run folder as a tar, once the run process (told to
    stop by its parent-death signal) has recorded its end, or after ``wait_s``."""
    folder = Path(scratch)
    if not (folder / "spec.json").is_file():
        return None
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if RunFolder(folder).status_or_empty().final:
            break
        time.sleep(0.2)
    data = pack_folder(folder)
    shutil.rmtree(folder.parent.parent.parent, ignore_errors=True)
    return data


class RunHost:
    """A Ray actor: one run on one node. Created with the GPUs the run needs."""

    def __init__(
        self, run_id: str, files: dict[str, bytes], env: dict[str, str], repo: str
    ) -> None:
        import ray

        self.run_id = run_id
        root = Path(tempfile.gettempdir()) / "servelab-ray" / f"{run_id}-{secrets.token_hex(3)}"
        self.data_dir = root / "data"
        self.folder = self.data_dir / "runs" / run_id
        (self.folder / "points").mkdir(parents=True)
        for name, data in files.items():
            path = self.folder / name
            path.write_bytes(data)
            if name.startswith("."):
                path.chmod(0o600)
        ctx = ray.get_runtime_context()
        gpu_ids = [str(g) for g in (ctx.get_accelerator_ids().get("GPU") or [])]
        self.placement: dict[str, Any] = {
            "executor": "ray",
            "node_ip": ray.util.get_node_ip_address(),  # type: ignore[no-untyped-call]
            "node_id": ctx.get_node_id(),
            "node_name": platform.node(),
            "gpu_ids": gpu_ids,
            "cuda_visible_devices": cuda_visible_devices(),
            "ray_worker_pid": os.getpid(),
            "scratch": str(self.folder),
        }
        write_json_atomic(self.folder / "placement.json", self.placement)
        self.env = {**os.environ, **env, "SERVELAB_DATA_DIR": str(self.data_dir)}
        self.repo = repo
        self.proc: subprocess.Popen[bytes] | None = None
        self.exit_code: int | None = None
        self.error = ""
        self.collected = False
        self.started = threading.Event()
        # The run process's guard is started by, and waited for in, a thread that lives
        # exactly as long as it: the parent-death signal follows the thread that forked.
        # Its own session: signals Ray sends to the worker's process group are not for it.
        threading.Thread(target=self._runner, daemon=True).start()
        self.started.wait(60)

    def _runner(self) -> None:
        argv = guard_argv(self.run_id, os.getpid())
        try:
            with (self.folder / "runner.log").open("ab") as out:
                out.write(
                    f"# servelab ray actor on {self.placement['node_ip']} "
                    f"gpus {self.placement['gpu_ids']} {utc_now()}: "
                    f"{shlex.join(argv)}\n".encode()
                )
                out.flush()
                self.proc = subprocess.Popen(
                    argv,
                    cwd=self.repo,
                    env=self.env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # the guard sets its parent-death signal itself
                )
        except OSError as exc:
            self.error = f"could not start the run process on {platform.node()}: {exc}"
            self.exit_code = -1
            self.started.set()
            return
        self.started.set()
        self.exit_code = self.proc.wait()
        # Nobody collects it (the portal is gone for good): free the GPUs after a while and
        # leave the folder on the node, where a returning portal still fetches it from.
        timer = threading.Timer(UNCOLLECTED_TTL_S, self._expire)
        timer.daemon = True
        timer.start()

    def _expire(self) -> None:
        if not self.collected:
            os._exit(0)

    def info(self) -> dict[str, Any]:
        return {**self.placement, "run_pid": self.proc.pid if self.proc else None}

    def poll(self) -> dict[str, Any]:
        status = RunFolder(self.folder).status_or_empty().as_json()  # {}: none yet
        log_tail = ""
        with contextlib.suppress(OSError), (self.folder / "server.log").open("rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - LOG_TAIL_BYTES))
            log_tail = f.read().decode(errors="replace")
        return {
            "status": status,
            "exit_code": self.exit_code,
            "error": self.error,
            "log_tail": log_tail,
        }

    def cancel(self) -> str:
        with contextlib.suppress(OSError):
            (self.folder / "CANCEL").write_text(utc_now())
        if self.proc is not None and self.exit_code is None:
            with contextlib.suppress(OSError):
                self.proc.send_signal(signal.SIGTERM)
            return "SIGTERM sent to the run process (through its guard)"
        return "the run process had already ended"

    def collect(self) -> bytes:
        """The finished folder as a gzip tar (the scratch folder stays until ``cleanup``:
        a portal that dies before unpacking it can collect it again)."""
        if self.proc is not None:
            self.proc.wait()
        self.collected = True
        return pack_folder(self.folder)

    def cleanup(self) -> None:
        shutil.rmtree(self.data_dir.parent, ignore_errors=True)


if __name__ == "__main__":  # the guard, started by RunHost
    sys.exit(guard(int(sys.argv[1]), sys.argv[2], float(sys.argv[3])))
