"""Tests of the fake SGLang 0.5.23 server in ``tests/fakes/sglang_pkg`` (used by other tests).

The fake is started exactly like the real server:
``PYTHONPATH=<abs>/tests/fakes/sglang_pkg python -m sglang.launch_server --model-path M ...``.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

FAKE_PKG = (Path(__file__).resolve().parent / "fakes" / "sglang_pkg").resolve()
MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
FRANCE = [{"role": "user", "content": "What is the capital of France?"}]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_SGLANG_")}
    env["PYTHONPATH"] = str(FAKE_PKG)
    env["FAKE_SGLANG_STARTUP_S"] = "0.1"
    env.update(extra or {})
    return env


def _run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sglang.launch_server", *args],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=30,
    )


@dataclass
class Fake:
    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_exit(self, timeout: float = 60) -> int:
        return self.proc.wait(timeout=timeout)


def _wait_healthy(fake: Fake, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert fake.proc.poll() is None, f"fake exited early:\n{fake.log()}"
        with suppress(httpx.HTTPError):
            if httpx.get(fake.base + "/health", timeout=2).status_code == 200:
                return
        time.sleep(0.02)
    raise AssertionError(f"fake not healthy after {timeout} s:\n{fake.log()}")


@contextmanager
def launch(
    log_dir: Path, *flags: str, env: dict[str, str] | None = None, wait: bool = True
) -> Iterator[Fake]:
    port = _free_port()
    log_path = log_dir / f"fake-sglang-{port}.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "sglang.launch_server",
                "--model-path",
                MODEL,
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                *flags,
            ],
            env=_env(env),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        fake = Fake(proc, port, log_path)
        try:
            if wait:
                _wait_healthy(fake)
            yield fake
        finally:
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            with suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)


def _chat(max_tokens: int = 8, stream: bool = True, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": MODEL,
        "messages": FRANCE,
        "stream": stream,
        "max_completion_tokens": max_tokens,
        "ignore_eos": True,
    }
    body.update(extra)
    return body


def _sse_events(text: str) -> list[str]:
    return [e[len("data: ") :] for e in text.split("\n\n") if e.startswith("data: ")]


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------


def test_version_metadata() -> None:
    code = (
        "import importlib.metadata, sglang; "
        "print(importlib.metadata.version('sglang'), sglang.__version__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert out.stdout.split() == ["0.5.23", "0.5.23"]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--cuda-graph-max-bs", "8"],
            "sglang serve: error: ambiguous option: --cuda-graph-max-bs could match "
            "--cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill",
        ),
        (
            ["--cuda-graph-bs", "1", "2"],
            "sglang serve: error: ambiguous option: --cuda-graph-bs could match "
            "--cuda-graph-bs-decode, --cuda-graph-bs-prefill",
        ),
        (["--no-such-flag"], "sglang serve: error: unrecognized arguments: --no-such-flag"),
    ],
)
def test_bad_flags_exit_2(flags: list[str], message: str) -> None:
    out = _run_cli("--model-path", MODEL, *flags)
    assert out.returncode == 2
    assert message in out.stderr
    assert out.stderr.splitlines()[0].endswith(
        "UserWarning: 'python -m sglang.launch_server' is still supported, but 'sglang serve' "
        "is the recommended entrypoint."
    )


def test_help_and_abbreviation() -> None:
    out = _run_cli("--help")
    assert out.returncode == 0
    for flag in (
        "--cuda-graph-max-bs-decode",
        "--mem-fraction-static",
        "--tp-size",
        "--enable-metrics",
        "--disable-cuda-graph",
        "--attention-backend",
    ):
        assert flag in out.stdout
    assert out.stdout.startswith("usage: sglang serve")


# --------------------------------------------------------------------------------------------
# A shared server with the timing used by the timing test
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fake]:
    env = {"FAKE_SGLANG_TTFT_MS": "50", "FAKE_SGLANG_ITL_MS": "10"}
    with launch(tmp_path_factory.mktemp("fake"), "--enable-metrics", env=env) as f:
        yield f


def test_startup_log(fake: Fake) -> None:
    log = fake.log()
    pfx = r"^\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\] "
    order = [
        r"server_args=\{'model_path': 'Qwen/Qwen2.5-0.5B-Instruct'",
        r"Load weight begin\. avail mem=[\d.]+ GB$",
        r"Load weight end\. elapsed=[\d.]+ s, type=Qwen2ForCausalLM, avail mem=[\d.]+ GB, "
        r"mem usage=[\d.]+ GB\.$",
        r"KV Cache is allocated\. dtype: torch\.bfloat16, #tokens: 340000, K size: [\d.]+ GB, "
        r"V size: [\d.]+ GB$",
        r"Memory pool end\. avail mem=[\d.]+ GB$",
        r"Capture target prefill CUDA graph begin\. backend=breakable, num_tokens=\[4, 8, ",
        r"Capture target prefill CUDA graph end\. elapsed=",
        r"Capture target decode CUDA graph begin\. backend=full, num_tokens_per_req=1, ",
        r"Capture target decode CUDA graph end\. bs=\[1, 2, 4, 8\], elapsed=[\d.]+ s, "
        r"mem usage=[\d.]+ GB, avail mem=[\d.]+ GB\.$",
        r"max_total_num_tokens=340000, chunked_prefill_size=8192, max_prefill_tokens=16384, "
        r"max_running_requests=4096, context_len=32768, available_gpu_mem=[\d.]+ GB$",
        r"INFO:     Uvicorn running on http://127\.0\.0\.1:\d+ \(Press CTRL\+C to quit\)$",
        r"Prefill batch, #new-seq: 1, #new-token: 7, .*cuda graph: True, input throughput",
        r'INFO:     127\.0\.0\.1:\d+ - "POST /generate HTTP/1\.1" 200 OK$',
        r"The server is fired up and ready to roll!$",
    ]
    pos = 0
    for pat in order:
        m = re.compile(pfx + pat, re.M).search(log, pos)
        assert m, f"missing (in order) {pat!r} in:\n{log}"
        pos = m.end()
    assert " TP0]" not in log  # tp == 1: no tag


def test_info_endpoints(fake: Fake) -> None:
    models = httpx.get(fake.base + "/v1/models").json()
    assert models["object"] == "list"
    card = models["data"][0]
    assert card["id"] == MODEL and card["owned_by"] == "sglang" and card["max_model_len"] == 32768
    assert httpx.get(fake.base + "/v1/models/nope").status_code == 404
    info = httpx.get(fake.base + "/model_info").json()
    assert info["model_path"] == MODEL and info["tokenizer_path"] == MODEL
    si = httpx.get(fake.base + "/server_info").json()
    assert si["version"] == "0.5.23" and si["tp_size"] == 1
    assert si["mem_fraction_static"] == 0.85 and si["max_total_num_tokens"] == 340000
    assert si["attention_backend"] == "fa3"
    state = si["internal_states"][0]
    assert state["decode_cuda_graph_bs"] == [1, 2, 4, 8]
    assert state["memory_usage"]["token_capacity"] == 340000
    assert set(state["memory_usage"]["graph"]) >= {"prefill", "decode"}
    assert httpx.get(fake.base + "/get_server_info").json()["version"] == "0.5.23"
    assert httpx.get(fake.base + "/ready").status_code == 200
    assert httpx.get(fake.base + "/health_generate").status_code == 200
    flushed = httpx.post(fake.base + "/flush_cache")
    assert flushed.status_code == 200 and flushed.text.startswith("Cache flushed.")


def test_metrics(fake: Fake) -> None:
    httpx.post(fake.base + "/v1/chat/completions", json=_chat(3, stream=False), timeout=10)
    text = httpx.get(fake.base + "/metrics").text
    parser = pytest.importorskip("prometheus_client.parser")
    fams = {f.name: f for f in parser.text_string_to_metric_families(text)}
    assert fams["sglang:max_total_num_tokens"].samples[0].value == 340000
    assert fams["sglang:num_running_reqs"].type == "gauge"
    assert fams["sglang:generation_tokens"].type == "counter"
    assert fams["sglang:generation_tokens"].samples[0].value >= 3
    assert fams["sglang:prompt_tokens"].samples[0].labels["model_name"] == MODEL
    assert "sglang:time_to_first_token_seconds" in fams


def test_streamed_chat_exact_tokens_with_usage(fake: Fake) -> None:
    body = _chat(12, stream_options={"include_usage": True})
    r = httpx.post(fake.base + "/v1/chat/completions", json=body, timeout=10)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = _sse_events(r.text)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    role, contents, finish, usage = chunks[0], chunks[1:-2], chunks[-2], chunks[-1]
    assert role["choices"][0]["delta"] == {
        "reasoning_content": None,
        "role": "assistant",
        "content": "",
    }
    assert len(contents) == 12
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    text = "".join(c["choices"][0]["delta"]["content"] for c in contents)
    assert text.startswith(" Paris") and len(text.split()) == 12
    assert finish["choices"][0]["delta"] == {"reasoning_content": None}
    assert finish["choices"][0]["finish_reason"] == "length"
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 12
    assert usage["usage"]["prompt_tokens"] == 6  # words of "What is the capital of France?"
    assert usage["usage"]["total_tokens"] == 18


def test_streamed_chat_no_usage_by_default(fake: Fake) -> None:
    r = httpx.post(fake.base + "/v1/chat/completions", json=_chat(5), timeout=10)
    chunks = [json.loads(e) for e in _sse_events(r.text)[:-1]]
    assert all("usage" not in c for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert len(chunks) == 1 + 5 + 1


def test_non_stream_chat_completions_generate(fake: Fake) -> None:
    r = httpx.post(fake.base + "/v1/chat/completions", json=_chat(4, stream=False), timeout=10)
    out = r.json()
    assert out["object"] == "chat.completion"
    assert out["choices"][0]["message"]["content"].split()[0] == "Paris"
    assert out["usage"]["completion_tokens"] == 4
    comp = httpx.post(
        fake.base + "/v1/completions",
        timeout=10,
        json={
            "model": MODEL,
            "prompt": "Hello there",
            "max_tokens": 5,
            "stream": True,
            "ignore_eos": True,
        },
    )
    cchunks = [json.loads(e) for e in _sse_events(comp.text)[:-1]]
    assert len(cchunks) == 5 and cchunks[-1]["choices"][0]["finish_reason"] == "length"
    assert cchunks[0]["object"] == "text_completion"
    gen = httpx.post(
        fake.base + "/generate",
        timeout=10,
        json={
            "text": "The capital city of France is",
            "stream": True,
            "sampling_params": {"max_new_tokens": 6, "ignore_eos": True},
        },
    )
    gchunks = [json.loads(e) for e in _sse_events(gen.text)[:-1]]
    assert [g["meta_info"]["completion_tokens"] for g in gchunks] == [1, 2, 3, 4, 5, 6]
    assert gchunks[-1]["text"].startswith(gchunks[-2]["text"])  # cumulative
    assert gchunks[-1]["meta_info"]["finish_reason"] == {"type": "length", "length": 6}
    assert gchunks[0]["meta_info"]["finish_reason"] is None


# --------------------------------------------------------------------------------------------
# Timing: TTFT 50 ms, ITL 10 ms. The schedule is checked exactly on a virtual clock; the real
# server is checked for what no host load can change (nothing is sent early). How close to
# the deadlines it sends on a real host is bench/accuracy.py's measurement (with host load).
# --------------------------------------------------------------------------------------------


class LateClock:
    """The fake's clock, but every wait wakes ``late_s`` after its deadline (a busy host)."""

    def __init__(self, late_s: float) -> None:
        self.t = time.perf_counter()
        self.late_s = late_s
        self.deadlines: list[float] = []

    def now(self) -> float:
        return self.t

    def sleep_until(self, deadline: float) -> None:
        self.deadlines.append(deadline)
        self.t = max(self.t, deadline) + self.late_s


@pytest.fixture
def fake_module(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The fake server's module, imported into this process (to drive one connection)."""
    import importlib

    monkeypatch.syspath_prepend(str(FAKE_PKG))
    monkeypatch.setenv("FAKE_SGLANG_TTFT_MS", "50")
    monkeypatch.setenv("FAKE_SGLANG_ITL_MS", "10")
    try:
        yield importlib.import_module("sglang._fake_server")
    finally:
        for name in [m for m in sys.modules if m == "sglang" or m.startswith("sglang.")]:
            del sys.modules[name]


def _serve_one(mod: Any, clock: LateClock, body: dict[str, Any]) -> tuple[float, bytes]:
    """One request through the fake's own HTTP handler on a socket pair, timed by ``clock``;
    returns (perf_counter just before the request was written, the raw response)."""
    argv = ["--model-path", MODEL]
    cfg = mod.resolve(mod.build_parser().parse_args(argv), argv)
    st = mod.State(cfg, mod.Logger("error"))
    st.clock = clock

    class OneHandler(mod.Handler):  # type: ignore[name-defined,misc]
        state = st

    server_end, client_end = socket.socketpair()

    def handle() -> None:
        with server_end:  # closing it ends the response (connection: close)
            OneHandler(server_end, ("127.0.0.1", 1), None)

    payload = json.dumps(body).encode()
    with client_end:
        worker = threading.Thread(target=handle)
        t_before = time.perf_counter()
        client_end.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n"
            b"connection: close\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n%s" % (len(payload), payload)
        )
        worker.start()
        client_end.settimeout(60)
        raw = b""
        while chunk := client_end.recv(65536):
            raw += chunk
        worker.join(60)
    return t_before, raw


@pytest.mark.parametrize("late_s", [0.0, 0.007, 0.02])
def test_token_deadlines_are_absolute(fake_module: Any, late_s: float) -> None:
    # Chunk i is due at (body received + TTFT + i x ITL). Waits that wake late (a busy host)
    # must not push the later deadlines back: sleeping for relative gaps would add them up.
    clock = LateClock(late_s)
    t_before, raw = _serve_one(fake_module, clock, _chat(30))
    assert raw.startswith(b"HTTP/1.1 200 ") and raw.count(b'"content":" ') == 30
    first, *rest = clock.deadlines
    assert len(rest) == 29
    assert first >= t_before + 0.050  # counted from when the body arrived, never earlier
    for i, deadline in enumerate(rest, start=1):
        assert deadline - first == pytest.approx(i * 0.010, abs=1e-9), (i, deadline - first)


def test_non_streamed_answer_at_the_last_deadline(fake_module: Any) -> None:
    clock = LateClock(0.02)
    t_before, raw = _serve_one(fake_module, clock, _chat(30, stream=False))
    assert raw.startswith(b"HTTP/1.1 200 ")
    (deadline,) = clock.deadlines  # one wait, for the last token: TTFT + 29 x ITL
    assert deadline >= t_before + 0.050 + 29 * 0.010


async def _timed_stream(client: httpx.AsyncClient, base: str, n: int) -> tuple[float, list[float]]:
    """(TTFT, ITLs) in seconds, from perf_counter on the client.

    The clock starts when httpx starts writing the request body (httpcore trace event), so
    it starts before the server's (which starts when the body has arrived). Chunks are
    time-stamped when their bytes arrive, before any parsing.
    """
    sent: dict[str, float] = {}

    async def trace(name: str, info: dict[str, Any]) -> None:
        if name == "http11.send_request_body.started":
            sent["t"] = time.perf_counter()

    body = _chat(n, stream_options={"include_usage": True})
    stamps: list[float] = []
    tokens = 0
    usage = None
    async with client.stream(
        "POST", base + "/v1/chat/completions", json=body, extensions={"trace": trace}
    ) as r:
        assert r.status_code == 200
        pending = b""
        async for raw in r.aiter_raw():
            now = time.perf_counter()
            pending += raw
            *events, pending = pending.split(b"\n\n")
            for ev in events:
                data = ev.removeprefix(b"data: ")
                if data == b"[DONE]":
                    continue
                obj = json.loads(data)
                if obj.get("usage"):
                    usage = obj["usage"]
                if obj["choices"] and obj["choices"][0]["delta"].get("content"):
                    tokens += 1
                    stamps.append(now)
    assert tokens == n and usage is not None and usage["completion_tokens"] == n
    return stamps[0] - sent["t"], [b - sent["t"] for b in stamps]


@pytest.mark.parametrize("concurrency", [1, 32])
def test_real_server_never_sends_early(fake: Fake, concurrency: int) -> None:
    # 32 streams at once: 32 server threads, each sleeping to its own deadlines.
    async def measure() -> list[tuple[float, list[float]]]:
        limits = httpx.Limits(max_connections=concurrency)
        async with httpx.AsyncClient(timeout=60, limits=limits) as client:
            return await asyncio.gather(
                *(_timed_stream(client, fake.base, 30) for _ in range(concurrency))
            )

    slack_s = 0.001  # the fake converts the kernel's receive stamp between clocks
    for ttft_s, since_send in asyncio.run(measure()):
        assert ttft_s >= 0.050 - slack_s, ttft_s
        for i, t in enumerate(since_send):
            assert t >= 0.050 + i * 0.010 - slack_s, (i, t)


def test_decode_batch_lines(fake: Fake) -> None:
    # 40 decode steps x 10 ms: a "Decode batch" line every ~0.4 s while generating.
    httpx.post(fake.base + "/v1/chat/completions", json=_chat(60, stream=False), timeout=10)
    assert re.search(
        r"Decode batch, #running-req: \d+, #token: \d+, token usage: [\d.]+, cuda graph: True, "
        r"gen throughput \(token/s\): [\d.]+, #queue-req: 0",
        fake.log(),
    )


# --------------------------------------------------------------------------------------------
# Flags that change the log and /server_info
# --------------------------------------------------------------------------------------------


def test_cuda_graph_and_memory_flags(tmp_path: Path) -> None:
    with launch(tmp_path, "--cuda-graph-max-bs-decode", "4", "--mem-fraction-static", "0.5") as f:
        log = f.log()
        assert "#tokens: 200000," in log
        assert "Capture target decode CUDA graph end. bs=[1, 2, 4], " in log
        si = httpx.get(f.base + "/server_info").json()
        assert si["mem_fraction_static"] == 0.5
        assert si["internal_states"][0]["decode_cuda_graph_bs"] == [1, 2, 4]
    with launch(tmp_path, "--disable-cuda-graph") as f:
        log = f.log()
        assert "Capture target" not in log
        assert "'--disable-cuda-graph' is deprecated" in log
        assert "cuda graph: False" in log
        si = httpx.get(f.base + "/server_info").json()
        assert si["internal_states"][0]["decode_cuda_graph_bs"] == []


def test_tp2_tags(tmp_path: Path) -> None:
    with launch(tmp_path, "--tp", "2") as f:  # an abbreviation of --tp-size, as in SGLang
        log = f.log()
        for rank in (0, 1):
            assert re.search(rf"^\[[\d\- :]+ TP{rank}\] KV Cache is allocated\.", log, re.M)
        assert re.search(r"^\[[\d\- :]+ TP0\] max_total_num_tokens=", log, re.M)
        assert not re.search(r"TP1\] max_total_num_tokens=", log)
        assert httpx.get(f.base + "/server_info").json()["tp_size"] == 2


# --------------------------------------------------------------------------------------------
# Fault modes
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fault", "needle"),
    [
        ("crash_on_start", "OSError: Qwen/Qwen2.5-0.5B-Instruct does not appear to have a file"),
        (
            "negative_kv",
            "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
        ),
        ("oom_during_capture", "torch.OutOfMemoryError: CUDA out of memory."),
        ("exception_during_capture", "Exception: Capture cuda graph failed: CUDA error"),
    ],
)
def test_startup_failures(tmp_path: Path, fault: str, needle: str) -> None:
    with launch(tmp_path, env={"FAKE_SGLANG_FAULT": fault}, wait=False) as f:
        assert f.wait_exit() == 1
        log = f.log()
        assert needle in log
        assert "server_args=" in log and "ready to roll" not in log
        if "capture" in fault:
            assert "Capture target prefill CUDA graph begin." in log
            assert "Capture cuda graph failed" in log


def test_oom_fault_is_cured_by_disabling_cuda_graphs(tmp_path: Path) -> None:
    with launch(tmp_path, "--disable-cuda-graph", env={"FAKE_SGLANG_FAULT": "oom_during_capture"}):
        pass  # became healthy


def test_never_ready(tmp_path: Path) -> None:
    with launch(tmp_path, env={"FAKE_SGLANG_FAULT": "never_ready"}, wait=False) as f:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with suppress(httpx.HTTPError):
                if httpx.get(f.base + "/v1/models").status_code == 200:
                    break
            time.sleep(0.02)
        time.sleep(0.3)  # well past FAKE_SGLANG_STARTUP_S
        assert httpx.get(f.base + "/v1/models").status_code == 200
        assert httpx.get(f.base + "/health").status_code == 503
        assert httpx.get(f.base + "/ready").status_code == 503


def test_answer_faults(tmp_path: Path) -> None:
    env = {
        "FAKE_SGLANG_FAULT": "wrong_answer",
        "FAKE_SGLANG_TTFT_MS": "1",
        "FAKE_SGLANG_ITL_MS": "1",
    }
    with launch(tmp_path, env=env) as f:
        out = httpx.post(f.base + "/v1/chat/completions", json=_chat(3, stream=False)).json()
        assert out["choices"][0]["message"]["content"].startswith(" Berlin")
    env["FAKE_SGLANG_FAULT"] = "empty_answer"
    with launch(tmp_path, env=env) as f:
        r = httpx.post(
            f.base + "/v1/chat/completions", json=_chat(3, stream_options={"include_usage": True})
        )
        chunks = [json.loads(e) for e in _sse_events(r.text)[:-1]]
        assert all(not (c["choices"] and c["choices"][0]["delta"].get("content")) for c in chunks)
        assert chunks[-1]["usage"]["completion_tokens"] == 3
    env["FAKE_SGLANG_FAULT"] = "garbage_answer"
    with launch(tmp_path, env=env) as f:
        out = httpx.post(f.base + "/v1/chat/completions", json=_chat(8, stream=False)).json()
        words = out["choices"][0]["message"]["content"].split()
        assert len(words) == 8 and "Paris" not in words


def test_eos_after(tmp_path: Path) -> None:
    env = {"FAKE_SGLANG_EOS_AFTER": "3", "FAKE_SGLANG_TTFT_MS": "1", "FAKE_SGLANG_ITL_MS": "1"}
    with launch(tmp_path, env=env) as f:
        out = httpx.post(
            f.base + "/v1/chat/completions", json=_chat(10, stream=False, ignore_eos=False)
        ).json()
        assert out["choices"][0]["finish_reason"] == "stop"
        assert out["usage"]["completion_tokens"] == 3
        out = httpx.post(f.base + "/v1/chat/completions", json=_chat(10, stream=False)).json()
        assert out["usage"]["completion_tokens"] == 10  # ignore_eos wins


def test_http_500_and_truncated_streams(tmp_path: Path) -> None:
    env = {
        "FAKE_SGLANG_FAULT": "http_500_every=2,truncate_stream_every=3",
        "FAKE_SGLANG_TTFT_MS": "1",
        "FAKE_SGLANG_ITL_MS": "1",
    }
    with launch(tmp_path, env=env) as f, httpx.Client(timeout=10) as c:
        url = f.base + "/v1/chat/completions"
        assert c.post(url, json=_chat(6)).status_code == 200  # 1
        bad = c.post(url, json=_chat(6))  # 2
        assert bad.status_code == 500 and bad.json()["code"] == 500
        with pytest.raises(httpx.RemoteProtocolError):  # 3: cut mid-stream
            c.post(url, json=_chat(6))
        assert c.post(url, json=_chat(6)).status_code == 500  # 4


def test_hang_after_tokens(tmp_path: Path) -> None:
    env = {
        "FAKE_SGLANG_FAULT": "hang_after_tokens=2",
        "FAKE_SGLANG_TTFT_MS": "1",
        "FAKE_SGLANG_ITL_MS": "1",
    }
    with launch(tmp_path, env=env) as f:
        got: list[str] = []
        timeout = httpx.Timeout(10, read=0.5)
        with (
            pytest.raises(httpx.ReadTimeout),
            httpx.stream(
                "POST", f.base + "/v1/chat/completions", json=_chat(6), timeout=timeout
            ) as r,
        ):
            for line in r.iter_lines():
                if '"content":" ' in line:
                    got.append(line)
        assert len(got) == 2


def test_die_after_requests(tmp_path: Path) -> None:
    env = {"FAKE_SGLANG_FAULT": "die_after_requests=2", "FAKE_SGLANG_TTFT_MS": "1"}
    with launch(tmp_path, env=env) as f:
        url = f.base + "/v1/chat/completions"
        assert httpx.post(url, json=_chat(3)).status_code == 200
        got: list[str] = []
        with (
            pytest.raises(httpx.RemoteProtocolError),
            httpx.stream("POST", url, json=_chat(3)) as r,
        ):
            assert r.status_code == 200  # the 2nd request starts...
            got.extend(line for line in r.iter_lines() if '"content":" ' in line)
        assert len(got) == 1  # ...and the process dies at its first token
        assert f.wait_exit() == 137


# --------------------------------------------------------------------------------------------
# Shutdown and child processes
# --------------------------------------------------------------------------------------------


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with suppress(OSError):
            kids += [int(x) for x in (task / "children").read_text().split()]
    return kids


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_sigterm_is_graceful_and_kills_children(tmp_path: Path) -> None:
    with launch(tmp_path, env={"FAKE_SGLANG_SPAWN_CHILD": "1"}) as f:
        kids = _children(f.proc.pid)
        assert len(kids) == 1
        cmdline = Path(f"/proc/{kids[0]}/cmdline").read_bytes()
        assert cmdline.startswith(b"sglang::scheduler\0")
        f.proc.send_signal(signal.SIGTERM)
        assert f.wait_exit() == 0
        # nothing running, so nothing to wait for (how fast it exits is not a test's to time)
        assert "Gracefully exiting... Remaining number of requests 0." in f.log()
        deadline = time.monotonic() + 30
        while _alive(kids[0]) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not _alive(kids[0])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_child_survives_sigkill_of_parent_but_not_killpg(tmp_path: Path) -> None:
    with launch(tmp_path, env={"FAKE_SGLANG_SPAWN_CHILD": "1"}) as f:
        kid = _children(f.proc.pid)[0]
        f.proc.kill()
        f.wait_exit()
        assert _alive(kid)  # orphaned, still in the process group
        os.killpg(f.proc.pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while _alive(kid) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not _alive(kid)


def test_metrics_and_scheduler_lines_follow_the_requests_in_flight(tmp_path: Path) -> None:
    """With --max-running-requests 2 and 5 requests at once: 2 run, 3 wait, in /metrics
    (0.5.17's names and labels) and in the Decode lines, which core.scheduler_log reads."""
    from prometheus_client.parser import text_string_to_metric_families

    from core.scheduler_log import parse_scheduler_lines

    env = {"FAKE_SGLANG_ITL_MS": "20"}
    with launch(
        tmp_path, "--enable-metrics", "--max-running-requests", "2",
        "--decode-log-interval", "5", env=env,
    ) as f:  # fmt: skip

        def one() -> None:
            httpx.post(f.base + "/v1/chat/completions", json=_chat(40), timeout=30)

        threads = [threading.Thread(target=one) for _ in range(5)]
        for t in threads:
            t.start()
        seen: dict[str, float] = {}
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and seen.get("sglang:num_queue_reqs") != 3:
            fams = text_string_to_metric_families(httpx.get(f.base + "/metrics").text)
            seen = {s.name: s.value for fam in fams for s in fam.samples if "mode" not in s.labels}
        assert seen["sglang:num_queue_reqs"] == 3 and seen["sglang:num_running_reqs"] == 2
        for t in threads:
            t.join(timeout=30)
        fams = list(text_string_to_metric_families(httpx.get(f.base + "/metrics").text))
        passes = {
            s.labels["mode"]: s.value
            for fam in fams
            for s in fam.samples
            if s.name == "sglang:cuda_graph_passes_total"
        }
        assert passes["decode_cuda_graph"] > 0 and "decode_none" not in passes
        assert sum(n for m, n in passes.items() if m.startswith("prefill_")) >= 5
        labels = next(
            s.labels for fam in fams for s in fam.samples if s.name == "sglang:num_used_tokens"
        )
        assert {"engine_type", "model_name", "tp_rank", "pp_rank"} <= set(labels)
        names = {s.name for fam in fams for s in fam.samples}
        assert {"sglang:num_retracted_reqs", "sglang:token_usage", "sglang:gen_throughput"} <= (
            names
        )
        lines = parse_scheduler_lines(f.log())
    decode = [r for r in lines if r["kind"] == "decode"]
    assert max(r["running_req"] for r in decode) == 2
    assert max(r["queue_req"] for r in lines) == 3
    assert all(r["graph"] for r in decode) and all("ts" in r for r in decode)


def test_no_enable_metrics_means_no_metrics(tmp_path: Path) -> None:
    with launch(tmp_path) as f:
        assert httpx.get(f.base + "/metrics").status_code == 404
        httpx.post(f.base + "/v1/chat/completions", json=_chat(60), timeout=10)
        assert "Decode batch, #running-req: 1" in f.log()


def test_generate_returns_token_logprobs_the_sglang_adapter_reads(tmp_path: Path) -> None:
    """The SGLang adapter's logprob request, sent to the fake's native /generate, comes back
    in SGLang's shape ([logprob, token_id, text] per token) and parses to one entry per
    generated token, each with its asked-for alternatives."""
    from core.engines.sglang import SGLangAdapter

    adapter = SGLangAdapter(sys.executable)
    path, body = adapter.logprobs_request(MODEL, "The capital of France is", 4, 2)
    assert path == "/generate" and body["return_logprob"] is True
    with launch(tmp_path) as fake:
        resp = httpx.post(fake.base + path, json=body, timeout=30)
    assert resp.status_code == 200, resp.text
    tokens = adapter.parse_logprobs(resp.json())
    assert len(tokens) == 4
    assert "".join(t.token for t in tokens) == resp.json()["text"]
    assert all(t.logprob < 0 and len(t.top) == 2 for t in tokens)
    assert tokens[0].top[tokens[0].token] == tokens[0].logprob
