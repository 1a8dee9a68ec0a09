"""The Ray executor (core/executors/ray.py, ray_node.py) on a real local Ray head.

The head is started once for this module with ``ray start --head`` (loopback, 2 declared
GPUs this machine does not have: Ray still hands out GPU ids and sets
CUDA_VISIBLE_DEVICES), and every process it started is killed by pid at the end. Runs are
real ``python -m core run`` processes on the Ray workers, against the fake SGLang server.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from core.config import BenchmarkPlan, Placement, Point, RunSpec, ServerConfig
from core.executors import executor_for, node_of
from core.executors.queue import cancel, recover_runs, submit
from core.executors.ray import num_gpus_for
from core.executors.ray_node import guard_argv
from core.executors.worker import Worker
from core.run.launcher import run_processes
from core.run_folder import FINAL_STATES, RunFolder
from core.settings import Settings
from core.store import Catalog
from tests.helpers import wait_for
from tests.test_jobs import gone, ts

ray = pytest.importorskip("ray")

RAY_BIN = Path(sys.executable).parent / "ray"


def _free_port() -> int:
    return _free_ports(1)[0]


def _free_ports(n: int) -> list[int]:
    """``n`` distinct free ports: each socket stays bound until all are chosen. One at a
    time, the kernel may hand the same just-released port out twice, and Ray's head then
    fails to start (seen in a fresh clone: the agent and metrics ports were one port)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(n)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]


def _cmdline(p: psutil.Process) -> str:
    try:
        return " ".join(p.cmdline())
    except psutil.Error:  # gone, or a zombie
        return ""


def _agent_ports(agent: int, metrics: int) -> list[str]:
    """A node's agent ports as ``ray start`` flags: their defaults are fixed, so two nodes on
    one machine, or another Ray on it, would clash (pass ports from ``_free_ports``)."""
    return ["--dashboard-agent-listen-port", str(agent), "--metrics-export-port", str(metrics)]


def _ray_processes(temp_dir: str, port: int) -> list[psutil.Process]:
    """Every process of the head we started: those naming its temp dir or GCS address,
    and all their descendants (workers and agents are renamed ``ray::...``)."""
    roots = []
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            argv = p.cmdline()
            if any(
                temp_dir in a or (a.startswith("--address=") and a.endswith(f":{port}"))
                for a in argv
            ):
                roots.append(p)
    found: dict[int, psutil.Process] = {}
    for r in roots:
        with contextlib.suppress(psutil.Error):
            found.update((c.pid, c) for c in [r, *r.children(recursive=True)])
    found.pop(os.getpid(), None)
    return list(found.values())


@contextlib.contextmanager
def _head() -> Iterator[tuple[str, str, int]]:
    """A Ray head of its own (address, temp dir, port); every process it started is
    killed by pid at the end."""
    temp_dir = tempfile.mkdtemp(prefix="srt", dir="/tmp")  # short: Ray's socket paths
    # every port of the head distinct, its agents' included
    port, dashboard_port, client_port, agent_port, metrics_port = _free_ports(5)
    argv = [
        str(RAY_BIN),
        "start",
        "--head",
        "--node-ip-address",
        "127.0.0.1",
        "--port",
        str(port),
        "--num-gpus",
        "2",
        "--num-cpus",
        "4",
        "--disable-usage-stats",
        "--include-dashboard",
        "false",
        "--dashboard-port",
        str(dashboard_port),
        "--ray-client-server-port",
        str(client_port),
        "--object-store-memory",
        str(100 * 2**20),
        "--temp-dir",
        temp_dir,
        *_agent_ports(agent_port, metrics_port),
    ]
    # Notice a dead node within seconds, not the default tens of seconds.
    env = {
        **os.environ,
        "RAY_health_check_period_ms": "1000",
        "RAY_health_check_failure_threshold": "8",
        "RAY_health_check_timeout_ms": "5000",
    }
    try:
        subprocess.run(
            argv,
            check=True,
            timeout=180,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
        )
        yield f"127.0.0.1:{port}", temp_dir, port
    finally:
        procs = _ray_processes(temp_dir, port)
        for p in procs:
            with contextlib.suppress(psutil.Error):
                p.kill()
        psutil.wait_procs(procs, timeout=10)
        shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def ray_head() -> Iterator[str]:
    with _head() as (address, _temp_dir, _port):
        yield address


class RayHarness:
    def __init__(self, settings: Settings, model: Path) -> None:
        self.settings = settings
        self.model = model
        self.workers: list[Worker] = []

    def spec(self, prompts: int = 2, tp: int = 1) -> RunSpec:
        return RunSpec(
            server=ServerConfig(engine="sglang", model=str(self.model), device="auto", tp_size=tp),
            plan=BenchmarkPlan(
                points=(Point(concurrency=1, num_prompts=prompts, input_len=8, output_len=4),),
                probe=None,
                warmup_requests=0,
            ),
            placement=Placement(executor="ray"),
        )

    def worker(self) -> Worker:
        w = Worker(self.settings, 0.1, settle_s=0.0, has_gpu=False)
        self.workers.append(w)
        w.start()
        return w

    def folder(self, rid: str) -> RunFolder:
        return RunFolder(self.settings.runs_dir / rid)

    def status(self, rid: str) -> dict[str, Any]:
        return self.folder(rid).status()

    def wait_final(self, ids: list[str], timeout: float = 180) -> None:
        try:
            wait_for(
                lambda: all(self.status(r).get("state") in FINAL_STATES for r in ids),
                timeout,
                f"{ids} to end",
            )
        except AssertionError as exc:
            states = {r: (self.status(r).get("state"), self.status(r).get("phase")) for r in ids}
            snaps = [w.snapshot() for w in self.workers]
            raise AssertionError(f"{exc}: {states}; workers: {snaps}") from None

    def close(self) -> None:
        for w in self.workers:
            w.stop()


@pytest.fixture
def rh(
    ray_head: str,
    settings: Settings,
    fake_sglang: Path,
    tiny_tokenizer_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[RayHarness]:
    monkeypatch.setenv("FAKE_SGLANG_TTFT_MS", "200")
    monkeypatch.setenv("FAKE_SGLANG_ITL_MS", "100")
    s = dataclasses.replace(
        settings,
        executor="local",
        ray_address=ray_head,
        ray_forward_env=("FAKE_SGLANG_TTFT_MS", "FAKE_SGLANG_ITL_MS"),
    )
    harness = RayHarness(s, tiny_tokenizer_dir)
    try:
        yield harness
    finally:
        harness.close()


# --- pure parts ----------------------------------------------------------------------------


def test_executor_choice_and_gpus(settings: Settings) -> None:
    spec = RunSpec(server=ServerConfig(engine="sglang", tp_size=4))
    assert executor_for(spec, settings) == "local"
    assert executor_for(spec, dataclasses.replace(settings, executor="ray")) == "ray"
    ray_spec = spec.model_copy(update={"placement": Placement(executor="ray")})
    assert executor_for(ray_spec, settings) == "ray"
    assert num_gpus_for(spec) == 4
    assert num_gpus_for(RunSpec(server=ServerConfig(engine="sglang", device="cpu"))) == 0
    assert (
        num_gpus_for(
            RunSpec(server=ServerConfig(engine="endpoint", endpoint_url="http://127.0.0.1:30000"))
        )
        == 0
    )
    # spec.json written before placement existed still loads, as local-or-setting
    old = RunSpec.model_validate({"server": {"engine": "sglang"}, "plan": {}})
    assert old.placement == Placement()


# --- on the cluster ------------------------------------------------------------------------


def test_runs_go_in_parallel_on_distinct_gpus_and_never_share_one(rh: RayHarness) -> None:
    ids = submit(rh.settings, [rh.spec(prompts=4) for _ in range(4)])  # 4 runs, 2 GPUs
    w = rh.worker()
    seen: list[list[dict[str, Any]]] = []

    def done() -> bool:
        seen.append(w.snapshot()["running"])
        return all(rh.status(r).get("state") in FINAL_STATES for r in ids)

    wait_for(done, 300, "4 Ray runs to end")
    sts = {r: rh.status(r) for r in ids}
    assert [s["state"] for s in sts.values()] == ["succeeded"] * 4, [
        s.get("reason") for s in sts.values()
    ]
    for rid, st in sts.items():
        assert st["executor"] == "ray" and st["node_ip"] and st["node_id"]
        assert len(st["gpu_ids"]) == 1 and st["gpu_ids"][0] in ("0", "1")
        assert "pid" not in st and st["remote_pid"]  # not a process of this host
        folder = rh.folder(rid)
        assert (folder.path / "points" / "000" / "records.parquet").is_file()
        assert "The server is fired up" in folder.log_path.read_text()
        assert (folder.path / "runner.log").is_file()
        facts = folder.read("facts.json")
        assert facts["node_ip"] == st["node_ip"] and facts["gpu_ids"] == st["gpu_ids"]
        assert node_of(folder.path)["gpu_ids"] == st["gpu_ids"]
    assert len({s["node_id"] for s in sts.values()}) == 1  # the one node of this cluster
    # At most two at once (two GPUs), and some two ran at the same time on distinct GPUs.
    assert max(len(r) for r in seen) <= 2
    spans = {
        r: (ts(s["started_at"]), ts(s["finished_at"]), s["gpu_ids"][0]) for r, s in sts.items()
    }
    overlapping = [
        (a, b)
        for a, b in itertools.combinations(ids, 2)
        if spans[a][0] < spans[b][1] and spans[b][0] < spans[a][1]
    ]
    assert overlapping, spans
    for a, b in overlapping:
        assert spans[a][2] != spans[b][2], f"{a} and {b} overlapped on GPU {spans[a][2]}"
    # The catalog follows the run folders (the worker indexes a fetched run after its
    # status is final): wait for it rather than race it.
    cat = Catalog(rh.settings.catalog_path, rh.settings.runs_dir)

    def indexed() -> bool:
        rows = {r["run_id"]: r for r in cat.list_runs()}
        return all(r in rows and rows[r]["state"] == "succeeded" for r in ids)

    wait_for(indexed, 60, "the catalog to list the 4 Ray runs as succeeded")
    wait_for(lambda: not w.snapshot()["running"], 60, "the dispatcher to forget the runs")
    assert recover_runs(rh.settings) == []


def test_killed_ray_worker_marks_the_run_and_frees_its_gpus(
    rh: RayHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_SGLANG_TTFT_MS", "500")
    monkeypatch.setenv("FAKE_SGLANG_ITL_MS", "500")
    w = rh.worker()
    (rid,) = submit(rh.settings, [rh.spec(prompts=6, tp=2)])  # both GPUs
    wait_for(lambda: rh.status(rid).get("phase") == "point 0", 180, "the run's benchmark")
    st = rh.status(rid)
    assert sorted(st["gpu_ids"]) == ["0", "1"]
    worker_pid, server_pid = st["ray_worker_pid"], st["remote_server_pid"]
    assert not gone(server_pid)
    os.kill(worker_pid, signal.SIGKILL)

    rh.wait_final([rid])
    st = rh.status(rid)
    assert st["state"] == "interrupted", st
    assert st["reason"].startswith("Ray worker died: "), st["reason"]
    assert "server log and results so far kept" in st["reason"]
    assert not any(s.get("outcome") == "running" for s in st["steps"])
    wait_for(lambda: gone(server_pid), 60, "the server to die with its run")
    folder = rh.folder(rid)
    assert "The server is fired up" in folder.log_path.read_text()  # nothing lost
    assert folder.read("spec.json") and (folder.path / "runner.log").is_file()
    # The folder is the truth; the worker indexes it into the catalog right after.
    cat = Catalog(rh.settings.catalog_path, rh.settings.runs_dir)
    wait_for(
        lambda: (cat.get_run(rid) or {}).get("state") == "interrupted",
        60,
        "the catalog to show the run interrupted",
    )
    # Its two GPUs are free again: a run that needs both runs.
    monkeypatch.setenv("FAKE_SGLANG_TTFT_MS", "20")
    monkeypatch.setenv("FAKE_SGLANG_ITL_MS", "5")
    (after,) = submit(rh.settings, [rh.spec(tp=2)])
    rh.wait_final([after])
    assert rh.status(after)["state"] == "succeeded", rh.status(after).get("reason")
    assert w.snapshot()["last_error"] == ""


def test_cancel_reaches_the_remote_run(rh: RayHarness, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_SGLANG_TTFT_MS", "500")
    monkeypatch.setenv("FAKE_SGLANG_ITL_MS", "500")
    w = rh.worker()
    slow, waiting = submit(rh.settings, [rh.spec(prompts=6, tp=2), rh.spec(tp=2)])
    wait_for(lambda: rh.status(slow).get("phase") == "point 0", 180, "the slow run's benchmark")
    assert rh.status(waiting)["state"] == "queued"  # no GPU left for it
    assert rh.status(waiting)["phase"] == "waiting for Ray resources"
    assert waiting in w.snapshot()["queued"]
    assert cancel(rh.settings, waiting) == f"{waiting} cancelled before it started"

    server_pid = rh.status(slow)["remote_server_pid"]
    assert not gone(server_pid)
    assert f"its Ray run on {rh.status(slow)['node_ip']}" in cancel(rh.settings, slow)
    rh.wait_final([slow])
    st = rh.status(slow)
    assert st["state"] == "cancelled", st
    wait_for(lambda: gone(server_pid), 60, "the remote server to stop")
    assert "Gracefully exiting" in rh.folder(slow).log_path.read_text()
    assert rh.status(waiting)["state"] == "cancelled"
    assert not (rh.folder(waiting).path / "runner.log").exists()  # it never ran
    wait_for(lambda: not w.snapshot()["running"], 60, "the dispatcher to forget the runs")


def test_core_imports_ray_lazily() -> None:
    """Nothing in core/ imports ray at module level; importing core never loads it."""
    import ast

    repo = Path(__file__).resolve().parent.parent
    for path in (repo / "core").rglob("*.py"):
        for node in ast.parse(path.read_text()).body:
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            assert not any(n == "ray" or n.startswith("ray.") for n in names), path
    code = (
        "import sys, core.cli, core.executors.worker, core.executors, core.executors.ray, "
        "core.executors.ray_node; sys.exit('ray' in sys.modules)"
    )
    assert subprocess.run([sys.executable, "-c", code], cwd=repo, timeout=120).returncode == 0


def test_a_restarted_worker_reattaches_and_impossible_requests_fail(
    rh: RayHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_SGLANG_TTFT_MS", "300")
    monkeypatch.setenv("FAKE_SGLANG_ITL_MS", "300")
    pinned = rh.spec().model_copy(
        update={"server": ServerConfig(engine="sglang", model=str(rh.model), device="cuda:1")}
    )
    rid, big, indexed = submit(rh.settings, [rh.spec(prompts=4), rh.spec(tp=4), pinned])
    w = rh.worker()
    wait_for(lambda: rh.status(rid).get("phase") == "point 0", 180, "the run's benchmark")
    w.stop()  # the portal goes away; its Ray run does not
    assert rh.status(rid)["state"] == "running"
    assert recover_runs(rh.settings) == []  # e.g. `python -m core runs`: a Ray run is left alone
    rh.worker()  # the next portal re-attaches to the run's actor by name
    rh.wait_final([rid, big, indexed])
    st = rh.status(rid)
    assert st["state"] == "succeeded", st.get("reason")
    assert (rh.folder(rid).path / "points" / "000" / "records.parquet").is_file()
    st = rh.status(big)
    assert st["state"] == "failed"
    assert "no node of the Ray cluster has 4 GPU(s) (the largest has 2)" in st["reason"]
    st = rh.status(indexed)
    assert st["state"] == "failed" and "on Ray, Ray chooses the GPUs" in st["reason"]


def test_cli_run_on_ray(rh: RayHarness) -> None:
    repo = Path(__file__).resolve().parent.parent
    env = {
        **os.environ,
        "SERVELAB_DATA_DIR": str(rh.settings.data_dir),
        "SERVELAB_SGLANG_PYTHON": sys.executable,
        "SERVELAB_RAY_ADDRESS": str(rh.settings.ray_address),
        "SERVELAB_RAY_FORWARD_ENV": "FAKE_SGLANG_TTFT_MS,FAKE_SGLANG_ITL_MS",
    }
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "core",
            "run",
            "--executor",
            "ray",
            "--engine",
            "sglang",
            "--model",
            str(rh.model),
            "--no-probe",
            "--warmup-requests",
            "0",
            "--concurrency",
            "1",
            "--num-prompts",
            "2",
            "--input-len",
            "8",
            "--output-len",
            "4",
            "--quiet",
        ],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (folder,) = [RunFolder(p) for p in rh.settings.runs_dir.iterdir()]
    st = folder.status()
    assert st["state"] == "succeeded" and st["executor"] == "ray" and len(st["gpu_ids"]) == 1
    assert folder.read("spec.json")["placement"]["executor"] == "ray"
    assert st["node_ip"] in proc.stdout  # the report says where it ran

    plan = rh.settings.data_dir.parent / "ab.json"
    plan.write_text(
        json.dumps(
            {
                "name": "graphs",
                "trials": 1,
                "base": {
                    "server": {"engine": "sglang", "model": str(rh.model)},
                    "plan": {
                        "points": [{"num_prompts": 2, "input_len": 8, "output_len": 4}],
                        "probe": None,
                        "warmup_requests": 0,
                    },
                },
                "arms": [
                    {"label": "on", "changes": {"server.cuda_graphs": True}},
                    {"label": "off", "changes": {"server.cuda_graphs": False}},
                ],
            }
        )
    )
    proc = subprocess.run(
        [sys.executable, "-m", "core", "experiment", str(plan), "--executor", "ray"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = [RunFolder(p) for p in rh.settings.runs_dir.iterdir() if p.name != folder.run_id]
    assert len(runs) == 2
    assert all(r.status()["state"] == "succeeded" and r.status()["executor"] == "ray" for r in runs)


def test_unreachable_cluster_is_reported_and_local_runs_go_on(
    settings: Settings, fake_sglang: Path, tiny_tokenizer_dir: Path
) -> None:
    from core.executors import save_ray_address

    s = settings  # the address set in the portal (data/ray-cluster.json); nobody there
    assert save_ray_address(s, f"127.0.0.1:{_free_port()}")
    h = RayHarness(s, tiny_tokenizer_dir)
    local = RunSpec(
        server=ServerConfig(engine="sglang", model=str(tiny_tokenizer_dir), device="cpu"),
        plan=BenchmarkPlan(
            points=(Point(num_prompts=2, input_len=8, output_len=4),), probe=None, warmup_requests=0
        ),
    )
    try:
        on_ray, here = submit(s, [h.spec(), local])
        w = h.worker()
        wait_for(
            lambda: "cannot connect" in w.snapshot()["last_error"],
            60,
            "the worker to report the unreachable cluster",
        )
        h.wait_final([here])  # the worker thread is not stuck connecting
        assert h.status(here)["state"] == "succeeded"
        assert h.status(on_ray)["state"] == "queued"
        assert on_ray in w.snapshot()["queued"]
        assert cancel(s, on_ray) == f"{on_ray} cancelled before it started"
        wait_for(lambda: not w.snapshot()["running"], 60, "the worker to reap the local run")
    finally:
        h.close()


def test_a_dead_node_marks_its_run_and_the_cluster_goes_on(
    rh: RayHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second node joins with one "H200"; a run asking for that accelerator lands there;
    the node dies (its raylet and everything under it SIGKILLed)."""
    name = f"servelab-test-{os.getpid()}"
    subprocess.run(
        [
            str(RAY_BIN),
            "start",
            "--address",
            str(rh.settings.ray_address),
            "--num-gpus",
            "1",
            "--num-cpus",
            "1",
            "--node-name",
            name,
            "--resources",
            '{"accelerator_type:H200": 1}',
            "--disable-usage-stats",
            "--object-store-memory",
            str(100 * 2**20),
            *_agent_ports(*_free_ports(2)),
        ],
        check=True,
        timeout=180,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    monkeypatch.setenv("FAKE_SGLANG_TTFT_MS", "500")
    monkeypatch.setenv("FAKE_SGLANG_ITL_MS", "500")
    w = rh.worker()
    spec = rh.spec(prompts=6)
    spec = spec.model_copy(update={"placement": Placement(executor="ray", accelerator_type="H200")})
    (rid,) = submit(rh.settings, [spec])
    wait_for(lambda: rh.status(rid).get("phase") == "point 0", 180, "the run's benchmark")
    st = rh.status(rid)
    wait_for(
        lambda: "The server is fired up" in rh.folder(rid).log_path.read_text(),
        60,
        "the server log's tail from the node",
    )
    node = next(n for n in ray.nodes() if n["NodeID"] == st["node_id"])
    assert node["NodeName"] == name and st["gpu_ids"] == ["0"]
    server_pid = st["remote_server_pid"]
    raylets = [p for p in psutil.process_iter() if f"--node-name={name}" in _cmdline(p)]
    assert len(raylets) == 1
    doomed = [raylets[0], *raylets[0].children(recursive=True)]
    for p in doomed:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(doomed, timeout=10)

    rh.wait_final([rid])
    st = rh.status(rid)
    assert st["state"] == "interrupted", st
    assert st["reason"].startswith("Ray worker died: The actor died because its node has died."), (
        st["reason"]
    )
    assert not any(s.get("outcome") == "running" for s in st["steps"])
    assert st["node_id"] == node["NodeID"] and rh.folder(rid).read("spec.json")
    log_text = rh.folder(rid).log_path.read_text()  # its node is gone; its log's tail is here
    assert "the last 8 KB of the server log on Ray node" in log_text
    assert "The server is fired up" in log_text
    wait_for(lambda: gone(server_pid), 60, "the server to die with its run")
    # The folder is the truth; the worker indexes it into the catalog right after.
    cat = Catalog(rh.settings.catalog_path, rh.settings.runs_dir)
    wait_for(
        lambda: (cat.get_run(rid) or {}).get("state") == "interrupted",
        60,
        "the catalog to show the run interrupted",
    )
    scratch = Path(rh.folder(rid).read("placement.json")["scratch"])
    assert scratch.name == rid  # left on the dead node (here: this machine's /tmp)
    shutil.rmtree(scratch.parents[2], ignore_errors=True)
    # The rest of the cluster goes on.
    monkeypatch.setenv("FAKE_SGLANG_TTFT_MS", "20")
    monkeypatch.setenv("FAKE_SGLANG_ITL_MS", "5")
    (after,) = submit(rh.settings, [rh.spec(tp=2)])
    rh.wait_final([after])
    assert rh.status(after)["state"] == "succeeded", rh.status(after).get("reason")
    assert w.snapshot()["last_error"] == ""


def test_cuda_graph_ab_arms_run_in_parallel_on_ray(
    rh: RayHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    from core.analysis.trials import experiment_runs
    from core.experiments.design import (
        load_experiment,
        parse_experiment,
    )
    from core.launch.queue import queue_experiment

    monkeypatch.setenv("FAKE_SGLANG_ITL_MS", "150")
    exp = parse_experiment(
        {
            "name": "graphs on Ray",
            "trials": 1,
            "base": rh.spec(prompts=4).model_dump(mode="json"),
            "arms": [
                {"label": "graphs-on", "changes": {"server.cuda_graphs": True}},
                {"label": "graphs-off", "changes": {"server.cuda_graphs": False}},
            ],
        }
    )
    exp_id = queue_experiment(rh.settings, exp)
    record = load_experiment(rh.settings, exp_id)
    assert record is not None
    ids = record.run_ids
    rh.worker()
    rh.wait_final(ids)
    sts = [rh.status(r) for r in ids]
    assert [s["state"] for s in sts] == ["succeeded"] * 2, [s.get("reason") for s in sts]
    (a, b) = sts
    assert a["gpu_ids"] != b["gpu_ids"]  # in parallel on different GPUs...
    assert ts(a["started_at"]) < ts(b["finished_at"])  # ...at the same time
    assert ts(b["started_at"]) < ts(a["finished_at"])
    runs = experiment_runs(rh.settings, record)
    assert sorted(r.arm for r in runs) == ["graphs-off", "graphs-on"]
    argv = {r.arm: " ".join(r.view.launch["argv"]) for r in runs}
    assert "--cuda-graph-backend-decode disabled" in argv["graphs-off"]
    assert "disabled" not in argv["graphs-on"]


def test_a_run_that_ended_while_nobody_watched_is_fetched_from_its_node(
    rh: RayHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The portal is down while the run ends, and its actor is gone when it comes back
    (here: its worker process killed; in life, the actor's wait for collection ran out):
    the folder is fetched from the node, and the run's own result stands."""
    from core.run_folder import read_json

    monkeypatch.setenv("FAKE_SGLANG_TTFT_MS", "300")
    monkeypatch.setenv("FAKE_SGLANG_ITL_MS", "300")
    (rid,) = submit(rh.settings, [rh.spec(prompts=3)])
    w = rh.worker()
    wait_for(lambda: rh.status(rid).get("phase") == "point 0", 180, "the run's benchmark")
    w.stop()
    st = rh.status(rid)
    scratch = Path(st["ray_scratch"])
    wait_for(
        lambda: (read_json(scratch / "status.json") or {}).get("state") == "succeeded",
        180,
        "the run to end on its node",
    )
    os.kill(st["ray_worker_pid"], signal.SIGKILL)
    wait_for(lambda: gone(st["ray_worker_pid"]), 60, "the actor's worker to die")
    rh.worker()
    rh.wait_final([rid])
    st = rh.status(rid)
    assert st["state"] == "succeeded", st
    assert "its folder was fetched from its node after" in st["ray_note"]
    assert (rh.folder(rid).path / "points" / "000" / "records.parquet").is_file()
    assert not scratch.exists()


def test_tearing_the_head_down_mid_run_ends_the_run_process_and_its_server(
    settings: Settings, fake_sglang: Path, tiny_tokenizer_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The leak once seen after a failed test: the cluster goes away under a running
    tp-2 run (its head's processes SIGKILLed, the actor's worker left to notice). The
    node side must not leave the run process or its server behind."""
    monkeypatch.setenv("FAKE_SGLANG_TTFT_MS", "500")
    monkeypatch.setenv("FAKE_SGLANG_ITL_MS", "500")
    with _head() as (address, temp_dir, port):
        s = dataclasses.replace(
            settings,
            ray_address=address,
            ray_forward_env=("FAKE_SGLANG_TTFT_MS", "FAKE_SGLANG_ITL_MS"),
        )
        harness = RayHarness(s, tiny_tokenizer_dir)
        try:
            harness.worker()
            (rid,) = submit(s, [harness.spec(prompts=50, tp=2)])
            wait_for(
                lambda: harness.status(rid).get("phase") == "point 0", 180, "the run's benchmark"
            )
            st = harness.status(rid)
            run_pid, worker_pid = st["remote_pid"], st["ray_worker_pid"]
            node_side = [psutil.Process(run_pid), *psutil.Process(run_pid).children(True)]
            assert run_processes(rid)  # the server, marked with the run id
            head = [
                p
                for p in _ray_processes(temp_dir, port)
                if p.pid != worker_pid and p not in node_side
            ]
            for p in head:
                with contextlib.suppress(psutil.Error):
                    p.kill()
            psutil.wait_procs(head, timeout=10)
            wait_for(
                lambda: all(gone(p.pid) for p in node_side) and not run_processes(rid),
                120,
                "the run process and its server to end with the cluster",
            )
        finally:
            harness.close()


# The actor's place taken by a plain process that is SIGKILLed: the guard sees it by its
# parent-death signal (which the guard sets itself) and by the change of its parent.
_PARENT = (
    "import os, subprocess, sys, time; "
    "p = subprocess.Popen([a.replace('PARENT', str(os.getpid())) for a in sys.argv[1:]]);"
    " time.sleep(600)"
)


@pytest.mark.parametrize(
    ("grace_s", "states"),
    [
        (45.0, ("cancelled",)),  # the run stops its server and records its end itself
        (0.0, ("running", "cancelled")),  # killed at once, with its server: nothing left behind
    ],
)
def test_the_guard_ends_the_run_and_its_server_when_its_actor_dies(
    settings: Settings,
    fake_sglang: Path,
    tiny_tokenizer_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    grace_s: float,
    states: tuple[str, ...],
) -> None:
    monkeypatch.setenv("FAKE_SGLANG_TTFT_MS", "500")
    monkeypatch.setenv("FAKE_SGLANG_ITL_MS", "500")
    monkeypatch.setenv("SERVELAB_DATA_DIR", str(settings.data_dir))
    monkeypatch.setenv("SERVELAB_SGLANG_PYTHON", sys.executable)
    spec = RayHarness(settings, tiny_tokenizer_dir).spec(prompts=50, tp=2)
    folder = RunFolder.prepare(
        settings.runs_dir, spec.model_copy(update={"placement": Placement()})
    )
    rid = folder.run_id
    argv = guard_argv(rid, 0, grace_s)
    argv[argv.index("0")] = "PARENT"
    repo = Path(__file__).resolve().parent.parent
    parent = subprocess.Popen([sys.executable, "-c", _PARENT, *argv], cwd=repo)
    try:
        wait_for(lambda: folder.status().get("phase") == "point 0", 180, "the run's benchmark")
        st = folder.status()
        run_pid, server_pid = st["pid"], st["server_pid"]
        guard_pid = psutil.Process(run_pid).ppid()
        assert psutil.Process(guard_pid).ppid() == parent.pid
        assert run_processes(rid)  # the server
        parent.kill()
        parent.wait(10)
        wait_for(
            lambda: (
                gone(run_pid) and gone(server_pid) and gone(guard_pid) and not run_processes(rid)
            ),
            120,
            "the run, its server and its guard to end",
        )
        assert folder.status()["state"] in states, folder.status()
    finally:
        with contextlib.suppress(OSError):
            parent.kill()
        parent.wait(10)
        for p in run_processes(rid):
            with contextlib.suppress(psutil.Error):
                p.kill()
