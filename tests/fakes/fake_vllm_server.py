"""FAKE vLLM 0.26 server (``vllm serve``), for tests only: standard library, real HTTP,
starts in about 0.2 s.

Launched exactly like the real one, with ``tests/fakes/vllm_pkg`` first on the path::

    PYTHONPATH=tests/fakes/vllm_pkg python -m vllm.entrypoints.cli.main serve MODEL \\
        --host 127.0.0.1 --port P [flags]

What it imitates (the line formats are vLLM 0.26.0's, read from its wheel; file:line in
core/engines/vllm_log.py):

* ``serve --help=all`` prints the real 0.26.0 option list (tests/fixtures/vllm-help/);
  a flag not in it exits 2 like argparse; dotted ``-cc.KEY=VALUE`` items are merged;
* the start-up log on stderr, each line prefixed by its process as vLLM does
  (``(APIServer pid=N)``, ``(EngineCore pid=N)``): the engine config line with
  ``cudagraph_mode``, the attention backend, ``Model loading took``, ``Available KV cache
  memory``, the graph-memory profiling line, ``GPU KV cache size``, ``Graph capturing
  finished`` (graphs on only), ``init engine … took``; then the periodic stats line and,
  with ``--cudagraph-metrics``, the runtime-mode table while requests run;
* HTTP: ``/health``, ``/version``, ``/v1/models`` (with ``max_model_len``), ``/metrics``
  (0.26's names: ``vllm:num_requests_running``, ``vllm:num_requests_waiting``,
  ``vllm:kv_cache_usage_perc``, ``vllm:num_preemptions_total``,
  ``vllm:prefix_cache_queries_total``/``hits_total``, ``vllm:cache_config_info``, the
  TTFT/ITL histograms), ``POST /v1/completions`` and ``/v1/chat/completions`` (streamed in
  OpenAI's format, ``[DONE]`` last; ``logprobs``, ``echo``, ``prompt_logprobs``);
* generation: one word a token (`` Paris`` first when the prompt asks for the capital of
  France), five words then EOS unless ``ignore_eos`` or ``min_tokens``;
* the scheduler: at most ``--max-num-seqs`` (default 256) run at once, the rest wait.

Simulated numbers: an H200 of 139.8 GiB; weights 0.25 GiB; 2 GiB of activations; graphs
(on unless ``-cc.cudagraph_mode=NONE`` or ``--enforce-eager``) take 0.5 GiB *out of the KV
budget*, as since 0.21; 65,536 KV tokens per GiB. Environment: ``FAKE_VLLM_ITL_MS``
(default 4), ``FAKE_VLLM_NO_GRAPH_ITL_MS`` (default 3 x that), ``FAKE_VLLM_TTFT_MS``
(default 15), ``FAKE_VLLM_STATS_S`` (default 0.5).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

VERSION = "0.26.0"
HELP_FILE = Path(__file__).resolve().parents[1] / "fixtures" / "vllm-help" / f"{VERSION}.txt"
WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel")
GPU_GIB, WEIGHTS_GIB, ACTIVATIONS_GIB, GRAPHS_GIB = 139.8, 0.25, 2.0, 0.5
TOKENS_PER_GIB, BLOCK = 65536, 16
_VALUED = {
    "--host", "--port", "--tokenizer", "--tensor-parallel-size", "-tp", "--dtype",
    "--gpu-memory-utilization", "--attention-backend", "--max-num-seqs", "--max-model-len",
    "--load-format", "--seed", "--compilation-config", "-cc", "--served-model-name",
}  # fmt: skip


def _env_ms(name: str, default: float) -> float:
    return float(os.environ.get(name, default)) / 1000


class Options:
    """The command line, parsed like vLLM's FlexibleArgumentParser (the parts used here)."""

    def __init__(self, argv: list[str]) -> None:
        known = set(HELP_FILE.read_text().split()) if HELP_FILE.exists() else set()
        self.model = ""
        self.values: dict[str, str] = {}
        self.flags: set[str] = set()
        self.cc: dict[str, Any] = {}
        i = 0
        while i < len(argv):
            item = argv[i]
            if not item.startswith("-"):
                self.model = self.model or item
                i += 1
                continue
            key, eq, value = item.partition("=")
            if key.startswith(("-cc.", "--compilation-config.")):
                self.cc[key.split(".", 1)[1]] = _json_or_text(value)
                i += 1
                continue
            if not any(k.rstrip(",.") == key for k in known):
                print(f"vllm serve: error: unrecognized arguments: {item}", file=sys.stderr)
                sys.exit(2)
            if key in _VALUED:
                self.values[key] = value if eq else argv[i + 1]
                i += 1 if eq else 2
            else:
                self.flags.add(key)
                i += 1
        if "--compilation-config" in self.values:
            self.cc.update(json.loads(self.values["--compilation-config"]))

    def get(self, key: str, default: str) -> str:
        return self.values.get(key, default)

    @property
    def graphs(self) -> bool:
        return "--enforce-eager" not in self.flags and self.cc.get("cudagraph_mode") != "NONE"


def _json_or_text(value: str) -> Any:
    try:
        return json.loads(value)
    except ValueError:
        return value


class Log:
    """Lines on stderr in vLLM's format: ``(PROC pid=N) LEVEL MM-DD HH:MM:SS [file:line] msg``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pid = os.getpid()

    def __call__(self, proc: str, where: str, message: str, level: str = "INFO") -> None:
        stamp = time.strftime("%m-%d %H:%M:%S")
        pid = self.pid + (1 if proc == "EngineCore" else 0)
        head = f"({proc} pid={pid}) {level} {stamp} [{where}] "
        with self.lock:
            print(
                "\n".join(head + line for line in message.split("\n")), file=sys.stderr, flush=True
            )


class Engine:
    """The running requests, the waiting ones, and the counters /metrics shows."""

    def __init__(self, opts: Options, log: Log) -> None:
        self.opts, self.log = opts, log
        self.model = opts.get("--served-model-name", opts.model)
        self.max_seqs = int(opts.get("--max-num-seqs", "256"))
        self.slots = threading.BoundedSemaphore(self.max_seqs)
        self.lock = threading.Lock()
        self.running = self.waiting = 0
        self.prompt_tokens = self.gen_tokens = self.queries = self.hits = 0
        self.ttft: list[float] = []
        self.passes: dict[int, int] = {}
        self.itl_s = _env_ms("FAKE_VLLM_ITL_MS", 4)
        if not opts.graphs:
            self.itl_s = _env_ms("FAKE_VLLM_NO_GRAPH_ITL_MS", self.itl_s * 3000)
        self.ttft_s = _env_ms("FAKE_VLLM_TTFT_MS", 15)
        util = float(opts.get("--gpu-memory-utilization", "0.9"))
        graphs = GRAPHS_GIB if opts.graphs else 0.0
        self.kv_gib = round(util * GPU_GIB - WEIGHTS_GIB - ACTIVATIONS_GIB - graphs, 2)
        self.blocks = int(self.kv_gib * TOKENS_PER_GIB) // BLOCK
        self.max_len = int(opts.get("--max-model-len", "8192"))
        self.util = util

    def kv_usage(self) -> float:
        return min(1.0, self.running * 64 / max(1, self.blocks * BLOCK))


def start_up(opts: Options, log: Log, engine: Engine) -> None:
    """The start-up lines, in 0.26's order."""
    log(
        "APIServer",
        "api_utils.py:325",
        f"vLLM server version {VERSION}, serving model {opts.model}",
    )
    mode = "FULL_AND_PIECEWISE: (2, 1)" if opts.graphs else "NONE: 0"
    cmode = "NONE: 0" if "--enforce-eager" in opts.flags else "VLLM_COMPILE: 3"
    sizes = [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64] if opts.graphs else []
    log(
        "EngineCore",
        "core.py:117",
        f"Initializing a V1 LLM engine (v{VERSION}) with config: model='{opts.model}', "
        f"speculative_config=None, tokenizer='{opts.get('--tokenizer', opts.model)}', "
        f"dtype=torch.bfloat16, max_seq_len={engine.max_len}, load_format="
        f"{opts.get('--load-format', 'auto')}, tensor_parallel_size="
        f"{opts.get('--tensor-parallel-size', '1')}, pipeline_parallel_size=1, "
        f"enforce_eager={'--enforce-eager' in opts.flags}, kv_cache_dtype=auto, "
        f"device_config=cuda, seed=0, served_model_name={engine.model}, "
        f"enable_prefix_caching=True, enable_chunked_prefill=True, "
        f"compilation_config={{'mode': <CompilationMode.{cmode}>, 'cudagraph_mode': "
        f"<CUDAGraphMode.{mode}>, 'cudagraph_capture_sizes': {sizes}, "
        f"'max_cudagraph_capture_size': {sizes[-1] if sizes else 0}}}",
    )
    chosen = opts.get("--attention-backend", "")
    if chosen:
        log("EngineCore", "cuda.py:422", f"Using {chosen} backend.")
    else:
        log(
            "EngineCore",
            "cuda.py:483",
            "Using FLASH_ATTN attention backend out of potential backends: "
            "['FLASH_ATTN', 'FLASHINFER', 'TRITON_ATTN', 'FLEX_ATTENTION'].",
        )
    log(
        "EngineCore",
        "gpu_model_runner.py:5348",
        f"Model loading took {WEIGHTS_GIB} GiB memory and 0.412345 seconds",
    )
    log("EngineCore", "gpu_worker.py:561", f"Available KV cache memory: {engine.kv_gib} GiB")
    if opts.graphs:
        equiv = round(engine.util - GRAPHS_GIB / GPU_GIB, 4)
        log(
            "EngineCore",
            "gpu_worker.py:575",
            f"CUDA graph memory profiling is enabled (default since v0.21.0). The current "
            f"--gpu-memory-utilization={engine.util:.4f} is equivalent to "
            f"--gpu-memory-utilization={equiv:.4f} without CUDA graph memory profiling. To "
            "maintain the same effective KV cache size as before, increase "
            f"--gpu-memory-utilization to {engine.util + GRAPHS_GIB / GPU_GIB:.4f}. To disable, "
            "set VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0.",
        )
    tokens = engine.blocks * BLOCK
    log("EngineCore", "kv_cache_utils.py:2177", f"GPU KV cache size: {tokens:,} tokens")
    log(
        "EngineCore",
        "kv_cache_utils.py:2179",
        f"Maximum concurrency for {engine.max_len:,} tokens per request: "
        f"{tokens / engine.max_len:.2f}x",
    )
    if opts.graphs:
        log(
            "EngineCore",
            "gpu_model_runner.py:6845",
            f"Graph capturing finished in 2 secs, took {GRAPHS_GIB:.2f} GiB",
        )
        log(
            "EngineCore",
            "core.py:341",
            "init engine (profile, create kv cache, warmup model) took 4.81 s "
            "(compilation: 2.10 s)",
        )
    else:
        log(
            "EngineCore",
            "core.py:348",
            "init engine (profile, create kv cache, warmup model) took 1.93 s",
        )


def stats_loop(engine: Engine, log: Log, period_s: float) -> None:
    """The periodic stats line (loggers.py), only while not idle, as vLLM does."""
    last_p = last_g = 0
    while True:
        time.sleep(period_s)
        with engine.lock:
            p, g, running, waiting = (
                engine.prompt_tokens,
                engine.gen_tokens,
                engine.running,
                engine.waiting,
            )
            passes, engine.passes = engine.passes, {}
            hit = engine.hits / engine.queries if engine.queries else 0.0
        if p == last_p and g == last_g and not running:
            continue
        log(
            "APIServer",
            "loggers.py:300",
            f"Engine 000: Avg prompt throughput: {(p - last_p) / period_s:.1f} tokens/s, Avg "
            f"generation throughput: {(g - last_g) / period_s:.1f} tokens/s, Running: {running} "
            f"reqs, Waiting: {waiting} reqs, GPU KV cache usage: {engine.kv_usage() * 100:.1f}%, "
            f"Prefix cache hit rate: {hit * 100:.1f}%",
        )
        if "--cudagraph-metrics" in engine.opts.flags and passes:
            mode = "FULL" if engine.opts.graphs else "NONE"
            rows = "\n".join(f"| {b} | {b} | 0 | {mode} | {n} |" for b, n in sorted(passes.items()))
            log(
                "APIServer",
                "cuda_graph.py:123",
                f"**CUDAGraph Config Settings:**\n\n- Mode: {mode}\n\n**CUDAGraph Stats:**\n\n"
                "| Unpadded Tokens | Padded Tokens | Num Paddings | Runtime Mode | Count |\n"
                f"|---|---|---|---|---|\n{rows}",
            )
        last_p, last_g = p, g


def metrics_text(engine: Engine) -> str:
    labels = f'engine="0",model_name="{engine.model}"'
    with engine.lock:
        rows = [
            ("vllm:num_requests_running", "gauge", engine.running),
            ("vllm:num_requests_waiting", "gauge", engine.waiting),
            ("vllm:kv_cache_usage_perc", "gauge", engine.kv_usage()),
            ("vllm:num_preemptions", "counter", 0),
            ("vllm:prompt_tokens", "counter", engine.prompt_tokens),
            ("vllm:generation_tokens", "counter", engine.gen_tokens),
            ("vllm:prefix_cache_queries", "counter", engine.queries),
            ("vllm:prefix_cache_hits", "counter", engine.hits),
        ]
        ttft = list(engine.ttft)
    out = []
    for name, kind, value in rows:
        sample = f"{name}_total" if kind == "counter" else name
        out += [
            f"# HELP {name} {name}",
            f"# TYPE {name} {kind}",
            f"{sample}{{{labels}}} {float(value)}",
        ]
    info = (
        f'block_size="{BLOCK}",gpu_memory_utilization="{engine.util}",'
        f'num_gpu_blocks="{engine.blocks}"'
    )
    out += ["# HELP vllm:cache_config_info info", "# TYPE vllm:cache_config_info gauge"]
    out.append(f'vllm:cache_config_info{{{info},engine="0"}} 1.0')
    out += [
        "# HELP vllm:time_to_first_token_seconds ttft",
        "# TYPE vllm:time_to_first_token_seconds histogram",
    ]
    for le in (0.01, 0.05, 0.1, 1.0):
        out.append(
            f'vllm:time_to_first_token_seconds_bucket{{{labels},le="{le}"}} '
            f"{float(sum(t <= le for t in ttft))}"
        )
    out.append(f'vllm:time_to_first_token_seconds_bucket{{{labels},le="+Inf"}} {float(len(ttft))}')
    out.append(f"vllm:time_to_first_token_seconds_count{{{labels}}} {float(len(ttft))}")
    out.append(f"vllm:time_to_first_token_seconds_sum{{{labels}}} {sum(ttft)}")
    return "\n".join(out) + "\n"


class Handler(BaseHTTPRequestHandler):
    server: FakeServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, code: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _json(self, code: int, data: Any) -> None:
        self._send(code, json.dumps(data).encode())

    def do_GET(self) -> None:
        engine = self.server.engine
        if self.path == "/health":
            self._send(200, b"")
        elif self.path == "/version":
            self._json(200, {"version": VERSION})
        elif self.path == "/v1/models":
            card = {"id": engine.model, "object": "model", "created": int(time.time()),
                    "owned_by": "vllm", "root": engine.opts.model, "parent": None,
                    "max_model_len": engine.max_len}  # fmt: skip
            self._json(200, {"object": "list", "data": [card]})
        elif self.path == "/metrics":
            self._send(200, metrics_text(engine).encode(), "text/plain; version=0.0.4")
        else:
            self._json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            req = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self._json(
                400, {"error": {"message": "not JSON", "type": "BadRequestError", "code": 400}}
            )
            return
        if self.path in ("/v1/completions", "/v1/chat/completions"):
            self._generate(req, chat=self.path.endswith("chat/completions"))
        else:
            self._json(404, {"detail": "Not Found"})

    def _prompt_words(self, req: dict[str, Any], chat: bool) -> list[str]:
        if chat:
            text = " ".join(str(m.get("content", "")) for m in req.get("messages") or [])
        else:
            prompt = req.get("prompt") or ""
            text = prompt if isinstance(prompt, str) else " ".join(map(str, prompt))
        return text.split() or ["<bos>"]

    def _generate(self, req: dict[str, Any], chat: bool) -> None:
        engine = self.server.engine
        n = int(req.get("max_completion_tokens") or req.get("max_tokens") or 16)
        if not req.get("ignore_eos") and req.get("min_tokens") is None:
            n = min(n, 5)  # the fake "model" emits EOS after five words
        prompt = self._prompt_words(req, chat)
        words = [" " + WORDS[i % len(WORDS)] for i in range(n)]
        if words and "capital of France" in " ".join(prompt):
            words[0] = " Paris"  # the sanity probe's answer
        with engine.lock:
            engine.waiting += 1
        engine.slots.acquire()
        t0 = time.perf_counter()
        with engine.lock:
            engine.waiting -= 1
            engine.running += 1
            engine.prompt_tokens += len(prompt)
            engine.queries += len(prompt)
            engine.hits += max(0, len(prompt) - 4) if engine.queries > len(prompt) else 0
        try:
            time.sleep(engine.ttft_s)
            with engine.lock:
                engine.ttft.append(time.perf_counter() - t0)
            if req.get("stream"):
                self._stream(req, words, prompt, chat)
            else:
                self._pace(len(words))
                self._json(200, self._whole(req, words, prompt, chat))
        finally:
            with engine.lock:
                engine.running -= 1
            engine.slots.release()

    def _pace(self, n: int) -> None:
        engine = self.server.engine
        for _ in range(n):
            time.sleep(engine.itl_s)
            with engine.lock:
                engine.gen_tokens += 1
                engine.passes[engine.running] = engine.passes.get(engine.running, 0) + 1

    def _logprobs(self, req: dict[str, Any], words: list[str]) -> dict[str, Any] | None:
        if req.get("logprobs") is None:
            return None
        top_n = int(req["logprobs"])
        return {
            "text_offset": [],
            "tokens": words,
            "token_logprobs": [-0.1 * (i + 1) for i in range(len(words))],
            "top_logprobs": [
                dict([(w, -0.1 * (i + 1)), (" zulu", -3.0)][: max(1, top_n)])
                for i, w in enumerate(words)
            ],
        }

    def _whole(
        self, req: dict[str, Any], words: list[str], prompt: list[str], chat: bool
    ) -> dict[str, Any]:
        finish = "length" if req.get("ignore_eos") or len(words) >= 5 else "stop"
        choice: dict[str, Any] = {"index": 0, "finish_reason": finish, "stop_reason": None}
        if chat:
            choice["message"] = {"role": "assistant", "content": "".join(words)}
        else:
            echo = " ".join(prompt) if req.get("echo") else ""
            choice["text"] = echo + "".join(words)
            choice["logprobs"] = self._logprobs(req, words)
            if req.get("prompt_logprobs") is not None:
                # vLLM: None for the first prompt token, then token id -> its entry
                choice["prompt_logprobs"] = [None] + [
                    {str(100 + i): {"logprob": -0.5, "rank": 1, "decoded_token": w}}
                    for i, w in enumerate(prompt[1:])
                ]
        p = len(prompt)
        return {
            "id": ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex,
            "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()),
            "model": self.server.engine.model,
            "choices": [choice],
            "usage": {
                "prompt_tokens": p,
                "completion_tokens": len(words),
                "total_tokens": p + len(words),
            },
        }

    def _chunk(self, data: dict[str, Any] | str) -> None:
        text = data if isinstance(data, str) else json.dumps(data)
        payload = f"data: {text}\n\n".encode()
        self.wfile.write(f"{len(payload):x}\r\n".encode() + payload + b"\r\n")
        self.wfile.flush()

    def _stream(self, req: dict[str, Any], words: list[str], prompt: list[str], chat: bool) -> None:
        engine = self.server.engine
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        kind = "chat.completion.chunk" if chat else "text_completion"
        base = {"id": ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex, "object": kind,
                "created": int(time.time()), "model": engine.model}  # fmt: skip

        def choice(text: str, finish: str | None = None) -> dict[str, Any]:
            if chat:
                return {
                    "index": 0,
                    "delta": {"content": text},
                    "logprobs": None,
                    "finish_reason": finish,
                }
            return {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": finish,
                "stop_reason": None,
            }

        if chat:
            role = {"role": "assistant", "content": ""}
            first = {"index": 0, "delta": role, "logprobs": None, "finish_reason": None}
            self._chunk({**base, "choices": [first]})
        for i, word in enumerate(words):
            if i:
                self._pace(1)
            else:
                with engine.lock:
                    engine.gen_tokens += 1
            self._chunk({**base, "choices": [choice(word)]})
        finish = "length" if req.get("ignore_eos") or len(words) >= 5 else "stop"
        self._chunk({**base, "choices": [choice("", finish)]})
        if (req.get("stream_options") or {}).get("include_usage"):
            p = len(prompt)
            usage = {
                "prompt_tokens": p,
                "completion_tokens": len(words),
                "total_tokens": p + len(words),
            }
            self._chunk({**base, "choices": [], "usage": usage})
        self._chunk("[DONE]")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


class FakeServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], engine: Engine) -> None:
        super().__init__(address, Handler)
        self.engine = engine


def serve(argv: list[str]) -> None:
    """``vllm serve …`` (argv after ``serve``)."""
    if argv and argv[0].startswith("--help"):
        print(HELP_FILE.read_text())
        return
    opts = Options(argv)
    if not opts.model:
        print("vllm serve: error: the following arguments are required: model_tag", file=sys.stderr)
        sys.exit(2)
    log = Log()
    engine = Engine(opts, log)
    start_up(opts, log, engine)
    host, port = opts.get("--host", "0.0.0.0"), int(opts.get("--port", "8000"))
    server = FakeServer((host, port), engine)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))  # the real one takes seconds
    log("APIServer", "api_server.py:677", f"Starting vLLM server on http://{host}:{port}")
    print(
        f"(APIServer pid={os.getpid()}) INFO:     Application startup complete.",
        file=sys.stderr,
        flush=True,
    )
    period = float(os.environ.get("FAKE_VLLM_STATS_S", "0.5"))
    threading.Thread(target=stats_loop, args=(engine, log, period), daemon=True).start()
    server.serve_forever()


def main() -> None:
    args = sys.argv[1:]
    if not args or args[0] != "serve":
        print("usage: vllm {serve} ...", file=sys.stderr)
        sys.exit(2)
    serve(args[1:])


if __name__ == "__main__":
    main()
