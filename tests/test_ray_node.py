"""The Ray node side's process plumbing (core/executors/ray_node.py) that needs no Ray: how
the guard and the run process get their parent-death signal without a ``preexec_fn`` (a
forked child of the multi-threaded Ray worker must not import or dlopen before exec)."""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from core.executors import ray_node
from tests.helpers import wait_for

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's")

# Prints its pid and its parent-death signal (prctl PR_GET_PDEATHSIG).
_SHOW = (
    "import ctypes, os; v = ctypes.c_int(-1); "
    "ctypes.CDLL('libc.so.6', use_errno=True).prctl(2, ctypes.byref(v)); "
    "print(os.getpid(), v.value)"
)


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_no_preexec_fn_starts_a_process() -> None:
    tree = ast.parse((REPO / "core" / "executors" / "ray_node.py").read_text())
    assert not [k for k in ast.walk(tree) if isinstance(k, ast.keyword) and k.arg == "preexec_fn"]


def test_the_run_process_sets_its_own_parent_death_signal_then_execs() -> None:
    proc = subprocess.Popen(
        ray_node._dying_with_parent([sys.executable, "-c", _SHOW]),
        stdout=subprocess.PIPE,
        text=True,
    )
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0
    pid, sig = map(int, out.split())
    assert sig == signal.SIGTERM
    assert pid == proc.pid  # exec, not a child: the pid the guard holds is the run's own


def test_the_run_process_never_starts_when_its_guard_already_ended() -> None:
    argv = ray_node._dying_with_parent([sys.executable, "-c", "print('ran')"])
    argv[3] = "1"  # a parent that is not ours: as if the guard had ended (reparented)
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and proc.stdout == ""
    assert "servelab guard 1 ended before its run process started" in proc.stderr


def test_the_guard_sets_its_own_parent_death_signal() -> None:
    code = f"from core.executors.ray_node import _die_with_parent; _die_with_parent(); {_SHOW}"
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout.split()[1]) == signal.SIGTERM


def test_the_run_process_ends_when_its_guard_is_killed() -> None:
    # The guard's place taken by a process that starts a sleeper the way the guard starts
    # the run process, says its pid, and is then SIGKILLed.
    code = (
        "import subprocess, sys, time; from core.executors.ray_node import _dying_with_parent; "
        "p = subprocess.Popen(_dying_with_parent([sys.executable, '-c', "
        "'import time; time.sleep(600)'])); print(p.pid, flush=True); time.sleep(600)"
    )
    guard = subprocess.Popen(
        [sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    child = 0
    try:
        assert guard.stdout is not None
        child = int(guard.stdout.readline())
        wait_for(
            lambda: (
                "time.sleep(600)" in " ".join(psutil.Process(child).cmdline())
                and "execv" not in " ".join(psutil.Process(child).cmdline())
            ),
            60,
            "the sleeper to be exec'd",
        )
        assert not _gone(child)
        guard.kill()
        guard.wait(10)
        wait_for(lambda: _gone(child), 10, "the sleeper to get SIGTERM when its parent died")
    finally:
        guard.kill()
        guard.wait(10)
        if guard.stdout is not None:
            guard.stdout.close()
        if child and not _gone(child):
            os.kill(child, signal.SIGKILL)
