"""What this host or the chosen executor can run (core/launch/host.py): THE check asked
before anything is queued, with the host as data (what detection and NVML would report)."""

from __future__ import annotations

import dataclasses

import pytest

from core.config import RunSpec
from core.engines import EngineInfo
from core.errors import ConfigError
from core.executors.base import save_ray_nodes
from core.launch.host import HostInfo, launch_host
from core.launch.preflight import preflight
from core.launch.queue import queue_launch
from core.settings import Settings

NO_SGLANG = EngineInfo("sglang", False, reason="SGLang is not installed for python")
SGLANG = EngineInfo("sglang", True, version="0.5.5")
TRANSFORMERS = EngineInfo("transformers", True, version="4.57")
CPU_HOST = HostInfo(gpus=(), engines={"sglang": NO_SGLANG, "transformers": TRANSFORMERS})
GPU_HOST = HostInfo(gpus=("0: NVIDIA H200",), engines={"sglang": SGLANG}, gpus_per_node=1)


def _spec(**server: object) -> RunSpec:
    return RunSpec.model_validate({"server": {"model": "/models/m", **server}})


def test_sglang_on_a_gpu_index_is_refused_on_a_cpu_host_naming_what_is_missing() -> None:
    problems = CPU_HOST.cannot_run(_spec(engine="sglang", device="cuda:0"))
    assert set(problems) == {"server.engine", "server.device"}
    assert "SGLang is not installed on this host" in problems["server.engine"]
    assert "Ray executor with a GPU node" in problems["server.engine"]
    assert "requirements-sglang.txt" in problems["server.engine"]
    assert problems["server.device"].startswith("server.device cuda:0 needs a GPU")
    assert "this host has none" in problems["server.device"]


def test_what_a_host_has_passes_and_what_it_lacks_is_said(settings: Settings) -> None:
    assert GPU_HOST.cannot_run(_spec(engine="sglang", device="cuda:0")) == {}
    assert CPU_HOST.cannot_run(_spec(engine="transformers", device="cpu")) == {}
    # auto may be SGLang's CPU backend: only the engine is missing
    assert set(CPU_HOST.cannot_run(_spec(engine="sglang"))) == {"server.engine"}
    (why,) = GPU_HOST.cannot_run(_spec(engine="sglang", tp_size=4)).values()
    assert "needs 4 GPUs on one node and this host has at most 1" in why
    # the gate (core/launch/preflight.py) asks it of every spec of a launch
    specs = [_spec(engine="transformers"), _spec(engine="sglang", device="cuda")]
    found = {p.field: p for p in preflight(specs, CPU_HOST, settings)}
    assert {"server.engine", "server.device"} <= set(found)
    device = found["server.device"]  # the host's words, split into what is wrong and the fix
    assert CPU_HOST.cannot_run(specs[1])["server.device"] == f"{device.message}: {device.fix}"
    assert device.fix.startswith("run it on the Ray executor")


def test_ray_is_checked_against_what_the_cluster_reported(settings: Settings) -> None:
    spec = _spec(engine="sglang", tp_size=2)
    settings = dataclasses.replace(settings, ray_address="10.0.0.5:6379")
    # before the worker has connected: nothing is refused here (the dispatcher still is)
    assert launch_host(settings, CPU_HOST, "ray").cannot_run(spec) == {}
    nodes = [
        {"Alive": True, "Resources": {"CPU": 16.0, "GPU": 1.0}},
        {"Alive": False, "Resources": {"GPU": 8.0}},  # a dead node places nothing
        {"Alive": True, "Resources": {"CPU": 8.0}},
    ]
    save_ray_nodes(settings, "10.0.0.5:6379", nodes)
    cluster = launch_host(settings, CPU_HOST, "ray")
    (why,) = cluster.cannot_run(spec).values()
    assert "the Ray cluster 10.0.0.5:6379 has at most 1" in why
    save_ray_nodes(settings, "10.0.0.5:6379", [{"Alive": True, "Resources": {"CPU": 4.0}}])
    (why,) = launch_host(settings, CPU_HOST, "ray").cannot_run(spec).values()
    assert "the Ray cluster 10.0.0.5:6379 has none" in why
    # a report of another cluster says nothing about this one
    save_ray_nodes(settings, "10.0.0.9:6379", [{"Alive": True, "Resources": {}}])
    assert launch_host(settings, CPU_HOST, "ray").cannot_run(spec) == {}


def test_a_refused_launch_queues_nothing(settings: Settings) -> None:
    with pytest.raises(ConfigError) as info:
        queue_launch(settings, [_spec(engine="sglang", device="cuda:0")], host=CPU_HOST)
    assert info.value.field == "server.engine"
    assert not settings.runs_dir.is_dir() or not any(settings.runs_dir.iterdir())
