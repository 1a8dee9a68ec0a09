"""The portal and the executors: the active executor is shown, the Launch form can send
runs to Ray when a cluster is configured, and the Runs/Run pages say which node ran a run.
No Ray needed: the worker is off, and the Ray run folder is written as a finished one."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import get_args

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from core.config import Placement, RunSpec, ServerConfig
from core.errors import ConfigError
from core.executors import (
    EXECUTORS,
    executor_for,
    executor_summary,
    node_line,
    run_nodes,
    with_executor,
)
from core.executors.registry import executor_class
from core.executors.worker import Worker
from core.run.pipeline import prepare_run
from core.run_folder import RunStatus, utc_now
from core.settings import Settings

REPO = Path(__file__).resolve().parent.parent


def test_an_unknown_executor_is_an_error_at_start_up(settings: Settings) -> None:
    bad = dataclasses.replace(settings, executor="slurm")
    with pytest.raises(ConfigError) as err:
        Worker(bad)
    assert err.value.field == "SERVELAB_EXECUTOR"
    assert "'slurm'" in err.value.message and "local, ray" in err.value.message
    with pytest.raises(ConfigError, match="SERVELAB_EXECUTOR"):
        executor_for(RunSpec(), bad)
    # Every name a spec may carry has an executor, and only those.
    assert get_args(get_args(Placement.model_fields["executor"].annotation)[0]) == EXECUTORS
    assert [executor_class(n).name for n in EXECUTORS] == list(EXECUTORS)


def test_executor_helpers(settings: Settings) -> None:
    assert executor_summary(settings) == "executor: local"
    ray_settings = Settings(
        settings.data_dir, sys.executable, sys.executable, executor="ray", ray_address=None
    )
    assert "set SERVELAB_RAY_ADDRESS" in executor_summary(ray_settings)
    spec = with_executor(RunSpec(), "ray")
    assert spec.placement.executor == "ray"
    assert RunSpec.model_validate(json.loads(spec.model_dump_json())) == spec
    with pytest.raises(ValueError):
        with_executor(spec, "slurm")
    assert node_line(RunStatus(executor="ray")) == "Ray: waiting for a node with free GPUs"
    assert node_line(RunStatus(state="running")) == ""
    assert run_nodes(
        settings.runs_dir,
        ["x"],
        [{"run_id": "y", "executor": "ray", "node": "10.0.0.2", "gpus": ["1"]}],
    ) == {"y": "10.0.0.2 (GPU 1)"}


def test_pages_show_executor_and_node_and_launch_on_ray(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny_tokenizer_dir: Path
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / ".demo-installed").write_text("")
    settings = Settings(data, sys.executable, sys.executable)
    spec = RunSpec(server=ServerConfig(engine="sglang", model=str(tiny_tokenizer_dir)))
    folder = prepare_run(with_executor(spec, "ray"), settings)
    where = {
        "executor": "ray",
        "node_ip": "10.1.2.3",
        "node_id": "abc",
        "node_name": "gpu-a",
        "gpu_ids": ["3"],
    }
    folder.update_status(
        state="succeeded", phase="done", started_at=utc_now(), finished_at=utc_now(), **where
    )
    folder.write("placement.json", where)
    monkeypatch.setenv("SERVELAB_DATA_DIR", str(data))
    monkeypatch.setenv("SERVELAB_WORKER", "off")
    monkeypatch.setenv("SERVELAB_EXECUTOR", "ray")
    monkeypatch.setenv("SERVELAB_RAY_ADDRESS", "10.1.2.3:6379")
    st.cache_resource.clear()
    app = AppTest.from_file(str(REPO / "app.py"), default_timeout=60)
    app.run()
    assert not app.exception
    frame = app.dataframe[0].value
    assert list(frame["node"]) == ["10.1.2.3 (GPU 3)"]

    app.switch_page("pages/run.py")
    app.query_params["run"] = folder.run_id
    app.run()
    assert not app.exception
    assert any("Ray node 10.1.2.3 (gpu-a) · GPU ids 3" in c.value for c in app.caption)

    app.switch_page("pages/launch.py").run()
    assert not app.exception
    assert any("executor: ray · Ray cluster 10.1.2.3:6379" in c.value for c in app.caption)
    assert app.selectbox(key="executor").value == "ray"
    before = {p.name for p in (data / "runs").iterdir()}
    app.button(key="submit_launch").click().run()
    assert not app.exception, app.exception
    new = [p for p in (data / "runs").iterdir() if p.name not in before]
    assert new, [e.value for e in app.error]
    for path in new:
        spec_json = json.loads((path / "spec.json").read_text())
        assert spec_json["placement"]["executor"] == "ray"
    # ...and back to this host
    app.selectbox(key="executor").set_value("local")
    app.button(key="submit_launch").click().run()
    newer = [p for p in (data / "runs").iterdir() if p.name not in before and p not in new]
    assert newer and all(
        json.loads((p / "spec.json").read_text())["placement"]["executor"] == "local" for p in newer
    )


def test_gpu_memory_honours_cuda_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    """NVML sees every GPU of a node; a run on Ray must sample only the GPUs Ray gave it."""
    import types

    import core.run.gpu as gpu

    class NVMLError(Exception):
        pass

    class Mem:
        used, total = 2 * 2**30, 140 * 2**30

    fake = types.SimpleNamespace(
        NVMLError=NVMLError,
        nvmlInit=lambda: None,
        nvmlDeviceGetCount=lambda: 4,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetMemoryInfo=lambda h: Mem(),
        nvmlDeviceGetName=lambda h: "NVIDIA H200",
        nvmlDeviceGetUUID=lambda h: f"GPU-{h}aaa-bbb".encode(),
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(gpu, "_state", {"ok": True})
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert [g["gpu"] for g in gpu.gpu_memory()] == [0, 1, 2, 3]
    for value, want in (
        ("2,3", [2, 3]),
        ("1", [1]),
        ("", []),
        ("GPU-3aaa", [3]),
        ("0,9,1", [0]),
        ("GPU-2aaa-bbb,GPU-0aaa-bbb", [2, 0]),
    ):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
        assert [g["gpu"] for g in gpu.gpu_memory()] == want, value


def test_ray_address_is_set_in_the_portal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from core.executors import ray_address, save_ray_address
    from core.settings import load_settings

    data = tmp_path / "data"
    data.mkdir()
    (data / ".demo-installed").write_text("")
    monkeypatch.setenv("SERVELAB_DATA_DIR", str(data))
    monkeypatch.setenv("SERVELAB_WORKER", "off")
    monkeypatch.delenv("SERVELAB_RAY_ADDRESS", raising=False)
    monkeypatch.delenv("SERVELAB_EXECUTOR", raising=False)
    st.cache_resource.clear()
    app = AppTest.from_file(str(REPO / "app.py"), default_timeout=60)
    app.run()
    app.switch_page("pages/launch.py").run()
    assert not app.exception
    assert not [s for s in app.selectbox if s.key == "executor"]  # no cluster: local only
    app.text_input(key="ray_address").set_value("not an address")
    app.button(key="save_ray_address").click().run()
    assert any("HOST:PORT" in e.value for e in app.error)
    app.text_input(key="ray_address").set_value("10.0.0.5:6379")
    app.button(key="save_ray_address").click().run()
    assert not app.exception
    settings = load_settings()
    assert ray_address(settings) == "10.0.0.5:6379"
    assert app.selectbox(key="executor").value == "local"  # offered, local stays the default
    assert any("Ray cluster 10.0.0.5:6379" in c.value for c in app.caption)
    assert save_ray_address(settings, "") is None  # cleared: back to the environment's
