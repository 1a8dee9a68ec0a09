"""core/engines/vllm.py: the argv per installed version (from the real ``serve --help=all``
texts of 0.22.0 and 0.26.0 in tests/fixtures/vllm-help), detection, facts from the fake
vLLM server (tests/fakes/fake_vllm_server.py, started as the real one is), logprobs, and a
run through ``python -m core run --engine vllm``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from core.analysis.ledger import run_ledger
from core.analysis.runs import load_run
from core.analysis.server_view import server_view
from core.config import ServerConfig
from core.engines import get_adapter
from core.engines.base import EngineAdapter, EngineInfo
from core.engines.registry import get_engine
from core.engines.vllm import VLLMAdapter, build_vllm_argv, read_help_options
from core.errors import ConfigError, EngineUnavailable
from core.run_folder import RunFolder
from core.settings import REPO_ROOT, Settings

HELP = Path(__file__).parent / "fixtures" / "vllm-help"
FAKE_PKG = Path(__file__).parent / "fakes" / "vllm_pkg"


def _options(version: str) -> frozenset[str]:
    return read_help_options((HELP / f"{version}.txt").read_text())


def _config(**kw: object) -> ServerConfig:
    return ServerConfig(engine="vllm", model="/models/llama", **kw)  # type: ignore[arg-type]


def test_help_texts_list_the_flags_the_adapter_uses() -> None:
    for version in ("0.22.0", "0.26.0"):
        options = _options(version)
        for flag in ("--gpu-memory-utilization", "--enforce-eager", "--max-num-seqs", "-cc"):
            assert flag in options, (version, flag)
    assert "--cudagraph-metrics" in _options("0.26.0")


@pytest.mark.parametrize("version", ["0.22.0", "0.26.0"])
def test_argv_graphs_off_memory_and_backend(version: str) -> None:
    config = _config(cuda_graphs=False, mem_fraction_static=0.9, attention_backend="triton_attn")
    argv = build_vllm_argv(config, 8001, "py", version, _options(version))
    assert argv[:5] == ["py", "-m", "vllm.entrypoints.cli.main", "serve", "/models/llama"]
    assert argv[argv.index("--port") + 1] == "8001"
    assert argv[argv.index("--gpu-memory-utilization") + 1] == "0.9"
    assert argv[argv.index("--attention-backend") + 1] == "TRITON_ATTN"
    assert "-cc.cudagraph_mode=NONE" in argv


def test_argv_defaults_leave_vllm_alone() -> None:
    argv = build_vllm_argv(_config(), 8001, "py", "0.26.0", _options("0.26.0"))
    assert not any(a.startswith(("-cc", "--gpu-memory", "--attention", "--dtype")) for a in argv)
    assert "--cudagraph-metrics" in argv  # so graph use shows in the log


def test_argv_graph_max_batch_and_json_fallback() -> None:
    argv = build_vllm_argv(_config(cuda_graph_max_bs=64), 1, "py", "0.26.0", _options("0.26.0"))
    assert "-cc.max_cudagraph_capture_size=64" in argv
    # an option list without -cc: one --compilation-config JSON
    options = _options("0.26.0") - {"-cc"}
    argv = build_vllm_argv(_config(cuda_graphs=False), 1, "py", "0.26.0", options)
    assert argv[argv.index("--compilation-config") + 1] == '{"cudagraph_mode": "NONE"}'


def test_a_shape_loads_dummy_weights_and_extra_args_cannot_say_it_again() -> None:
    # as launched (core.engines.shape_server): the shape kept, model its materialised folder
    shape = ServerConfig(engine="vllm", shape="llama-3.1-8b").model_copy(
        update={"model": "/data/models/shapes/llama-3.1-8b"}
    )
    argv = build_vllm_argv(shape, 1, "py", "0.26.0", _options("0.26.0"))
    assert argv[argv.index("--load-format") + 1] == "dummy"
    assert "--load-format" not in build_vllm_argv(_config(), 1, "py", "0.26.0", frozenset())
    twice = shape.model_copy(update={"extra_args": ("--load-format", "dummy")})
    with pytest.raises(ConfigError, match=r"set by server\.shape"):
        build_vllm_argv(twice, 1, "py", "0.26.0", frozenset())


def test_an_moe_shape_says_its_routing_stays_uneven() -> None:
    info = EngineInfo("vllm", True, "0.26.0", options=_options("0.26.0"))
    for shape, said in (("qwen3-30b-a3b", True), ("llama-3.1-8b", False)):
        server = ServerConfig(engine="vllm", shape=shape).model_copy(update={"model": "/m"})
        plan = VLLMAdapter("py").plan_launch(server, 8000, info)
        assert any("dummy gate's own, uneven" in n for n in plan.notes) is said
        assert plan.env == {}  # no variable vLLM would read


def test_extra_args_are_checked_against_the_installed_help() -> None:
    ok = _config(extra_args=("--max-num-seqs", "64", "--load-format", "dummy"))
    assert build_vllm_argv(ok, 1, "py", "0.26.0", _options("0.26.0"))[-4:] == list(ok.extra_args)
    with pytest.raises(ConfigError, match=r"--max-num-batched-tokenz is unknown to vLLM 0\.26\.0"):
        build_vllm_argv(
            _config(extra_args=("--max-num-batched-tokenz", "8")),
            1,
            "py",
            "0.26.0",
            _options("0.26.0"),
        )
    with pytest.raises(ConfigError, match=r"set by ServeLab; use server\.mem_fraction_static"):
        build_vllm_argv(
            _config(extra_args=("--gpu-memory-utilization", "0.5")), 1, "py", "0.26.0", frozenset()
        )
    with pytest.raises(ConfigError, match="--enforce-eager turns CUDA graphs off"):
        build_vllm_argv(
            _config(cuda_graphs=True, extra_args=("--enforce-eager",)),
            1,
            "py",
            "0.26.0",
            frozenset(),
        )


def test_plan_launch_refuses_cpu_and_missing_install() -> None:
    adapter = VLLMAdapter("py")
    info = EngineInfo("vllm", installed=True, version="0.26.0", options=_options("0.26.0"))
    with pytest.raises(ConfigError) as err:
        adapter.plan_launch(_config(device="cpu"), 1, info)
    assert err.value.field == "server.device"
    plan = adapter.plan_launch(_config(device="cuda:1"), 1, info)
    assert plan.env == {"CUDA_VISIBLE_DEVICES": "1"} and plan.health_path == "/health"
    assert plan.exact_length_body == {"ignore_eos": True}
    with pytest.raises(EngineUnavailable, match="not installed"):
        adapter.plan_launch(_config(), 1, EngineInfo("vllm", installed=False))


def test_declarations_and_protocol(settings: Settings) -> None:
    spec = get_engine("vllm")
    assert isinstance(get_adapter("vllm", settings), EngineAdapter)
    mem = spec.knob("mem_fraction_static")
    assert mem is not None and mem.flag == "--gpu-memory-utilization"
    assert mem.meant_cost == "reserved_memory_kv_tokens"
    graphs = spec.knob("cuda_graphs")
    assert graphs is not None and graphs.meant_cost == "graph_memory"
    assert spec.metric_names("queued_reqs") == ("vllm:num_requests_waiting",)
    assert spec.logprobs.path == "/v1/completions"
    with pytest.raises(ValueError, match="cb_max_memory_percent applies to"):
        ServerConfig(engine="vllm", cb_max_memory_percent=0.5)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_VLLM_")}
    env["PYTHONPATH"] = os.pathsep.join([str(FAKE_PKG), str(REPO_ROOT)])
    return env


def test_detect_reads_version_and_help_of_the_installed_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(FAKE_PKG))
    info = VLLMAdapter(sys.executable, tmp_path).detect()
    assert info.installed and info.version == "0.26.0" and not info.notes
    assert info.options == _options("0.26.0")
    missing = VLLMAdapter(str(tmp_path / "no-python")).detect()
    assert not missing.installed and "could not run" in missing.reason


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def fake_server(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[str, Path]]:
    """The fake started from the adapter's own argv (graphs as the test's param)."""
    graphs = getattr(request, "param", None)
    port = _free_port()
    info = EngineInfo("vllm", installed=True, version="0.26.0", options=_options("0.26.0"))
    config = _config(cuda_graphs=graphs, mem_fraction_static=0.8)
    argv = VLLMAdapter(sys.executable).plan_launch(config, port, info).argv
    assert argv is not None
    log = tmp_path / "server.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, env=_env(), stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):
            try:
                if httpx.get(base + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.05)
        yield base, log
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.parametrize("fake_server", [None, False], indirect=True)
def test_facts_from_the_fake_server(fake_server: tuple[str, Path]) -> None:
    base, log = fake_server
    body = {"prompt": "a b c d", "max_tokens": 4, "ignore_eos": True}
    assert httpx.post(base + "/v1/completions", json=body, timeout=10).status_code == 200
    time.sleep(0.8)  # one stats interval
    facts = VLLMAdapter("py").collect_facts(base, log.read_text())
    graphs = facts["cudagraph_mode"] != "NONE"
    assert facts["engine_version"] == "0.26.0" and facts["facts_source"] == "server+log"
    assert facts["cuda_graph_enabled"] is graphs
    assert (facts["graph_mem_gb"] is not None) is graphs
    assert facts["kv_cache_tokens"] == facts["kv_cache_blocks"] * facts["kv_block_size"]
    assert facts["mem_fraction_static"] == 0.8
    assert facts["has_metrics_endpoint"] and facts["served_models"] == ["/models/llama"]
    assert facts["stats_lines"] >= 1
    assert facts["graph_runtime_modes"] == {"FULL" if graphs else "NONE": 4}


def test_logprobs_request_and_parse_against_the_fake(fake_server: tuple[str, Path]) -> None:
    base, _ = fake_server
    adapter = VLLMAdapter("py")
    path, body = adapter.logprobs_request("/models/llama", "the capital of", 3, 2)
    answer = httpx.post(base + path, json=body, timeout=10).json()
    tokens = adapter.parse_logprobs(answer)
    assert [t.token for t in tokens] == [" alpha", " bravo", " charlie"]
    assert tokens[0].logprob == pytest.approx(-0.1) and set(tokens[0].top) == {" alpha", " zulu"}


def test_failure_in_log() -> None:
    text = (Path(__file__).parent / "fixtures" / "vllm-logs" / "v026-no-kv-memory.log").read_text()
    assert "no GPU memory was left for the KV cache" in (
        VLLMAdapter("py").failure_in_log(text) or ""
    )
    assert VLLMAdapter("py").failure_in_log("all fine") is None


def _cli_run(tmp_path: Path, tiny_tokenizer_dir: Path, *args: str) -> Path:
    """`python -m core run ARGS` with the fake vLLM as the vllm engine; the run's folder."""
    data = tmp_path / "data"
    env = {
        **_env(),
        "SERVELAB_DATA_DIR": str(data),
        "SERVELAB_VLLM_PYTHON": sys.executable,
        "SERVELAB_MODEL_ROOTS": str(tiny_tokenizer_dir.parent),
    }
    (tmp_path / "plan.json").write_text('{"plan": {"metrics_interval_s": 0.1}}')
    out = subprocess.run(
        [sys.executable, "-m", "core", "run", "--plan", str(tmp_path / "plan.json"), *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    (run,) = (data / "runs").iterdir()
    return run


def test_a_run_through_the_cli_on_the_fake(tmp_path: Path, tiny_tokenizer_dir: Path) -> None:
    args = [
        "--engine",
        "vllm",
        "--quiet",
        "--model",
        str(tiny_tokenizer_dir),
        "--concurrency",
        "1,4",
    ]
    args += ["--num-prompts", "8", "--input-len", "16", "--output-len", "12"]
    run = _cli_run(tmp_path, tiny_tokenizer_dir, *args)
    facts = json.loads((run / "facts.json").read_text())
    launch = json.loads((run / "launch.json").read_text())
    assert launch["argv"][2:4] == ["vllm.entrypoints.cli.main", "serve"]
    assert facts["engine_version"] == "0.26.0" and facts["kv_cache_tokens"] > 0
    assert "Graph capturing finished" in (run / "server.log").read_text()
    result = json.loads((run / "result.json").read_text())
    assert result["points"] == 2 and result["headline"]["completed"] == 8
    view = server_view(load_run(RunFolder(run)))
    assert view.source == "metrics" and view.running_peak == 4
    assert view.kv_capacity_tokens == facts["kv_cache_tokens"]
    assert view.kv_used_peak_tokens is not None  # usage share x pool
    assert view.prefix_cache_hit_rate is not None
    assert run_ledger(load_run(RunFolder(run))).graph_gb == 0.5


def test_the_gpu_plans_build_a_vllm_argv_for_0_26() -> None:
    from core.experiments.design import expand, parse_experiment

    for name in ("plan_vllm_graphs.json", "plan_engines.json"):
        data = json.loads((REPO_ROOT / "bench" / "gpu" / name).read_text())
        assert data["base"]["server"]["shape"] == "llama-3.1-8b"
        arms = [s for _, t, s in expand(parse_experiment(data), "x") if t == 0]
        for spec in arms:
            if spec.server.engine == "vllm":
                # the launched config names the shape's materialised folder (shape_server)
                server = spec.server.model_copy(update={"model": "/tmp/gpu/shapes/llama"})
                argv = build_vllm_argv(server, 1, "py", "0.26.0", _options("0.26.0"))
                assert argv[argv.index("--load-format") + 1] == "dummy"
                assert ("-cc.cudagraph_mode=NONE" in argv) is (spec.server.cuda_graphs is False)


def test_the_launch_form_takes_engine_vllm(settings: Settings, tiny_tokenizer_dir: Path) -> None:
    from core.launch.forms import FORM_DEFAULTS, launch_from_form
    from core.launch.host import HostInfo

    info = EngineInfo("vllm", True, "0.26.0", options=_options("0.26.0"))
    host = HostInfo(gpus=("0: H200",), engines={"vllm": info})
    form = {**FORM_DEFAULTS, "engine": "vllm", "model": str(tiny_tokenizer_dir)}
    form |= {"preset": "CUDA graphs A/B", "mem_fraction_static": "0.85", "device": "cuda:0"}
    specs, errors = launch_from_form(
        form, host, model_roots=[tiny_tokenizer_dir.parent], settings=settings
    )
    assert errors == {}
    assert {s.server.engine for s in specs} == {"vllm"}
    assert sorted(str(s.server.cuda_graphs) for s in specs) == ["False", "True"]
    bad = {**form, "extra_args": "--no-such-flag"}
    _, errors = launch_from_form(
        bad, host, model_roots=[tiny_tokenizer_dir.parent], settings=settings
    )
    assert any("--no-such-flag is unknown to vLLM 0.26.0" in m for m in errors.values()), errors


def test_the_fake_refuses_an_unknown_flag_like_argparse() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", "m", "--no-such-flag"],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 2 and "unrecognized arguments: --no-such-flag" in out.stderr


def test_the_fake_streams_chat_in_openai_format(fake_server: tuple[str, Path]) -> None:
    base, _ = fake_server
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "stream": True}
    body |= {"ignore_eos": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", base + "/v1/chat/completions", json=body, timeout=10) as resp:
        events = [line[6:] for line in resp.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert chunks[-1]["usage"]["completion_tokens"] == 3 and chunks[-1]["choices"] == []


def test_a_shape_run_through_the_cli_on_the_fake(tmp_path: Path, tiny_tokenizer_dir: Path) -> None:
    """`--engine vllm --shape NAME`: the shape's folder materialised and served with dummy
    weights, as on SGLang; the run is labelled with the shape."""
    args = ["--engine", "vllm", "--quiet", "--shape", "llama-3.1-8b"]
    args += ["--tokenizer", str(tiny_tokenizer_dir)]
    args += ["--concurrency", "2", "--num-prompts", "4", "--input-len", "16", "--output-len", "8"]
    run = _cli_run(tmp_path, tiny_tokenizer_dir, *args)
    data = tmp_path / "data"
    argv = json.loads((run / "launch.json").read_text())["argv"]
    assert argv[argv.index("--load-format") + 1] == "dummy"
    served = Path(argv[argv.index("serve") + 1])
    assert served == data / "models" / "shapes" / "llama-3.1-8b"
    assert json.loads((served / "config.json").read_text())["num_hidden_layers"] == 32
    assert not list(served.glob("*.safetensors"))  # no weights: the engine makes them
    assert json.loads((run / "status.json").read_text())["state"] == "succeeded"
