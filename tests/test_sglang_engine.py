"""The SGLang adapter: argv per version, extra_args checks, detection through a fake
``sglang`` package in a subprocess, and facts from a local /server_info."""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Generator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from core.config import ServerConfig
from core.engines import sglang as sglang_engine
from core.engines.base import EngineAdapter, EngineInfo
from core.engines.sglang import SERVER_INFO_FACT_KEYS, SGLangAdapter, build_sglang_argv
from core.engines.sglang_log import LOG_FACT_KEYS, parse_sglang_log
from core.errors import ConfigError, EngineUnavailable

PY = "/venvs/sglang/bin/python"
COMMON = {
    "--model-path",
    "--model",
    "--tokenizer-path",
    "--host",
    "--port",
    "--tp-size",
    "--tensor-parallel-size",
    "--mem-fraction-static",
    "--attention-backend",
    "--dtype",
    "--device",
    "--base-gpu-id",
    "--enable-metrics",
    "--max-running-requests",
    "--log-level",
    "--help",
}
OPTIONS_043 = frozenset(
    COMMON
    | {
        "--disable-cuda-graph",
        "--cuda-graph-max-bs",
        "--cuda-graph-bs",
        "--disable-cuda-graph-padding",
    }
)
OPTIONS_0523 = frozenset(
    COMMON
    | {
        "--disable-cuda-graph",
        "--cuda-graph-max-bs-decode",
        "--cuda-graph-max-bs-prefill",
        "--cuda-graph-bs-decode",
        "--cuda-graph-bs-prefill",
        "--cuda-graph-backend-decode",
        "--cuda-graph-backend-prefill",
        "--disable-decode-cuda-graph",
        "--disable-prefill-cuda-graph",
        "--cuda-graph-config",
    }
)


def _config(**kw: Any) -> ServerConfig:
    return ServerConfig(engine="sglang", model="/models/qwen", **kw)


def _flag_value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


# --- argv ---------------------------------------------------------------------------


def test_argv_basics() -> None:
    argv = build_sglang_argv(
        _config(tp_size=2, mem_fraction_static=0.8, attention_backend="fa3", dtype="bfloat16"),
        31000,
        PY,
        "0.5.23",
        OPTIONS_0523,
    )
    assert argv[:3] == [PY, "-m", "sglang.launch_server"]
    assert _flag_value(argv, "--model-path") == "/models/qwen"
    assert _flag_value(argv, "--host") == "127.0.0.1"
    assert _flag_value(argv, "--port") == "31000"
    assert _flag_value(argv, "--tp-size") == "2"
    assert _flag_value(argv, "--mem-fraction-static") == "0.8"
    assert _flag_value(argv, "--attention-backend") == "fa3"
    assert _flag_value(argv, "--dtype") == "bfloat16"
    assert "--enable-metrics" in argv
    assert all(isinstance(a, str) for a in argv)


def test_argv_leaves_defaults_to_sglang() -> None:
    argv = build_sglang_argv(_config(), 31000, PY, "0.5.23", OPTIONS_0523)
    for flag in (
        "--dtype",
        "--device",
        "--mem-fraction-static",
        "--attention-backend",
        "--disable-cuda-graph",
        "--cuda-graph-backend-decode",
        "--cuda-graph-max-bs-decode",
        "--tokenizer-path",
    ):
        assert flag not in argv


def test_argv_device() -> None:
    argv = build_sglang_argv(_config(device="cuda:1"), 1, PY, "0.5.23", OPTIONS_0523)
    assert _flag_value(argv, "--device") == "cuda"
    assert _flag_value(argv, "--base-gpu-id") == "1"
    argv = build_sglang_argv(_config(device="cpu"), 1, PY, "0.5.23", OPTIONS_0523)
    assert _flag_value(argv, "--device") == "cpu"


@pytest.mark.parametrize(
    ("version", "options"),
    [
        ("0.4.3.post4", OPTIONS_043),
        ("0.4.3.post4", frozenset()),  # option list unknown: decided by version
        ("0.5.10.post1", frozenset()),
    ],
)
def test_argv_old_graph_flags(version: str, options: frozenset[str]) -> None:
    off = build_sglang_argv(_config(cuda_graphs=False), 1, PY, version, options)
    assert "--disable-cuda-graph" in off
    assert "--cuda-graph-backend-decode" not in off
    max_bs = build_sglang_argv(_config(cuda_graph_max_bs=80), 1, PY, version, options)
    assert _flag_value(max_bs, "--cuda-graph-max-bs") == "80"
    assert "--cuda-graph-max-bs-decode" not in max_bs


@pytest.mark.parametrize(
    ("version", "options"),
    [
        ("0.5.23", OPTIONS_0523),
        ("0.5.23", frozenset()),  # option list unknown: decided by version
        ("0.5.10", OPTIONS_0523),  # the option list wins over the version
    ],
)
def test_argv_per_phase_graph_flags(version: str, options: frozenset[str]) -> None:
    off = build_sglang_argv(_config(cuda_graphs=False), 1, PY, version, options)
    assert _flag_value(off, "--cuda-graph-backend-decode") == "disabled"
    assert _flag_value(off, "--cuda-graph-backend-prefill") == "disabled"
    assert "--disable-cuda-graph" not in off  # deprecated in 0.5.23
    max_bs = build_sglang_argv(_config(cuda_graph_max_bs=64), 1, PY, version, options)
    assert _flag_value(max_bs, "--cuda-graph-max-bs-decode") == "64"
    # 0.5.23: an ambiguous prefix of two flags, argparse exits with code 2.
    assert "--cuda-graph-max-bs" not in max_bs


def test_max_bs_dropped_when_graphs_off() -> None:
    info = EngineInfo("sglang", installed=True, version="0.5.23", options=OPTIONS_0523)
    plan = SGLangAdapter(PY).plan_launch(_config(cuda_graphs=False, cuda_graph_max_bs=8), 1, info)
    assert plan.argv is not None
    assert "--cuda-graph-max-bs-decode" not in plan.argv
    assert any("cuda_graph_max_bs" in n for n in plan.notes)


def test_graph_flag_missing_from_known_options() -> None:
    with pytest.raises(ConfigError) as exc:
        build_sglang_argv(_config(cuda_graph_max_bs=8), 1, PY, "0.5.23", frozenset(COMMON))
    assert exc.value.field == "server.cuda_graph_max_bs"


# --- extra_args ---------------------------------------------------------------------


def test_extra_args_known_are_appended() -> None:
    extra = ("--max-running-requests", "8", "--log-level=debug")
    argv = build_sglang_argv(_config(extra_args=extra), 1, PY, "0.5.23", OPTIONS_0523)
    assert argv[-3:] == list(extra)


def test_extra_args_unknown_flag() -> None:
    with pytest.raises(ConfigError) as exc:
        build_sglang_argv(
            _config(extra_args=("--no-such-flag", "1")), 1, PY, "0.5.23", OPTIONS_0523
        )
    assert exc.value.field == "server.extra_args"
    assert "--no-such-flag" in exc.value.message
    assert "0.5.23" in exc.value.message
    assert "python -m sglang.launch_server --help" in exc.value.message


def test_extra_args_old_flag_on_new_version() -> None:
    with pytest.raises(ConfigError) as exc:
        build_sglang_argv(
            _config(extra_args=("--cuda-graph-bs", "1", "2")), 1, PY, "0.5.23", OPTIONS_0523
        )
    assert exc.value.field == "server.extra_args"


def test_extra_args_may_not_override_managed_flags() -> None:
    with pytest.raises(ConfigError) as exc:
        build_sglang_argv(_config(extra_args=("--port", "1234")), 1, PY, "0.5.23", OPTIONS_0523)
    assert exc.value.field == "server.extra_args"
    assert "server.port" in exc.value.message


def test_extra_args_unchecked_when_options_unknown() -> None:
    argv = build_sglang_argv(_config(extra_args=("--anything-new",)), 1, PY, "0.6.0", frozenset())
    assert argv[-1] == "--anything-new"


def test_plan_launch() -> None:
    adapter = SGLangAdapter(PY)
    info = EngineInfo("sglang", installed=True, version="0.5.23", options=OPTIONS_0523)
    plan = adapter.plan_launch(_config(extra_args=("--log-level", "info")), 30123, info)
    assert plan.base_url == "http://127.0.0.1:30123"
    assert plan.health_path == "/health"
    assert plan.supports_ignore_eos and plan.supports_flush_cache
    assert plan.tokenizer_path == "/models/qwen"
    assert plan.argv is not None and plan.argv[0] == PY
    with pytest.raises(ConfigError) as exc:
        adapter.plan_launch(_config(extra_args=("--bogus",)), 30123, info)
    assert exc.value.field == "server.extra_args"


def test_adapter_satisfies_protocol() -> None:
    adapter: EngineAdapter = SGLangAdapter(PY)
    assert adapter.name == "sglang"


# --- detection ----------------------------------------------------------------------


def test_not_installed() -> None:
    adapter = SGLangAdapter("/nonexistent/bin/python")
    info = adapter.detect()
    assert not info.installed
    assert info.reason
    with pytest.raises(EngineUnavailable) as exc:
        adapter.plan_launch(_config(), 30000, info)
    assert "requirements-sglang.txt" in str(exc.value)
    assert "SERVELAB_SGLANG_PYTHON" in str(exc.value)


def test_not_installed_in_a_real_python(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # nothing there
    if _has_sglang():
        pytest.skip("this Python has SGLang installed")
    info = SGLangAdapter(sys.executable).detect()
    assert not info.installed
    assert "not installed" in info.reason


def _has_sglang() -> bool:
    import importlib.util

    return importlib.util.find_spec("sglang") is not None


_FAKE_LAUNCH_SERVER = """\
import argparse, pathlib, sys
FLAGS = {flags!r}
here = pathlib.Path(__file__).parent
with open(here / "help_calls.txt", "a") as f:
    f.write("x")
parser = argparse.ArgumentParser(prog="sglang serve")
for flag in FLAGS:
    parser.add_argument(flag, help="a flag")
parser.parse_args(sys.argv[1:])
"""


def _fake_sglang(root: Path, version: str, flags: frozenset[str]) -> Path:
    """A minimal importable ``sglang`` with dist-info metadata and an argparse --help."""
    pkg = root / "sglang"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "launch_server.py").write_text(
        _FAKE_LAUNCH_SERVER.format(flags=sorted(flags - {"--help"}))
    )
    meta = root / f"sglang-{version}.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n")
    return pkg


@pytest.fixture
def empty_options_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sglang_engine, "_options_cache", {})


@pytest.mark.usefixtures("empty_options_cache")
@pytest.mark.parametrize(
    ("version", "flags", "graph_flag"),
    [
        ("0.5.23", OPTIONS_0523, "--cuda-graph-max-bs-decode"),
        ("0.4.3.post4", OPTIONS_043, "--cuda-graph-max-bs"),
    ],
)
def test_detect_with_fake_package(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    version: str,
    flags: frozenset[str],
    graph_flag: str,
) -> None:
    pkg = _fake_sglang(tmp_path, version, flags)
    old = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), *([old] if old else [])]))
    adapter = SGLangAdapter(sys.executable)
    info = adapter.detect()
    assert info.installed, info.reason
    assert info.version == version
    assert info.options == flags
    assert info.notes == ()
    plan = adapter.plan_launch(_config(cuda_graph_max_bs=32), 30000, info)
    assert plan.argv is not None
    assert _flag_value(plan.argv, graph_flag) == "32"
    # The option list is cached per (python, version): --help ran once for two detects.
    assert adapter.detect().options == flags
    assert (pkg / "help_calls.txt").read_text() == "x"


@pytest.mark.usefixtures("empty_options_cache")
def test_option_list_is_kept_on_disk_between_run_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each run is its own process: a fresh adapter (no in-memory cache) must not import
    # SGLang again for `--help` (tens of seconds on a GPU host) when the version is the same.
    pkg = _fake_sglang(tmp_path / "site", "0.5.17", OPTIONS_0523)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    cache = tmp_path / "cache"
    first = SGLangAdapter(sys.executable, cache).detect()
    monkeypatch.setattr(sglang_engine, "_options_cache", {})  # as in a new process
    second = SGLangAdapter(sys.executable, cache).detect()
    assert first.options == second.options == OPTIONS_0523
    assert (pkg / "help_calls.txt").read_text() == "x"
    # Another version is another option list: --help runs again.
    (tmp_path / "site" / "sglang-0.5.17.dist-info").rename(
        tmp_path / "site" / "sglang-0.5.23.dist-info"
    )
    ((tmp_path / "site" / "sglang-0.5.23.dist-info") / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.23\n"
    )
    assert SGLangAdapter(sys.executable, cache).detect().version == "0.5.23"
    assert (pkg / "help_calls.txt").read_text() == "xx"


@pytest.mark.usefixtures("empty_options_cache")
def test_detect_when_help_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = _fake_sglang(tmp_path, "0.5.23", OPTIONS_0523)
    (pkg / "launch_server.py").write_text("import sys\nsys.exit('no CUDA here')\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    info = SGLangAdapter(sys.executable).detect()
    assert info.installed and info.version == "0.5.23"
    assert info.options == frozenset()
    assert info.notes and "no CUDA here" in info.notes[0]
    # Falls back to the version: still the per-phase flags.
    plan = SGLangAdapter(sys.executable).plan_launch(_config(cuda_graphs=False), 1, info)
    assert plan.argv is not None and "--cuda-graph-backend-decode" in plan.argv


# --- facts --------------------------------------------------------------------------

SERVER_INFO = {  # shaped like the reference §3.3 (0.5.23)
    "model_path": "/models/qwen",
    "tp_size": 1,
    "mem_fraction_static": 0.871,
    "attention_backend": "fa3",
    "chunked_prefill_size": 8192,
    "max_running_requests": None,
    "cuda_graph_config": {
        "decode": {"backend": "full", "max_bs": 256, "bs": [1, 2, 4]},
        "prefill": {"backend": "breakable", "max_bs": 8192, "bs": [4, 8]},
    },
    "launch_command": "python -m sglang.launch_server --model-path /models/qwen",
    "status": "ready",
    "max_total_num_tokens": 1934000,
    "max_req_input_len": 32762,
    "startup_time": {
        "load_weight": 5.84,
        "kv_cache_allocation": 0.4,
        "scheduler_e2e": 47.0,
        "cuda_graph": {"prefill": 27.1, "decode": 11.9, "target_verify": None},
    },
    "version": "0.5.23",
    "frontend": "python",
    "internal_states": [
        {
            "tp_size": 1,
            "world_size": 1,
            "last_gen_throughput": 2950.31,
            "memory_usage": {
                "weight": 14.44,
                "kvcache": 103.3,
                "startup_available": 18.8,
                "token_capacity": 1934000,
                "graph": {"prefill": 0.85, "decode": 1.12, "target_verify": 0.0},
            },
            "decode_cuda_graph_bs": [1, 2, 4, 8],
            "decode_cuda_graph_memory_gb": 1.12,
        }
    ],
}

LOG = (
    "[2026-03-01 10:00:06] Load weight begin. avail mem=139.10 GB\n"
    "[2026-03-01 10:00:12] Load weight end. elapsed=5.84 s, type=Qwen2ForCausalLM, "
    "avail mem=124.66 GB, mem usage=14.44 GB.\n"
    "[2026-03-01 10:00:12] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 1934000, "
    "K size: 51.65 GB, V size: 51.65 GB\n"
    "[2026-03-01 10:00:52] Capture target decode CUDA graph end. bs=[1, 2, 4, 8], "
    "elapsed=11.90 s, mem usage=1.12 GB, avail mem=18.93 GB.\n"
    "[2026-03-01 10:00:53] max_total_num_tokens=1934000, chunked_prefill_size=8192, "
    "max_prefill_tokens=16384, max_running_requests=4096, context_len=32768, "
    "available_gpu_mem=18.80 GB\n"
    "[2026-03-01 10:00:56] The server is fired up and ready to roll!\n"
)


def _serve(routes: dict[str, Any]) -> Generator[str, None, None]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = routes.get(self.path)
            if body is None:
                self.send_error(404)
                return
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # keep test output clean

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture
def info_server() -> Iterator[str]:
    yield from _serve({"/server_info": SERVER_INFO})


@pytest.fixture
def old_info_server() -> Iterator[str]:
    # Older versions only have /get_server_info, without memory_usage or internal_states.
    old = {
        "version": "0.4.3.post4",
        "tp_size": 4,
        "max_total_num_tokens": 46611,
        "mem_fraction_static": 0.85,
        "attention_backend": "flashinfer",
        "disable_cuda_graph": False,
    }
    yield from _serve({"/get_server_info": old})


@pytest.fixture
def broken_info_server() -> Iterator[str]:
    yield from _serve({"/server_info": "<html>not json</html>"})


def test_collect_facts_from_server_info(info_server: str) -> None:
    facts = SGLangAdapter(PY).collect_facts(info_server, LOG)
    assert facts["engine_version"] == "0.5.23"
    assert facts["kv_cache_tokens"] == 1934000
    assert facts["weight_mem_gb"] == pytest.approx(14.44)
    assert facts["kv_cache_gb"] == pytest.approx(103.3)
    assert facts["graph_mem_gb"] == pytest.approx(1.97)
    assert facts["available_gpu_mem_gb"] == pytest.approx(18.8)
    assert facts["cuda_graph_batch_sizes"] == [1, 2, 4, 8]
    assert facts["cuda_graph_enabled"] is True
    assert facts["mem_fraction_static"] == pytest.approx(0.871)
    assert facts["attention_backend"] == "fa3"
    assert facts["tp_size"] == 1
    assert facts["cuda_graph_capture_s"] == pytest.approx(39.0)
    assert facts["launch_command"].startswith("python -m sglang.launch_server")
    assert facts["server_info_raw"] == SERVER_INFO
    by_key = facts["facts_source_by_key"]
    assert by_key["kv_cache_tokens"] == "server_info"
    # Only the log says when the server became ready.
    assert facts["startup_s"] == pytest.approx(50.0)
    assert by_key["startup_s"] == "log"
    assert facts["ready"] is True
    assert facts["facts_source"] == "server_info+log"
    assert set(SERVER_INFO_FACT_KEYS) <= facts.keys()
    assert set(LOG_FACT_KEYS) <= facts.keys()


REAL = Path(__file__).parent / "fixtures"


@pytest.mark.parametrize(
    ("name", "graphs"),
    [
        ("30-v0517-smollm2-135m-h200-graphs-on", True),
        ("31-v0517-smollm2-135m-h200-graphs-off", False),
    ],
)
def test_collect_facts_from_real_v0517(name: str, graphs: bool) -> None:
    """The /server_info body and start-up log of a real SGLang 0.5.17 on the H200: its
    internal_states lack decode_cuda_graph_bs; the sizes are in cuda_graph_config only."""
    body = json.loads((REAL / "sglang-server-info" / f"{name}.json").read_text())
    log = (REAL / "sglang-logs" / f"{name}.log").read_text()
    assert body["internal_states"][0].get("decode_cuda_graph_bs") is None
    gen = _serve({"/server_info": body})
    url = next(gen)
    try:
        facts = SGLangAdapter(PY).collect_facts(url, log)
    finally:
        gen.close()
    by_key = facts["facts_source_by_key"]
    assert facts["engine_version"] == "0.5.17"
    assert facts["kv_cache_tokens"] == 5498295 and by_key["kv_cache_tokens"] == "server_info"
    assert facts["weight_mem_gb"] == pytest.approx(0.266)
    assert facts["kv_cache_gb"] == pytest.approx(117.981)
    assert facts["mem_fraction_static"] == pytest.approx(0.85)
    assert facts["avail_mem_gb_after_load"] == pytest.approx(138.86)
    assert facts["cuda_graph_enabled"] is graphs
    assert by_key["cuda_graph_enabled"] == "server_info"
    if graphs:
        assert facts["cuda_graph_batch_sizes"] == [1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56, 64]
        assert by_key["cuda_graph_batch_sizes"] == "server_info"
        assert facts["graph_mem_gb"] == pytest.approx(0.346 + 0.062)
        assert facts["available_gpu_mem_gb"] == pytest.approx(19.934)
        assert facts["avail_mem_gb_after_graph"] == pytest.approx(19.93)
        assert facts["cuda_graph_capture_s"] == pytest.approx(5.709 + 2.094, abs=0.01)
    else:
        assert facts["cuda_graph_batch_sizes"] is None
        assert facts["graph_mem_gb"] == 0.0
        assert facts["avail_mem_gb_after_graph"] is None


def test_collect_facts_old_endpoint(old_info_server: str) -> None:
    facts = SGLangAdapter(PY).collect_facts(old_info_server, "")
    assert facts["engine_version"] == "0.4.3.post4"
    assert facts["tp_size"] == 4
    assert facts["kv_cache_tokens"] == 46611
    assert facts["weight_mem_gb"] is None  # not stated anywhere: not guessed
    assert facts["cuda_graph_enabled"] is None
    assert facts["facts_source"] == "server_info"


def test_collect_facts_falls_back_to_log_when_unreachable() -> None:
    gen = _serve({})
    url = next(gen)
    gen.close()  # the server is gone: nothing listens on this port any more
    facts = SGLangAdapter(PY).collect_facts(url, LOG)
    assert facts["server_info_raw"] is None
    assert facts["facts_source"] == "log"
    assert facts["kv_cache_tokens"] == 1934000
    assert facts["weight_mem_gb"] == pytest.approx(14.44)
    assert facts["available_gpu_mem_gb"] == pytest.approx(18.8)
    assert facts["cuda_graph_batch_sizes"] == [1, 2, 4, 8]
    assert facts["engine_version"] is None
    assert all(v == "log" for v in facts["facts_source_by_key"].values())


def test_collect_facts_non_json_answer(broken_info_server: str) -> None:
    facts = SGLangAdapter(PY).collect_facts(broken_info_server, "")
    assert facts["server_info_raw"] is None
    assert facts["kv_cache_tokens"] is None
    assert facts["ready"] is None  # a blank log states nothing
    assert facts["facts_source"] == "none"


def test_collect_facts_bad_url() -> None:
    facts = SGLangAdapter(PY).collect_facts("not a url", "")
    assert facts["server_info_raw"] is None


def test_failure_in_log() -> None:
    adapter = SGLangAdapter(PY)
    reason = adapter.failure_in_log("Exception: Capture cuda graph failed: CUDA out of memory.")
    assert reason is not None and "oom-during-cuda-graph-capture" in reason
    assert adapter.failure_in_log(LOG) is None


# --- facts from the fake server process (real 0.5.17 shape; several GPUs) ------------------


@pytest.mark.parametrize("like", ["0.5.17", "0.5.23"])
def test_collect_facts_from_the_fake_server(tmp_path: Path, like: str) -> None:
    """The fake answers like the real 0.5.17 (FAKE_SGLANG_LIKE) or like 0.5.23 by its source;
    ServeLab reads the same facts from both shapes."""
    from tests.test_fake_sglang import launch

    with launch(
        tmp_path, "--cuda-graph-max-bs-decode", "8", env={"FAKE_SGLANG_LIKE": like}
    ) as fake:
        facts = SGLangAdapter(PY).collect_facts(fake.base, fake.log())
    state = facts["server_info_raw"]["internal_states"][0]
    assert ("decode_cuda_graph_bs" in state) is (like == "0.5.23")
    assert facts["engine_version"] == like
    assert facts["cuda_graph_enabled"] is True
    assert facts["cuda_graph_batch_sizes"] == [1, 2, 4, 8]
    assert facts["kv_cache_tokens"] and facts["weight_mem_gb"] and facts["graph_mem_gb"]


def test_tp2_facts_from_the_fake_server(tmp_path: Path) -> None:
    """Issue 16 without the 2-GPU machine: --tp-size 2 in the argv, the rank tags in the log,
    tp_size and per-GPU (rank 0) memory in the facts."""
    from tests.test_fake_sglang import launch

    argv = build_sglang_argv(_config(tp_size=2), 1, PY, "0.5.17", frozenset())
    assert _flag_value(argv, "--tp-size") == "2"
    with launch(tmp_path, "--tp-size", "2", env={"FAKE_SGLANG_LIKE": "0.5.17"}) as fake:
        log = fake.log()
        facts = SGLangAdapter(PY).collect_facts(fake.base, log)
    assert " TP1] " in log
    assert facts["tp_size"] == 2
    assert parse_sglang_log(log)["tp_size"] == 2
    # weights are split across the two GPUs: the per-GPU figure is half of one GPU's 0.98 GB
    assert facts["weight_mem_gb"] == pytest.approx(0.49, abs=0.01)
