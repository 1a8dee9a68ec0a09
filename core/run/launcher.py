"""Start, watch and stop one server process tree.

The server runs in its own session (``start_new_session=True``) with stdout and
stderr merged into a log file, so the run process can kill the whole group and
a server that crashes leaves its log behind. Readiness = the process is alive
and the health URL answers 200. Stopping = SIGTERM to the group, a grace period,
SIGKILL to whatever is left (found through psutil as well as the group, since a
child may start its own session), then a check that nothing survived.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

import httpx
import psutil

from core.errors import ServerExitedError, ServerStartTimeout
from core.run_folder import STOP_GRACE_S, tail
from core.safety import redact_argv

__all__ = ["RUN_ID_ENV", "ManagedServer", "free_port", "last_error_line", "run_processes", "tail"]

# Every server process tree gets the run id in its environment (children inherit it),
# so its processes can be found even after they left the process group or lost their
# parent (core.executors.worker.kill_server_group, ManagedServer.stop, the fault tests).
RUN_ID_ENV = "SERVELAB_RUN_ID"


def run_processes(run_id: str) -> list[psutil.Process]:
    """Every live process (not a zombie) whose environment names this run."""
    found = []
    me = os.getpid()
    for proc in psutil.process_iter():
        if proc.pid == me:
            continue
        with contextlib.suppress(psutil.Error, OSError):
            if proc.environ().get(RUN_ID_ENV) == run_id and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
    return found


def free_port(host: str = "127.0.0.1") -> int:
    import socket

    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


_ERROR_LINE_RE = re.compile(
    r"(?i)(error|exception|errno|fatal|killed|out of memory|"
    r"address already in use|no such file|not found|denied)"
)


def last_error_line(log_text: str) -> str | None:
    """The last line of a log that says what went wrong (an exception's message, an
    argparse or bind error), for a one-line reason; None when no line does."""
    for line in reversed(log_text.splitlines()):
        line = line.strip()
        if not line or line.startswith(("Traceback", "File ", "^", "#")):
            continue
        if _ERROR_LINE_RE.search(line):
            return line[:300]
    return None


def _die_with_parent() -> None:
    """In the child, before exec: ask the kernel to SIGKILL it if the run process dies
    (even by SIGKILL), so a killed run never leaves a server holding a GPU. Runs before
    the run process starts any thread."""
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


class ManagedServer:
    """One server process tree, started from an argv list."""

    def __init__(
        self, argv: list[str], log_path: Path, health_url: str, env: dict[str, str] | None = None
    ) -> None:
        self.argv = argv
        self.log_path = log_path
        self.health_url = health_url
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._pids: set[int] = set()
        self.started_at: float | None = None
        self.ready_after_s: float | None = None
        self.killed_after_term = False  # stop() had to SIGKILL what SIGTERM left

    @property
    def command(self) -> str:
        """The command as shown and logged: secrets (``--api-key X``) redacted."""
        return shlex.join(redact_argv(self.argv))

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    @property
    def pids(self) -> frozenset[int]:
        """Every pid of the server's tree seen so far (the run's GPU check looks for them)."""
        return frozenset(self._pids)

    def start(self) -> None:
        if self.proc is not None:
            raise RuntimeError(f"server already started (pid {self.proc.pid})")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        self._log.write(f"# servelab: launching: {self.command}\n".encode())
        self._log.flush()
        self.started_at = time.monotonic()
        self.proc = subprocess.Popen(
            self.argv,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=self.env,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        self._pids.add(self.proc.pid)

    def poll(self) -> int | None:
        """The exit code, or None while the server process is alive."""
        return None if self.proc is None else self.proc.poll()

    def _remember_children(self) -> None:
        # Children can be reparented once their parent dies; remember them while we can.
        if self.proc is None:
            return
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(self.proc.pid).children(recursive=True):
                self._pids.add(child.pid)

    def wait_ready(
        self,
        timeout_s: float,
        should_stop: Callable[[], bool] = lambda: False,
        poll_interval_s: float = 0.25,
        failure_in_log: Callable[[str], str | None] = lambda _t: None,
    ) -> float:
        """Block until the health URL answers 200; return seconds since start."""
        assert self.proc is not None and self.started_at is not None
        deadline = self.started_at + timeout_s
        with httpx.Client(timeout=5.0) as client:
            while True:
                self._remember_children()
                code = self.proc.poll()
                if code is not None:
                    text = tail(self.log_path, 200)
                    line = last_error_line(text)
                    reason = failure_in_log(text) or "server exited during start-up" + (
                        f": {line}" if line else ""
                    )
                    raise ServerExitedError(code, tail(self.log_path), reason)
                if should_stop():
                    raise InterruptedError("stop requested while waiting for the server")
                try:
                    # 200 from the port is not enough: another program may hold it (ours
                    # then fails to bind and exits). Ready = our own tree listens there.
                    if client.get(self.health_url).status_code == 200 and self._listens():
                        self.ready_after_s = time.monotonic() - self.started_at
                        return self.ready_after_s
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise ServerStartTimeout(timeout_s, tail(self.log_path))
                time.sleep(poll_interval_s)

    def _listens(self) -> bool:
        """Whether a process of this server's tree listens on the health URL's port
        (True when the system does not say: then the health answer has to do)."""
        port = httpx.URL(self.health_url).port
        if port is None:
            return True
        for pid in list(self._pids):
            try:
                conns = psutil.Process(pid).net_connections(kind="inet")
            except psutil.AccessDenied:
                return True
            except psutil.Error:
                continue
            if any(
                c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port for c in conns
            ):
                return True
        return False

    def _alive(self) -> list[psutil.Process]:
        alive = []
        for pid in self._pids:
            with contextlib.suppress(psutil.Error):
                p = psutil.Process(pid)
                if p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(p)
        return alive

    def stop(self, grace_s: float = STOP_GRACE_S) -> list[int]:
        """Terminate the tree; return the pids that survived (empty when clean)."""
        if self.proc is None:
            return []
        self._remember_children()
        if marker := self.env.get(RUN_ID_ENV):  # children that left the group
            self._pids.update(p.pid for p in run_processes(marker))
        pgid = self.proc.pid  # start_new_session made the server its group leader
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            self.proc.poll()
            self._remember_children()
            if not self._alive():
                break
            time.sleep(0.1)
        left = self._alive()
        # what the stop step says: whether SIGKILL was ours (core.run_folder.stop_step)
        self.killed_after_term = bool(left)
        for p in left:
            with contextlib.suppress(psutil.Error):
                p.kill()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        psutil.wait_procs(self._alive(), timeout=5)
        if self._log:
            self._log.close()
            self._log = None
        return [p.pid for p in self._alive()]

    def __enter__(self) -> ManagedServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
