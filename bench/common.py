"""Shared helpers for the benchmarks in bench/: the fake SGLang server launched through
ServeLab's own launcher, machine facts, and result files (bench/out/, git-ignored)."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import psutil

from core.run.launcher import ManagedServer, free_port

REPO = Path(__file__).resolve().parent.parent
FAKE_SGLANG = REPO / "tests" / "fakes" / "sglang_pkg"
OUT = REPO / "bench" / "out"


def yardstick_s(repeats: int = 5) -> float:
    """Seconds one core takes for a fixed pure-Python workload, the fastest of ``repeats``:
    a host's speed in one number, recorded beside every figure (``machine``). The 2-core
    hosts this project is measured on have differed by 2-4x from one session to the next
    (docs/BENCHMARKS.md 8.4), so figures from two hosts compare only through it."""
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        sum(i * i % 7 for i in range(6_000_000))
        best = min(best, time.perf_counter() - t)
    return best


def machine() -> dict[str, Any]:
    cpu = "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "cores": os.cpu_count(),
        "cpu": cpu,
        "gpu": None,
        "python": platform.python_version(),
        "kernel": platform.release(),
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "yardstick_s": round(yardstick_s(), 3),
    }


class Fake(str):
    """The fake server's base URL, with its process for CPU accounting."""

    pid: int

    def cpu_s(self) -> float:
        """CPU seconds the server process has used so far (user + system)."""
        t = psutil.Process(self.pid).cpu_times()
        return float(t.user + t.system)


@contextlib.contextmanager
def fake_sglang(
    log: Path, ttft_ms: float, itl_ms: float, fault: str = "", cpus: str | None = None
) -> Iterator[Fake]:
    """The fake SGLang 0.5.23 (tests/fakes) with injected timing, started and stopped by
    core.run.launcher.ManagedServer; ``cpus`` pins it (``taskset -c``). Yields the base URL."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    old = os.environ.get("PYTHONPATH")
    env = {
        "FAKE_SGLANG_TTFT_MS": repr(ttft_ms),
        "FAKE_SGLANG_ITL_MS": repr(itl_ms),
        "FAKE_SGLANG_FAULT": fault,
        "FAKE_SGLANG_STARTUP_S": "0.2",
        "PYTHONPATH": os.pathsep.join([str(FAKE_SGLANG), str(REPO), *([old] if old else [])]),
    }
    argv = [
        sys.executable,
        "-m",
        "sglang.launch_server",
        "--model-path",
        "m",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    if cpus is not None:
        argv = ["taskset", "-c", cpus, *argv]
    srv = ManagedServer(argv, log, base + "/health", env)
    srv.start()
    try:
        srv.wait_ready(60)
        fake = Fake(base)
        fake.pid = srv.pid or 0  # taskset execs the server in place: the same pid
        yield fake
    finally:
        left = srv.stop()
        if left:
            raise RuntimeError(f"fake server processes survived: {left}")


@contextlib.contextmanager
def portal(
    repo: Path, env: dict[str, str], log_path: Path, start_timeout_s: float = 120.0
) -> Iterator[str]:
    """The portal (``repo``/serve.py: app.py behind its sign-in gate) as its own process
    group on a free loopback port, ready (health 200) before the URL is yielded; stopped
    with its group afterwards."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "streamlit",
                "run",
                "serve.py",  # app.py behind the sign-in gate, as ./servelab portal serves it
                "--server.address",
                "127.0.0.1",
                "--server.port",
                str(port),
                "--server.headless",
                "true",
                "--browser.gatherUsageStats",
                "false",
                "--server.fileWatcherType",
                "none",
            ],
            cwd=repo,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + start_timeout_s
            while proc.poll() is None:
                try:
                    if httpx.get(base + "/_stcore/health", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"portal not ready after {start_timeout_s:g} s: {log_path}")
                time.sleep(0.5)
            if proc.poll() is not None:
                raise RuntimeError(
                    f"portal exited {proc.returncode}: "
                    f"{log_path.read_text(errors='replace')[-3000:]}"
                )
            yield base
        finally:
            os.killpg(proc.pid, 15)
            proc.wait(20)


def save(name: str, data: Any) -> Path:
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / name
    path.write_text(json.dumps(data, indent=1, default=str))
    return path


def fmt(v: float | None, spec: str = ".2f") -> str:
    return "–" if v is None else format(v, spec)


def _busy_s() -> float:
    """CPU seconds all processes of this host have used (every core, /proc/stat)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    ticks = [int(x) for x in fields]
    idle = ticks[3] + ticks[4]  # idle + iowait
    return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")


class HostLoad:
    """CPU used by everything on the host during a measurement (the machine is shared:
    other people's tests on the same 2 cores distort timing). ``other_share`` is what was
    left after subtracting the CPU of the processes the benchmark accounts for."""

    def __enter__(self) -> HostLoad:
        self.t0, self.busy0 = time_mono(), _busy_s()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time_mono() - self.t0
        self.busy = _busy_s() - self.busy0

    def other_share(self, own_cpu_s: float) -> float:
        return max(0.0, (self.busy - own_cpu_s) / self.wall) if self.wall else 0.0


def time_mono() -> float:
    import time

    return time.monotonic()


def wait_quiet(
    max_other: float = 0.25,
    window_s: float = 2.0,
    timeout_s: float = 60.0,
) -> float:
    """Wait (bounded) until the host's CPU use over ``window_s`` is below ``max_other`` cores;
    return the last measured load (cores busy). Prints a note while it waits."""
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        b0 = _busy_s()
        time.sleep(window_s)
        load = (_busy_s() - b0) / window_s
        if load <= max_other or time.monotonic() > deadline:
            return load
        print(f"  (host busy: {load:.2f} cores in use by other processes; waiting)", flush=True)


def bench_serving_record(
    argv: list[str], out: Path, timeout_s: float
) -> tuple[dict[str, Any], str]:
    """One ``bench_serving`` invocation (an argv list, offline); its last JSONL record and
    its stdout. bench_serving writes ``Infinity`` for an unbounded rate, which JSON refuses."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run(
        argv, cwd=OUT, capture_output=True, text=True, timeout=timeout_s, env=env, check=False
    )
    if proc.returncode != 0 or not out.exists():
        raise RuntimeError(
            f"bench_serving failed ({proc.returncode}): {proc.stdout[-2000:]}{proc.stderr[-2000:]}"
        )
    rec = json.loads(out.read_text().splitlines()[-1].replace("Infinity", "1e999"))
    return rec, proc.stdout
