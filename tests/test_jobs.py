"""The queue and the worker together (core/executors/queue.py, core/executors/worker.py): real
run processes against the fake SGLang. The queue alone: tests/test_queue.py."""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil
import pytest

from core.config import BenchmarkPlan, Point, ProbeSpec, RunSpec, ServerConfig
from core.executors.local import gpu_set, plan_launches
from core.executors.queue import cancel, recover_runs, submit
from core.executors.worker import Worker
from core.run_folder import FINAL_STATES, RunFolder, utc_now
from core.settings import Settings
from core.store import Catalog
from tests.helpers import wait_for

REPO = Path(__file__).resolve().parent.parent


def ts(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def gone(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


def after_ticks(w: Worker, what: str, timeout: float = 30) -> None:
    """Return once ``w`` has looked at the queue and its runs at least once from start to
    end after this call (two ticks more: the one under way may have begun before)."""
    seen = w.ticks
    w.wake()
    wait_for(lambda: w.ticks >= seen + 2, timeout, what)


class Harness:
    """Settings, specs and the workers/processes a test starts; all stopped at teardown."""

    def __init__(self, settings: Settings, model: Path) -> None:
        self.settings = settings
        self.model = model
        self.workers: list[Worker] = []
        self.procs: list[subprocess.Popen[bytes]] = []

    def spec(self, prompts: int = 2, probe: bool = True) -> RunSpec:
        return RunSpec(
            server=ServerConfig(engine="sglang", model=str(self.model), device="cpu"),
            plan=BenchmarkPlan(
                points=(Point(concurrency=1, num_prompts=prompts, input_len=8, output_len=4),),
                probe=ProbeSpec() if probe else None,
                warmup_requests=None if probe else 0,
            ),
        )

    def worker(self, poll_interval_s: float = 0.1, start: bool = True) -> Worker:
        w = Worker(self.settings, poll_interval_s, settle_s=0.0, has_gpu=False)
        self.workers.append(w)
        if start:
            w.start()
        return w

    def popen(self, argv: list[str], **kw: Any) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(argv, **kw)
        self.procs.append(proc)
        return proc

    def sleeper(self) -> subprocess.Popen[bytes]:
        """A stand-in server: its own session, so it leads its own process group."""
        return self.popen(
            [sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True
        )

    def folder(self, rid: str) -> RunFolder:
        return RunFolder(self.settings.runs_dir / rid)

    def status(self, rid: str) -> dict[str, Any]:
        return self.folder(rid).status()

    def state(self, rid: str) -> str | None:
        return self.status(rid).get("state")

    def wait_final(self, ids: list[str], timeout: float = 120) -> None:
        wait_for(lambda: all(self.state(r) in FINAL_STATES for r in ids), timeout, f"{ids} to end")

    def close(self) -> None:
        for w in self.workers:
            w.stop()
        me = psutil.Process()
        for p in me.children(recursive=True):  # run processes stop their servers on SIGTERM
            try:
                if "core" in p.cmdline():
                    p.terminate()
            except psutil.Error:
                pass
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)
        psutil.wait_procs(me.children(), timeout=15)
        for p in me.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                p.kill()
        psutil.wait_procs(me.children(), timeout=5)


@pytest.fixture
def h(settings: Settings, fake_sglang: Path, tiny_tokenizer_dir: Path) -> Iterator[Harness]:
    harness = Harness(settings, tiny_tokenizer_dir)
    try:
        yield harness
    finally:
        harness.close()


# --- pure parts ----------------------------------------------------------------------------


def test_gpu_sets() -> None:
    def spec(**server: Any) -> RunSpec:
        return RunSpec(server=ServerConfig(**{"engine": "sglang", **server}))

    assert gpu_set(spec(device="cpu"), has_gpu=True) == {"cpu"}
    assert gpu_set(spec(device="auto", tp_size=2), has_gpu=False) == {"cpu"}
    assert gpu_set(spec(device="cuda:1"), has_gpu=True) == {1}
    assert gpu_set(spec(device="cuda", tp_size=2), has_gpu=True) == {0, 1}
    assert gpu_set(spec(device="auto", tp_size=4), has_gpu=True) == {0, 1, 2, 3}
    assert gpu_set(spec(engine="transformers", device="auto"), has_gpu=True) == {0}
    assert gpu_set(
        spec(engine="endpoint", endpoint_url="http://10.0.0.1:30000/"), has_gpu=True
    ) == {"endpoint:http://10.0.0.1:30000"}


def test_plan_launches_keeps_queue_order_per_set() -> None:
    q: list[tuple[str, frozenset[int | str]]] = [
        ("a", frozenset({0})),
        ("b", frozenset({0, 1})),
        ("c", frozenset({1})),
        ("d", frozenset({2})),
        ("e", frozenset({"cpu"})),
    ]
    # b waits for a; c must not jump ahead of b (they share GPU 1); d and e are free.
    assert plan_launches(q, busy=()) == ["a", "d", "e"]
    assert plan_launches(q, busy={2, "cpu"}) == ["a"]
    assert plan_launches(q, busy={0}) == ["d", "e"]  # a waits; b and c stay behind it
    assert plan_launches(q, busy=(), not_ready={"a"}) == ["d", "e"]


# --- whole runs ------------------------------------------------------------------------------


def test_queued_runs_run_one_at_a_time_in_order(h: Harness) -> None:
    w = h.worker()
    ids = submit(h.settings, [h.spec() for _ in range(4)])
    assert len(set(ids)) == 4 and ids == sorted(ids)
    w.wake()
    seen_running: list[list[dict[str, Any]]] = []

    def all_done() -> bool:
        seen_running.append(w.snapshot()["running"])
        return all(h.state(r) in FINAL_STATES for r in ids)

    wait_for(all_done, 240, "4 runs to end")
    wait_for(lambda: not w.snapshot()["running"], 30, "the worker to reap the last run")
    assert max(len(r) for r in seen_running) == 1
    assert {tuple(j["gpus"]) for r in seen_running for j in r} == {("cpu",)}
    sts = [h.status(r) for r in ids]
    assert [s["state"] for s in sts] == ["succeeded"] * 4, [s.get("reason") for s in sts]
    for a, b in itertools.pairwise(sts):  # started in order, never overlapped
        assert ts(a["started_at"]) < ts(a["finished_at"]) <= ts(b["started_at"])
    for rid in ids:
        assert (h.folder(rid).path / "runner.log").is_file()
    cat = Catalog(h.settings.catalog_path, h.settings.runs_dir)
    rows = {r["run_id"]: r for r in cat.list_runs()}
    assert [rows[r]["state"] for r in ids] == ["succeeded"] * 4
    snap = w.snapshot()
    assert snap["active"] and snap["queued"] == [] and snap["running"] == []


def test_concurrent_submits_and_cancels_lose_nothing(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first run the worker starts holds the host (one run at a time on "cpu") until it
    # is cancelled: its first token takes 20 s.
    monkeypatch.setenv("FAKE_SGLANG_TTFT_MS", "20000")
    barrier = threading.Barrier(4)
    per_thread: list[list[str]] = [[] for _ in range(4)]

    def submitter(i: int) -> None:
        barrier.wait()
        for _ in range(5):
            per_thread[i] += submit(h.settings, [h.spec()])

    threads = [threading.Thread(target=submitter, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ids = [r for ids in per_thread for r in ids]
    assert len(ids) == 20 and len(set(ids)) == 20
    assert all(chunk == sorted(chunk) for chunk in per_thread)  # this process's ids ascend
    assert sorted(p.name for p in h.settings.runs_dir.iterdir()) == sorted(ids)
    assert {h.state(r) for r in ids} == {"queued"}

    # The worker starts the first; then 4 threads cancel the other 19 while the worker looks
    # at the queue every 20 ms (none may start: the first holds the host), then the first.
    first, *queued = sorted(ids)
    w = h.worker(poll_interval_s=0.02)
    running = wait_for(lambda: w.snapshot()["running"], 30, "the worker to start the first run")
    assert [r["run_id"] for r in running] == [first]
    messages: list[str] = []

    def canceller(chunk: list[str]) -> None:
        for rid in chunk:
            messages.append(cancel(h.settings, rid))

    threads = [threading.Thread(target=canceller, args=(queued[i::4],)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(messages) == sorted(f"{rid} cancelled before it started" for rid in queued)
    assert "cancel requested" in cancel(h.settings, first)
    h.wait_final(ids, 120)
    wait_for(lambda: not w.snapshot()["running"], 30, "the worker to reap its runs")
    after_ticks(w, "the worker to look at the queue again")
    for rid in ids:
        st = h.status(rid)
        assert st["state"] == "cancelled", st
    for rid in queued:  # never started: no run process was launched for it
        st = h.status(rid)
        assert st["reason"] == "cancelled before it started", st
        assert "pid" not in st and not (h.folder(rid).path / "runner.log").exists()
    assert (h.folder(first).path / "runner.log").is_file()
    assert h.status(first)["reason"] != "cancelled before it started"
    assert w.snapshot()["queued"] == []


def test_cancel_queued_and_running(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_SGLANG_TTFT_MS", "500")
    monkeypatch.setenv("FAKE_SGLANG_ITL_MS", "500")
    w = h.worker()
    slow, later = submit(h.settings, [h.spec(prompts=4, probe=False), h.spec(probe=False)])
    w.wake()
    wait_for(lambda: h.status(slow).get("phase") == "point 0", 120, "the slow run's benchmark")
    assert w.snapshot()["queued"] == [later]

    msg = cancel(h.settings, later)
    assert msg == f"{later} cancelled before it started"
    st = h.status(later)
    assert st["state"] == "cancelled" and "pid" not in st

    server_pid = h.status(slow)["server_pid"]
    assert not gone(server_pid)
    assert "cancel requested" in cancel(h.settings, slow)
    h.wait_final([slow], 60)
    st = h.status(slow)
    assert st["state"] == "cancelled", st
    wait_for(lambda: gone(server_pid), 30, "the server to stop")
    wait_for(lambda: not w.snapshot()["running"], 30, "the worker to reap the run")
    after_ticks(w, "the worker to look at the queue again")
    assert h.state(later) == "cancelled"  # the cancelled job still never starts
    assert not (h.folder(later).path / "runner.log").exists()
    assert cancel(h.settings, slow) == f"{slow} already ended (cancelled)"
    assert cancel(h.settings, "no-such-run") == "no run no-such-run"
    assert cancel(h.settings, "../etc") == "no run ../etc"


def test_killed_run_process_is_marked_interrupted(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_SGLANG_TTFT_MS", "500")
    monkeypatch.setenv("FAKE_SGLANG_ITL_MS", "500")
    w = h.worker()
    (rid,) = submit(h.settings, [h.spec(prompts=4, probe=False)])
    w.wake()
    wait_for(lambda: h.status(rid).get("phase") == "point 0", 120, "the run's benchmark")
    st = h.status(rid)
    run_pid, server_pid = st["pid"], st["server_pid"]
    assert [j["pid"] for j in w.snapshot()["running"]] == [run_pid]
    # Freeze the run process, point server_pid at a stand-in server of ours (so the
    # worker's own group kill is checked too), then SIGKILL it. The real server must die
    # by PR_SET_PDEATHSIG; the stand-in by the worker.
    os.kill(run_pid, signal.SIGSTOP)
    stand_in = h.sleeper()
    h.folder(rid).update_status(server_pid=stand_in.pid)
    os.kill(run_pid, signal.SIGKILL)

    wait_for(lambda: h.state(rid) == "interrupted", 60, "the run to be marked interrupted")
    st = h.status(rid)
    assert f"run process {run_pid} was killed by SIGKILL" in st["reason"], st["reason"]
    assert f"server process group {stand_in.pid} killed" in st["reason"]
    assert st["finished_at"]
    assert not any(s["outcome"] == "running" for s in st["steps"])
    assert stand_in.wait(10) == -signal.SIGTERM
    wait_for(lambda: gone(server_pid), 30, "the real server to die with its run process")
    assert gone(run_pid)  # reaped by the worker
    folder = h.folder(rid)
    assert "The server is fired up" in folder.log_path.read_text()  # server log kept
    assert (folder.path / "runner.log").is_file()
    wait_for(lambda: not w.snapshot()["running"], 30, "the worker to forget the run")
    # The tick that forgot it indexes the catalog at its end: let it finish.
    after_ticks(w, "the worker's tick that ended the run to finish")
    row = Catalog(h.settings.catalog_path, h.settings.runs_dir).get_run(rid)
    assert row is not None and row["state"] == "interrupted"


def test_recover_runs(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    # A folder left running by a process that is gone, with its server still alive.
    dead = h.popen([sys.executable, "-c", "pass"])
    dead.wait(10)
    orphan = RunFolder.prepare(h.settings.runs_dir, h.spec())
    orphan.update_status(
        state="running",
        pid=dead.pid,
        started_at=utc_now(),
        steps=[{"step": "point 0", "outcome": "running"}],
    )
    stand_in = h.sleeper()
    orphan.update_status(server_pid=stand_in.pid)
    # A folder whose run process is alive: a real `python -m core run --run-id`, not ours.
    live = RunFolder.prepare(h.settings.runs_dir, h.spec(prompts=4))
    env = {
        **os.environ,
        "SERVELAB_DATA_DIR": str(h.settings.data_dir),
        "SERVELAB_SGLANG_PYTHON": sys.executable,
        "FAKE_SGLANG_TTFT_MS": "300",
    }
    runner = h.popen(
        [sys.executable, "-m", "core", "run", "--run-id", live.run_id, "--quiet"],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_for(lambda: live.status().get("pid") == runner.pid, 120, "the live run to start")

    assert recover_runs(h.settings) == [orphan.run_id]
    st = orphan.status()
    assert st["state"] == "interrupted"
    assert st["reason"].startswith(
        f"run process {dead.pid} is gone (portal restarted or process killed); server log kept"
    )
    assert st["steps"][0]["outcome"] == "failed"
    assert stand_in.wait(10) == -signal.SIGTERM
    assert live.status()["state"] == "running"
    assert recover_runs(h.settings) == []

    # A worker started now re-attaches to the live run; a queued run waits for it (one set).
    w = h.worker()
    (after,) = submit(h.settings, [h.spec()])
    w.wake()
    wait_for(lambda: w.snapshot()["running"], 30, "the worker to attach")
    assert w.snapshot()["running"] == [
        {"run_id": live.run_id, "gpus": ["cpu"], "pid": runner.pid, "attached": True}
    ]
    assert runner.wait(120) == 0
    h.wait_final([after])
    assert live.status()["state"] == "succeeded"
    assert h.state(after) == "succeeded"
    assert ts(h.status(after)["started_at"]) >= ts(live.status()["finished_at"])
    wait_for(lambda: not w.snapshot()["running"], 30, "the worker to reap its run")


def test_second_worker_on_the_same_data_dir_is_passive(h: Harness) -> None:
    first = h.worker(poll_interval_s=60)  # active, but looks at the queue only at start
    wait_for(lambda: first.ticks, 30, "the active worker's look at start")
    second = h.worker(poll_interval_s=0.05)
    assert first.snapshot()["active"] is True
    snap = second.snapshot()
    assert snap["active"] is False and "another ServeLab portal" in snap["reason"]
    assert str(os.getpid()) in snap["reason"]
    (rid,) = submit(h.settings, [h.spec()])
    wait_for(lambda: second.snapshot()["queued"] == [rid], 30, "the passive worker to see it")
    after_ticks(second, "the passive worker to look at the queue again")
    assert h.state(rid) == "queued"  # the passive worker launched nothing
    assert not (h.folder(rid).path / "runner.log").exists()
    # When the active one goes away, the passive one takes over the queue.
    first.stop()
    wait_for(lambda: second.snapshot()["active"], 30, "the second worker to take over")
    h.wait_final([rid])
    assert h.state(rid) == "succeeded"
    wait_for(lambda: not second.snapshot()["running"], 30, "the worker to reap the run")
