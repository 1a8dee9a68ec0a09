"""The launcher against the fake SGLang started exactly like the real one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

from core.errors import ServerExitedError, ServerStartTimeout
from core.run.launcher import ManagedServer, free_port


def _argv(port: int, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "sglang.launch_server",
        "--model-path",
        "fake-model",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *extra,
    ]


def test_ready_then_stop_kills_the_whole_tree(
    fake_sglang: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_SGLANG_SPAWN_CHILD", "1")
    # /health answers 503 until the fake's warmup ends, this long after it started.
    monkeypatch.setenv("FAKE_SGLANG_STARTUP_S", "1.5")
    port = free_port()
    health = f"http://127.0.0.1:{port}/health"
    server = ManagedServer(_argv(port), tmp_path / "server.log", health)
    server.start()
    try:
        ready_s = server.wait_ready(60)
        # Ready means healthy, not merely listening: never before the warmup's end, and
        # recorded for the run's facts.
        assert ready_s >= 1.5 and server.ready_after_s == ready_s
        assert httpx.get(health, timeout=10).status_code == 200
        tree = [server.pid, *(c.pid for c in psutil.Process(server.pid).children(True))]
        assert len(tree) >= 2  # the fake's scheduler-like child
    finally:
        survivors = server.stop()
    assert survivors == []
    assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != "zombie" for p in tree)
    log = (tmp_path / "server.log").read_text()
    assert "launching:" in log and "The server is fired up" in log


def test_bad_flag_exits_with_code_2_and_the_log_says_why(fake_sglang: Path, tmp_path: Path) -> None:
    port = free_port()
    server = ManagedServer(
        _argv(port, "--cuda-graph-max-bs", "8"),
        tmp_path / "s.log",
        f"http://127.0.0.1:{port}/health",
    )
    server.start()
    with pytest.raises(ServerExitedError) as info:
        server.wait_ready(30)
    server.stop()
    assert info.value.exit_code == 2
    assert "ambiguous option: --cuda-graph-max-bs" in info.value.log_tail


def test_never_ready_times_out_and_leaves_nothing(
    fake_sglang: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_SGLANG_FAULT", "never_ready")
    port = free_port()
    server = ManagedServer(_argv(port), tmp_path / "s.log", f"http://127.0.0.1:{port}/health")
    server.start()
    with pytest.raises(ServerStartTimeout):
        server.wait_ready(2.0)
    assert server.stop() == []


def test_server_dies_when_the_run_process_is_killed(fake_sglang: Path, tmp_path: Path) -> None:
    """SIGKILL of the process that launched the server must not leave the server behind."""
    port = free_port()
    code = (
        "import sys, time; from pathlib import Path; from core.run.launcher import ManagedServer;"
        f"s = ManagedServer({_argv(port)!r}, Path(sys.argv[1]), 'http://127.0.0.1:{port}/health');"
        "s.start(); s.wait_ready(30); print(s.pid, flush=True); time.sleep(600)"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", code, str(tmp_path / "s.log")],
        stdout=subprocess.PIPE,
        text=True,
        env=os.environ.copy(),
    )
    try:
        line = parent.stdout.readline() if parent.stdout else ""
        server_pid = int(line)
        assert psutil.pid_exists(server_pid)
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 10
        while psutil.pid_exists(server_pid) and time.monotonic() < deadline:
            if psutil.Process(server_pid).status() == psutil.STATUS_ZOMBIE:
                break
            time.sleep(0.1)
        gone = (
            not psutil.pid_exists(server_pid)
            or psutil.Process(server_pid).status() == psutil.STATUS_ZOMBIE
        )
        assert gone, "the server outlived the process that launched it"
    finally:
        parent.kill()
        parent.wait()
        if parent.stdout is not None:
            parent.stdout.close()


def test_stop_says_whether_sigkill_was_needed(tmp_path: Path) -> None:
    """What the run's stop step reports (core.run_folder.stop_step): a server that ignores
    SIGTERM is killed after the grace; one that exits on SIGTERM is not."""
    stubborn = ManagedServer(
        [
            sys.executable,
            "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('handler' + 'set', flush=True); time.sleep(120)",
        ],
        tmp_path / "stubborn.log",
        "http://127.0.0.1:9/health",
    )
    stubborn.start()
    deadline = time.monotonic() + 60
    # the log's first line is the command, so the marker is built at run time
    while "handlerset" not in (tmp_path / "stubborn.log").read_text():
        assert time.monotonic() < deadline, "the stubborn server never started"
        time.sleep(0.05)
    assert stubborn.stop(grace_s=0.5) == []
    assert stubborn.killed_after_term and stubborn.poll() == -signal.SIGKILL
    polite = ManagedServer(
        [sys.executable, "-c", "import time; time.sleep(120)"],
        tmp_path / "polite.log",
        "http://127.0.0.1:9/health",
    )
    polite.start()
    assert polite.stop(grace_s=5.0) == []
    assert not polite.killed_after_term and polite.poll() == -signal.SIGTERM
