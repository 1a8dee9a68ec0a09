"""FAKE SGLang 0.5.23 server, for tests only (stdlib only; starts in about 0.1 s).

Launch it exactly like the real server, with this package first on the path::

    PYTHONPATH=/abs/path/tests/fakes/sglang_pkg \\
        python -m sglang.launch_server --model-path M --host 127.0.0.1 --port P [real flags]

``importlib.metadata.version("sglang")`` and ``sglang.__version__`` both give ``0.5.23``.

What it imitates (reference/sglang-interface.md §1, §2, §3, §5):

* the command line of ``sglang serve`` (``_fake_args``): abbreviations are allowed, so
  ``--cuda-graph-max-bs 8`` exits 2 with ``ambiguous option``; unknown flags exit 2;
* the 0.5.23 start-up log on stderr (uvicorn access lines on stdout), with ` TPn` tags when
  ``--tp-size`` > 1, CUDA-graph capture lines unless graphs are disabled, periodic
  ``Decode batch`` lines while generating (every ``--decode-log-interval`` x ITL seconds);
* the HTTP API: ``/health``, ``/health_generate``, ``/ready``, ``/v1/models[/{id}]``,
  ``/model_info`` (+ ``/get_model_info``), ``/server_info`` (+ ``/get_server_info``),
  ``/flush_cache``, ``/metrics`` (only with ``--enable-metrics``), ``POST /v1/chat/completions``,
  ``POST /v1/completions`` and ``POST /generate`` (streaming and not);
* the scheduler: at most ``--max-running-requests`` run at once, the rest wait (their TTFT
  counts from admission); ``Prefill batch``/``Decode batch`` lines and ``/metrics``
  (0.5.17's names and labels: ``num_running_reqs``, ``num_queue_reqs``, ``num_used_tokens``,
  ``token_usage``, ``gen_throughput``, ``num_retracted_reqs``,
  ``cuda_graph_passes_total{mode=decode_cuda_graph|decode_none|prefill_...}``, one decode
  pass per ITL) follow the requests actually in flight;
* SIGTERM/SIGINT: ``Gracefully exiting...``, then exit 0 within about 1 s.

Simulated numbers: an H200 with 139.81 GB; weights 0.98 GB (divided by tp);
``#tokens = int(mem_fraction_static * 400000)`` (``mem_fraction_static`` defaults to 0.85; capped by
``--max-total-tokens``); the default decode CUDA-graph max batch size is 8 (so ``bs=[1, 2, 4, 8]``);
the model architecture and context length come from ``<model-path>/config.json`` when that exists
(else ``Qwen2ForCausalLM``, 32768).

Generation: each output token is one short word with a leading space (`` Paris`` first when the
last user message mentions "capital of France", then words from a fixed list), so splitting the
text on whitespace counts tokens. ``usage.prompt_tokens`` is only approximate: the number of
whitespace-separated words of the prompt (all message contents). Token budget:
``max_completion_tokens`` or ``max_tokens`` (chat and completions, default 16),
``sampling_params.max_new_tokens`` (``/generate``, default 128). The server always produces
the whole budget (``finish_reason`` ``length``) unless ``ignore_eos`` is false and
``FAKE_SGLANG_EOS_AFTER`` is set (then it stops with ``stop`` after that many tokens; the EOS
token itself has no text and is not counted).

Environment variables:

``FAKE_SGLANG_TTFT_MS`` (default 20)
    delay from receiving the request body to sending the first content chunk (the chat role
    chunk goes out with it; the response headers go out at once). "Received" is the kernel's
    receive time of the bytes that completed the body (``SO_TIMESTAMPNS`` on Linux), so a
    thread that gets the GIL late under load does not shift the deadline.
``FAKE_SGLANG_ITL_MS`` (default 5)
    delay between two content chunks. Chunks are sent at absolute deadlines
    ``t_body + TTFT + i * ITL`` (``time.perf_counter``), so delays do not drift. A non-streamed
    request is answered at the last token's deadline.
``FAKE_SGLANG_NO_GRAPH_ITL_MS`` (default: ``FAKE_SGLANG_ITL_MS``)
    the delay between two content chunks when decode CUDA graphs are off
    (``--disable-cuda-graph``, or ``--cuda-graph-config`` with decode disabled), so a
    graphs on/off A/B has an effect to find.
``FAKE_SGLANG_STARTUP_S`` (default 0.3)
    time from process start to ready. The HTTP port opens after about half of it (after the
    simulated load and capture); ``/health`` and ``/ready`` return 503 until the simulated
    warmup is done (``--skip-server-warmup``: ready as soon as the port is open).
``FAKE_SGLANG_HEALTH_DELAY_MS`` (default 0)
    extra delay of a successful ``/health`` (the real one takes >= 1 s).
``FAKE_SGLANG_LIKE`` (default 0.5.23)
    ``0.5.17`` answers like the real 0.5.17 that ServeLab ran on an H200 (fixtures
    ``30-v0517-*``): the decode batch sizes on the capture *begin* line only, an ``Engine
    startup timings (s):`` line, and a ``/server_info`` whose ``internal_states`` lack
    ``decode_cuda_graph_bs`` (``world_size`` null, ``version`` 0.5.17).
``FAKE_SGLANG_NO_METRICS`` (unset)
    ``1``: ``/metrics`` answers 404 as if ``--enable-metrics`` were not given (ServeLab always
    passes it), so the server's view must come from the scheduler lines of its log.
``FAKE_SGLANG_EOS_AFTER`` (unset)
    stop after this many tokens when the request does not set ``ignore_eos``.
``FAKE_SGLANG_SPAWN_CHILD`` (unset/0)
    ``N`` starts N child processes that sleep for an hour, with ``sglang::scheduler`` (or
    ``sglang::scheduler_TP{i}`` when tp > 1) as argv[0] and process name. They are killed on
    SIGTERM and on start-up failures, but NOT when the main process dies abruptly
    (``die_after_requests``, SIGKILL), so tests can check that a launcher kills the whole
    process tree / group.
``FAKE_SGLANG_ANSWERS`` (unset)
    what ``/generate`` asked with ``return_logprob`` answers: a toy model's greedy tokens,
    logprobs and teacher-forced input logprobs, with injected faults (``_fake_model``).
``FAKE_SGLANG_FAULT`` (unset)
    comma-separated fault modes:

    ``crash_on_start``            traceback right after the ``server_args=`` line, exit 1
    ``negative_kv``               ``RuntimeError: Not enough memory. Please try to increase
                                  --mem-fraction-static...`` after the weights load, exit 1
    ``oom_during_capture``        ``torch.OutOfMemoryError: CUDA out of memory...`` then
                                  ``Exception: Capture cuda graph failed: ...`` after the first
                                  capture begin line, exit 1 (no effect when graphs are disabled)
    ``exception_during_capture``  same with ``RuntimeError: CUDA error: an illegal memory access``
    ``never_ready``               HTTP comes up, ``/health`` stays 503 forever
    ``empty_answer``              every content chunk is ``""`` (token counts unchanged)
    ``garbage_answer``            tokens are random non-words and `` NaN``
    ``wrong_answer``              the first token is `` Berlin``
    ``http_500_every=N``          every Nth generation request returns HTTP 500 (JSON error)
    ``truncate_stream_every=N``   the Nth, 2Nth... generation request, when streamed, is cut
                                  after half of its tokens (connection closed; no finish
                                  chunk, no ``[DONE]``)
    ``hang_after_tokens=N``       every stream stalls forever after N content chunks (a
                                  non-streamed request with more than N tokens never answers)
    ``die_after_requests=N``      the Nth generation request starts (headers sent), and at its
                                  first-token deadline the process calls ``os._exit(137)``
                                  without a word, cutting every stream in flight

    "Generation requests" are those to ``/v1/chat/completions``, ``/v1/completions`` and
    ``/generate`` (the simulated warmup is not counted); they share one counter, numbered
    from 1 in arrival order.

Log streams: SGLang and uvicorn lines go to stderr, uvicorn access lines
(``[ts] INFO:     127.0.0.1:PORT - "POST /v1/chat/completions HTTP/1.1" 200 OK``) to stdout,
as with the real server; merge the two. Lines are flushed one by one.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shlex
import signal
import socket
import socketserver
import struct
import subprocess
import sys
import threading
import time
import uuid
from email.utils import formatdate
from typing import Any
from urllib.parse import urlsplit

from sglang import __version__
from sglang._fake_args import (
    GPU_AVAIL_AT_START_GB,
    GPU_TOTAL_GB,
    WEIGHT_GB,
    Config,
    build_parser,
    resolve,
    resolved_args,
)
from sglang._fake_log import (
    Logger,
    capture_failure_traceback,
    crash_on_start_traceback,
    negative_kv_traceback,
)
from sglang._fake_model import FakeModel, parse_answers_mode

perf = time.perf_counter

FILLER = [
    " The", " quick", " brown", " fox", " jumps", " over", " the", " lazy", " dog", " and",
    " then", " it", " runs", " far", " away", " into", " a", " green", " forest", " near",
    " river", " where", " many", " birds", " sing", " every", " morning", " while", " sun",
    " rises", " slowly", " above", " hills",
]  # fmt: skip
EOS_TOKEN_ID = 151645
WORD_IDS = {w: 1000 + i for i, w in enumerate(FILLER)}
FLUSH_OK = (
    "Cache flushed.\nPlease check backend logs for more details. (When there are running or "
    "waiting requests, the operation will not be performed.)\n"
)
FLUSH_FAIL = (
    "Cache not flushed.\nPlease check backend logs for more details. (When there are running or "
    "waiting requests, the operation will not be performed.)\n"
)
TERMINATOR = b"0\r\n\r\n"
SO_TIMESTAMPNS = 35  # Linux; not exported by the socket module
GARBAGE = "bcdfghjklmnpqrstvwxz#@"


def _env_float(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, "") or default)
    except ValueError:
        return default


def parse_faults(text: str) -> dict[str, int]:
    faults: dict[str, int] = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        name, _, value = item.partition("=")
        try:
            faults[name.strip()] = int(value) if value else 1
        except ValueError:
            faults[name.strip()] = 1
    return faults


def sleep_until(deadline: float) -> None:
    delay = deadline - perf()
    if delay > 0:
        time.sleep(delay)


class Clock:
    """Where the token schedule reads the time and waits. Tests of the fake swap in a virtual
    clock (``State.clock``) to check the schedule exactly, whatever the host's load."""

    def now(self) -> float:
        return perf()

    def sleep_until(self, deadline: float) -> None:
        sleep_until(deadline)


def word_count(text: str) -> int:
    return len(text.split())


def sse(payload: str) -> bytes:
    """One SSE event as one HTTP/1.1 chunk."""
    data = b"data: " + payload.encode() + b"\n\n"
    return b"%X\r\n%s\r\n" % (len(data), data)


class Active:
    """A request in flight (read by the decode reporter and /metrics)."""

    __slots__ = ("admitted_at", "generated", "plan", "prompt_tokens", "rid")

    def __init__(self, rid: str, prompt_tokens: int) -> None:
        self.rid = rid
        self.admitted_at = 0.0
        self.prompt_tokens = prompt_tokens
        self.generated = 0
        # (first deadline, ITL, tokens) of a non-streamed request, whose progress is computed
        self.plan: tuple[float, float, int] | None = None

    def progress(self, now: float) -> int:
        if self.plan is None:
            return self.generated
        first, itl, n = self.plan
        if now < first:
            return 0
        return n if itl <= 0 else min(n, int((now - first) / itl) + 1)


class Histogram:
    def __init__(self, buckets: list[float]) -> None:
        self.buckets = buckets
        self.counts = [0] * len(buckets)
        self.total = 0
        self.sum = 0.0

    def observe(self, value: float, n: int = 1) -> None:
        for i, b in enumerate(self.buckets):
            if value <= b:
                self.counts[i] += n
        self.total += n
        self.sum += value * n


class State:
    def __init__(self, cfg: Config, log: Logger) -> None:
        self.cfg = cfg
        self.log = log
        self.tag0 = " TP0" if cfg.tp > 1 else ""
        self.ttft = _env_float("FAKE_SGLANG_TTFT_MS", 20.0) / 1000.0
        self.itl = _env_float("FAKE_SGLANG_ITL_MS", 5.0) / 1000.0
        if not cfg.decode.enabled:  # decode without CUDA graphs: slower where a test says so
            self.itl = _env_float("FAKE_SGLANG_NO_GRAPH_ITL_MS", self.itl * 1000.0) / 1000.0
        self.startup_s = _env_float("FAKE_SGLANG_STARTUP_S", 0.3)
        self.health_delay = _env_float("FAKE_SGLANG_HEALTH_DELAY_MS", 0.0) / 1000.0
        eos = os.environ.get("FAKE_SGLANG_EOS_AFTER", "").strip()
        self.eos_after = int(eos) if eos.isdigit() else None
        self.faults = parse_faults(os.environ.get("FAKE_SGLANG_FAULT", ""))
        self.like_0517 = os.environ.get("FAKE_SGLANG_LIKE", "").strip() == "0.5.17"
        # as if launched without --enable-metrics, whatever its argv says
        self.no_metrics = os.environ.get("FAKE_SGLANG_NO_METRICS", "") in ("1", "true")
        answers = parse_answers_mode(os.environ.get("FAKE_SGLANG_ANSWERS", ""))
        if str(cfg.args.kv_cache_dtype).startswith("fp8"):
            answers.setdefault("drift", 0.05)
        self.model = FakeModel(answers, FILLER)
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.up = False
        self.exiting = False
        self.seq = 0
        self.active: dict[str, Active] = {}
        # requests past --max-running-requests wait here for a slot, as in SGLang's
        # waiting queue (#queue-req, sglang:num_queue_reqs)
        self.queued = 0
        self.slot_free = threading.Condition(self.lock)
        # forward passes by mode, as sglang:cuda_graph_passes_total{mode=...} counts them
        self.passes: dict[str, float] = {}
        self.gen_done = 0
        self.prompt_total = 0
        self.requests_total = 0
        self.aborted_total = 0
        self.last_gen_throughput = 0.0
        self.last_prefill_t = perf()
        self.ttft_hist = Histogram(
            [
                0.1,
                0.2,
                0.4,
                0.6,
                0.8,
                1,
                2,
                4,
                6,
                8,
                10,
                20,
                40,
                60,
                80,
                100,
                200,
                400,
                float("inf"),
            ]
        )
        self.itl_hist = Histogram(
            [
                0.002,
                0.004,
                0.006,
                0.008,
                0.01,
                0.015,
                0.02,
                0.025,
                0.03,
                0.035,
                0.04,
                0.06,
                0.08,
                0.1,
                0.2,
                0.4,
                0.6,
                0.8,
                1,
                2,
                4,
                6,
                8,
                float("inf"),
            ]
        )
        self.e2e_hist = Histogram(
            [
                0.1,
                0.2,
                0.4,
                0.6,
                0.8,
                1,
                2,
                4,
                6,
                8,
                10,
                20,
                40,
                60,
                80,
                100,
                200,
                400,
                800,
                float("inf"),
            ]
        )
        self.children: list[subprocess.Popen[bytes]] = []
        self.start_unix = int(time.time())
        self.t0 = perf()
        self.clock = Clock()
        self.startup_time: dict[str, Any] = {
            "load_weight": 0.0,
            "kv_cache_allocation": 0.0,
            "scheduler_e2e": 0.0,
            "cuda_graph": {
                "prefill": None,
                "decode": None,
                "target_verify": None,
                "draft_prefill": None,
                "draft_decode": None,
                "draft_extend": None,
            },
        }
        self.mem: dict[str, Any] = {}

    # --- request bookkeeping ---
    def next_seq(self) -> int:
        with self.lock:
            self.seq += 1
            return self.seq

    def begin(self, prompt_tokens: int) -> Active:
        """Admit a request (waiting while --max-running-requests are running) and log its
        prefill batch; ``admitted_at`` is when its prefill started."""
        req = Active(uuid.uuid4().hex, prompt_tokens)
        with self.lock:
            if len(self.active) >= self.cfg.max_running_requests:
                self.queued += 1
                while len(self.active) >= self.cfg.max_running_requests and not self.stop.is_set():
                    self.slot_free.wait(0.5)
                self.queued -= 1
            queued = self.queued
            running = len(self.active)
            now = perf()
            req.admitted_at = now
            used = sum(r.prompt_tokens + r.progress(now) for r in self.active.values())
            self.active[req.rid] = req
            self.requests_total += 1
            self.prompt_total += prompt_tokens
            thr = prompt_tokens / max(now - self.last_prefill_t, 1e-3)
            self.last_prefill_t = now
        cg = self.cfg.prefill.enabled and prompt_tokens <= self.cfg.prefill.max_bs
        self.count_passes("prefill_cuda_graph" if cg else "prefill_none", 1)
        usage = used / max(self.cfg.max_total_num_tokens, 1)
        self.log.sglang(
            f"Prefill batch, #new-seq: 1, #new-token: {prompt_tokens}, #cached-token: 0, "
            f"token usage: {usage:.2f}, #running-req: {running}, #queue-req: {queued}, "
            f"#pending-token: 0, cuda graph: {cg}, input throughput (token/s): {thr:.2f}",
            self.tag0,
        )
        return req

    def end(self, req: Active, t_start: float, t_first: float | None, aborted: bool) -> None:
        now = perf()
        with self.lock:
            self.active.pop(req.rid, None)
            self.slot_free.notify()
            self.gen_done += req.generated
            if aborted:
                self.aborted_total += 1
            if t_first is not None:
                self.ttft_hist.observe(t_first - t_start)
                if req.generated > 1:
                    self.itl_hist.observe((now - t_first) / (req.generated - 1), req.generated - 1)
            if not aborted:
                self.e2e_hist.observe(now - t_start)

    def count_passes(self, mode: str, n: float) -> None:
        with self.lock:
            self.passes[mode] = self.passes.get(mode, 0.0) + n

    def snapshot(self) -> tuple[int, int, int]:
        """(running requests, tokens in the KV pool, generated tokens so far)."""
        now = perf()
        with self.lock:
            act = list(self.active.values())
            gen = self.gen_done
        done = [r.progress(now) for r in act]
        used = sum(r.prompt_tokens for r in act) + sum(done)
        return len(act), used, gen + sum(done)

    # --- generated text ---
    def words(self, prompt_text: str, n: int, seq: int) -> list[str]:
        if "empty_answer" in self.faults:
            return [""] * n
        if "garbage_answer" in self.faults:
            rng = random.Random(seq)
            out = []
            for _ in range(n):
                if rng.random() < 0.3:
                    out.append(" NaN")
                else:
                    k = rng.randint(3, 7)
                    out.append(" " + "".join(rng.choice(GARBAGE) for _ in range(k)))
            return out
        words: list[str] = []
        if "wrong_answer" in self.faults:
            words.append(" Berlin")
        elif "capital of france" in prompt_text.lower():
            words.append(" Paris")
        i = 0
        while len(words) < n:
            words.append(FILLER[i % len(FILLER)])
            i += 1
        return words[:n]

    def budget(self, requested: int, ignore_eos: bool) -> tuple[int, str]:
        if not ignore_eos and self.eos_after is not None and self.eos_after < requested:
            return self.eos_after, "stop"
        return requested, "length"


# ---------------------------------------------------------------------------------------------
# Per-endpoint stream formats. ``token(i)`` returns the bytes sent at token i's deadline
# (without the tail); ``tail()`` returns what follows the last token (finish/usage/[DONE]).
# ---------------------------------------------------------------------------------------------


def usage_json(prompt: int, completion: int, cache_report: bool) -> str:
    details = '{"cached_tokens":0}' if cache_report else "null"
    return (
        f'{{"prompt_tokens":{prompt},"total_tokens":{prompt + completion},'
        f'"completion_tokens":{completion},"prompt_tokens_details":{details},'
        f'"reasoning_tokens":0,"completion_tokens_details":null}}'
    )


class ChatFormat:
    def __init__(
        self,
        model: str,
        words: list[str],
        finish: str,
        prompt: int,
        include_usage: bool,
        cache_report: bool,
    ) -> None:
        self.words = words
        self.finish = finish
        rid = "chatcmpl-" + uuid.uuid4().hex
        self.head = (
            f'{{"id":"{rid}","object":"chat.completion.chunk","created":{int(time.time())},'
            f'"model":{json.dumps(model)},"choices":[{{"index":0,"delta":{{"reasoning_content":null'
        )
        self.usage_head = (
            f'{{"id":"{rid}","object":"chat.completion.chunk","created":{int(time.time())},'
            f'"model":{json.dumps(model)},"choices":[],"usage":'
        )
        self.prompt = prompt
        self.include_usage = include_usage
        self.cache_report = cache_report
        self.rid = rid
        self.model = model

    def _chunk(self, delta_rest: str, finish: str | None = None, matched: str = "null") -> bytes:
        fr = "null" if finish is None else f'"{finish}"'
        return sse(
            f'{self.head}{delta_rest}}},"logprobs":null,"finish_reason":{fr},'
            f'"matched_stop":{matched}}}]}}'
        )

    def role(self) -> bytes:
        return self._chunk(',"role":"assistant","content":""')

    def token(self, i: int) -> bytes:
        out = self._chunk(',"content":' + json.dumps(self.words[i]))
        return self.role() + out if i == 0 else out

    def tail(self, n: int) -> bytes:
        matched = str(EOS_TOKEN_ID) if self.finish == "stop" else "null"
        out = self._chunk("", self.finish, matched)
        if self.include_usage:
            out += sse(self.usage_head + usage_json(self.prompt, n, self.cache_report) + "}")
        return out + sse("[DONE]")

    def full(self, n: int) -> dict[str, Any]:
        return {
            "id": self.rid,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model,
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": "".join(self.words[:n]),
                        "reasoning_content": None,
                    },
                    "logprobs": None,
                    "finish_reason": self.finish,
                    "matched_stop": EOS_TOKEN_ID if self.finish == "stop" else None,
                }
            ],
            "usage": json.loads(usage_json(self.prompt, n, self.cache_report)),
            "metadata": {"weight_version": "default"},
        }


class CompletionFormat:
    def __init__(
        self,
        model: str,
        words: list[str],
        finish: str,
        prompt: int,
        include_usage: bool,
        cache_report: bool,
    ) -> None:
        self.words = words
        self.finish = finish
        self.rid = "cmpl-" + uuid.uuid4().hex
        self.model = model
        self.head = (
            f'{{"id":"{self.rid}","object":"text_completion","created":{int(time.time())},'
            f'"model":{json.dumps(model)},"choices":'
        )
        self.prompt = prompt
        self.include_usage = include_usage
        self.cache_report = cache_report
        self.n = len(words)
        # asked with ``logprobs`` (non-streamed): the toy model's, OpenAI's shape
        self.logprobs: dict[str, Any] | None = None

    def token(self, i: int) -> bytes:
        last = i == self.n - 1
        fr = f'"{self.finish}"' if last else "null"
        ms = str(EOS_TOKEN_ID) if last and self.finish == "stop" else "null"
        return sse(
            f'{self.head}[{{"index":0,"text":{json.dumps(self.words[i])},"logprobs":null,'
            f'"finish_reason":{fr},"matched_stop":{ms}}}],"usage":null}}'
        )

    def tail(self, n: int) -> bytes:
        out = b""
        if n == 0:
            out += sse(
                f'{self.head}[{{"index":0,"text":"","logprobs":null,'
                f'"finish_reason":"{self.finish}","matched_stop":null}}],"usage":null}}'
            )
        if self.include_usage:
            u = json.loads(usage_json(self.prompt, n, self.cache_report))
            u = {k: v for k, v in u.items() if v is not None}
            out += sse(self.head + '[],"usage":' + json.dumps(u, separators=(",", ":")) + "}")
        return out + sse("[DONE]")

    def full(self, n: int) -> dict[str, Any]:
        return {
            "id": self.rid,
            "object": "text_completion",
            "created": int(time.time()),
            "model": self.model,
            "choices": [
                {
                    "index": 0,
                    "text": "".join(self.words[:n]),
                    "logprobs": self.logprobs,
                    "finish_reason": self.finish,
                    "matched_stop": EOS_TOKEN_ID if self.finish == "stop" else None,
                }
            ],
            "usage": json.loads(usage_json(self.prompt, n, self.cache_report)),
            "metadata": {"weight_version": "default"},
        }


class GenerateFormat:
    """``/generate``: cumulative ``text`` and ``output_ids``; finish_reason on the last chunk."""

    def __init__(
        self, words: list[str], finish: str, prompt: int, t_start: float, metrics: bool
    ) -> None:
        self.words = words
        self.finish = finish
        self.prompt = prompt
        self.rid = uuid.uuid4().hex
        self.t_start = t_start
        self.t_first: float | None = None
        self.metrics = metrics
        self.received_ts = time.time()
        self.text = ""
        self.ids: list[str] = []
        self.n = len(words)
        # return_logprob: top_logprobs_num (0: the chosen token's only); None: not asked
        self.logprobs: int | None = None
        # the toy model's answer (_fake_model): meta_info fields, when asked with logprobs
        self.model_meta: dict[str, Any] = {}
        self.output_ids: list[int] | None = None

    def _finish_json(self, n: int) -> str:
        if self.finish == "stop":
            return f'{{"type":"stop","matched":{EOS_TOKEN_ID}}}'
        return f'{{"type":"length","length":{n}}}'

    def _meta(self, k: int, last: bool) -> str:
        fin = self._finish_json(k) if last else "null"
        meta = (
            f'{{"id":"{self.rid}","finish_reason":{fin},"prompt_tokens":{self.prompt},'
            f'"weight_version":"default","num_retractions":0,"reasoning_tokens":0,'
            f'"completion_tokens":{k},"cached_tokens":0'
        )
        if last:
            e2e = perf() - self.t_start
            meta += f',"e2e_latency":{e2e:.6f}'
            if self.metrics:
                ftl = (self.t_first or perf()) - self.t_start
                meta += (
                    f',"request_received_ts":{self.received_ts:.6f},"first_token_latency":{ftl:.6f}'
                    f',"request_finished_ts":{time.time():.6f},"queue_time":0.0001'
                    f',"decode_throughput":{max(k - 1, 0) / max(e2e - ftl, 1e-6):.3f}'
                )
        return meta + "}"

    def token(self, i: int) -> bytes:
        if i == 0:
            self.t_first = perf()
        w = self.words[i]
        self.text += w
        self.ids.append(str(WORD_IDS.get(w, 2000 + i)))
        last = i == self.n - 1
        return sse(
            f'{{"text":{json.dumps(self.text)},"output_ids":[{",".join(self.ids)}],'
            f'"meta_info":{self._meta(i + 1, last)}}}'
        )

    def tail(self, n: int) -> bytes:
        out = b""
        if n == 0:
            out += sse(f'{{"text":"","output_ids":[],"meta_info":{self._meta(0, True)}}}')
        return out + sse("[DONE]")

    def full(self, n: int) -> dict[str, Any]:
        text = "".join(self.words[:n])
        ids = [WORD_IDS.get(w, 2000 + i) for i, w in enumerate(self.words[:n])]
        meta = json.loads(self._meta(n, True))
        if self.output_ids is not None:
            meta.update(self.model_meta)
            return {"text": text, "output_ids": self.output_ids[:n], "meta_info": meta}
        if self.logprobs is not None:
            # SGLang's shape: [logprob, token_id, text] per token (return_text_in_logprobs),
            # and per position a list of the top alternatives in the same shape.
            chosen = [
                [-0.25 * (i + 1), t, w]
                for i, (t, w) in enumerate(zip(ids, self.words[:n], strict=True))
            ]
            meta["output_token_logprobs"] = chosen
            meta["output_top_logprobs"] = [
                [c, [c[0] - 1.5, 1999, " else"]][: self.logprobs] for c in chosen
            ]
        return {"text": text, "output_ids": ids, "meta_info": meta}


# ---------------------------------------------------------------------------------------------
# HTTP
# ---------------------------------------------------------------------------------------------

_PHRASES = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


def _message_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p for p in content if isinstance(p, dict) and p.get("type") == "text"]
        return " ".join(str(p.get("text", "")) for p in parts)
    return ""


class BadRequest(Exception):
    pass


class Handler(socketserver.BaseRequestHandler):
    """A minimal HTTP/1.1 server connection (keep-alive, chunked responses).

    It parses requests itself (instead of ``http.server``) to read the kernel's receive
    timestamp of each request body (``SO_TIMESTAMPNS``): with 32 busy threads a thread may get
    the GIL a few ms after its request arrived, and the TTFT deadline must not move with that.
    """

    state: State  # set on the class by main()
    request: socket.socket

    def setup(self) -> None:
        sock = self.request
        self.sendall = sock.sendall
        self.close_connection = False
        self.command = ""
        self.path = ""
        self.headers: dict[str, str] = {}
        self.t_last = perf()
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.kernel_ts = False
        if sys.platform.startswith("linux"):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
                self.kernel_ts = True

    def _recv(self) -> bytes:
        """One recv; sets ``t_last`` to the kernel's receive time of the data (Linux)."""
        if not self.kernel_ts:
            data = self.request.recv(65536)
            self.t_last = perf()
            return data
        data, anc, _, _ = self.request.recvmsg(65536, 256)
        self.t_last = perf()
        for level, typ, raw in anc:
            if level == socket.SOL_SOCKET and typ == SO_TIMESTAMPNS and len(raw) >= 16:
                sec, nsec = struct.unpack("qq", raw[:16])
                a = perf()
                now_real = time.time()
                b = perf()
                self.t_last = min(self.t_last, sec + nsec * 1e-9 - now_real + (a + b) / 2)
        return data

    def handle(self) -> None:
        buf = b""
        while not self.close_connection:
            try:
                if not buf:
                    buf = self._recv()
                    if not buf:
                        return
                while b"\r\n\r\n" not in buf:
                    if len(buf) > 65536:
                        raise BadRequest("headers too large")
                    buf += self._need_more()
                head, _, buf = buf.partition(b"\r\n\r\n")
                body, buf = self._parse(head, buf)
                self._dispatch(body)
            except BadRequest as exc:
                self.close_connection = True
                with contextlib.suppress(OSError):
                    self._send(400, str(exc).encode(), "text/plain; charset=utf-8")
                return
            except OSError:
                return

    def _parse(self, head: bytes, rest: bytes) -> tuple[bytes, bytes]:
        lines = head.decode("latin-1").split("\r\n")
        try:
            self.command, self.path, version = lines[0].split(" ", 2)
        except ValueError as exc:
            raise BadRequest(f"bad request line {lines[0]!r}") from exc
        headers = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        self.headers = headers
        conn = headers.get("connection", "").lower()
        self.close_connection = conn == "close" or (version == "HTTP/1.0" and conn != "keep-alive")
        if headers.get("transfer-encoding", "").lower() == "chunked":
            parts: list[bytes] = []
            while True:
                while b"\r\n" not in rest:
                    rest += self._need_more()
                size_line, _, rest = rest.partition(b"\r\n")
                try:
                    size = int(size_line.split(b";")[0].strip() or b"0", 16)
                except ValueError as exc:
                    raise BadRequest("bad chunk size") from exc
                if size == 0:
                    while b"\r\n" not in rest:
                        rest += self._need_more()
                    _, _, rest = rest.partition(b"\r\n")  # (no trailers expected)
                    return b"".join(parts), rest
                while len(rest) < size + 2:
                    rest += self._need_more()
                parts.append(rest[:size])
                rest = rest[size + 2 :]
        try:
            length = int(headers.get("content-length") or 0)
        except ValueError as exc:
            raise BadRequest("bad content-length") from exc
        while len(rest) < length:
            rest += self._need_more()
        return rest[:length], rest[length:]

    def _need_more(self) -> bytes:
        data = self._recv()
        if not data:
            raise ConnectionResetError("client closed the connection mid-request")
        return data

    # --- low-level responses ---
    def _head(self, code: int, ctype: str | None, length: int | None) -> bytes:
        lines = [
            f"HTTP/1.1 {code} {_PHRASES.get(code, 'OK')}",
            f"date: {formatdate(usegmt=True)}",
            "server: uvicorn",
        ]
        if length is not None:
            lines.append(f"content-length: {length}")
        if ctype:
            lines.append(f"content-type: {ctype}")
        if length is None:
            lines.append("transfer-encoding: chunked")
        if self.close_connection:
            lines.append("connection: close")
        host, port = self.client_address[:2]
        self.state.log.access(
            f"{host}:{port}", self.command, self.path, code, _PHRASES.get(code, "OK")
        )
        return ("\r\n".join(lines) + "\r\n\r\n").encode()

    def _send(self, code: int, body: bytes = b"", ctype: str | None = "application/json") -> None:
        self.sendall(self._head(code, ctype, len(body)) + body)

    def _json(self, code: int, obj: Any) -> None:
        self._send(code, json.dumps(obj, separators=(",", ":")).encode())

    def _openai_error(self, code: int, message: str, typ: str = "BadRequestError") -> None:
        self._json(
            code, {"object": "error", "message": message, "type": typ, "param": None, "code": code}
        )

    def _dispatch(self, body: bytes) -> None:
        st = self.state
        # Deadlines count from the kernel's receive time of the bytes that completed the
        # request body, however late this thread got the GIL.
        t_body = self.t_last
        path = urlsplit(self.path).path
        if st.cfg.args.api_key and not (path.startswith("/health") or path.startswith("/metrics")):
            auth = self.headers.get("authorization", "")
            if auth != f"Bearer {st.cfg.args.api_key}":
                self._json(401, {"error": "Unauthorized"})
                return
        get_routes = {
            "/health": self._health,
            "/health_generate": self._health,
            "/ready": self._ready,
            "/v1/models": self._models,
            "/model_info": self._model_info,
            "/get_model_info": self._model_info,
            "/server_info": self._server_info,
            "/get_server_info": self._server_info,
            "/metrics": self._metrics,
        }
        post_routes = {
            "/v1/chat/completions": "chat",
            "/v1/completions": "completion",
            "/generate": "generate",
        }
        try:
            if path in get_routes:
                if self.command != "GET":
                    self._json(405, {"detail": "Method Not Allowed"})
                else:
                    get_routes[path]()
            elif path == "/flush_cache" and self.command in ("GET", "POST"):
                self._flush_cache()
            elif path.startswith("/v1/models/") and self.command == "GET":
                self._model_card(path[len("/v1/models/") :])
            elif path in post_routes:
                if self.command != "POST":
                    self._json(405, {"detail": "Method Not Allowed"})
                else:
                    self._generation(post_routes[path], body, t_body)
            else:
                self._json(404, {"detail": "Not Found"})
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    # --- simple endpoints ---
    def _health(self) -> None:
        st = self.state
        if st.exiting or not st.up:
            self._send(503, b"", None)
            return
        if st.health_delay:
            time.sleep(st.health_delay)
        self._send(200, b"", None)

    def _ready(self) -> None:
        st = self.state
        self._send(200 if st.up and not st.exiting else 503, b"", None)

    def _card(self) -> dict[str, Any]:
        cfg = self.state.cfg
        return {
            "id": cfg.served_model_name,
            "object": "model",
            "created": self.state.start_unix,
            "owned_by": "sglang",
            "root": cfg.served_model_name,
            "parent": None,
            "max_model_len": cfg.context_len,
        }

    def _models(self) -> None:
        self._json(200, {"object": "list", "data": [self._card()]})

    def _model_card(self, model_id: str) -> None:
        if model_id == self.state.cfg.served_model_name:
            self._json(200, self._card())
        else:
            self._json(
                404,
                {
                    "error": {
                        "message": f"The model '{model_id}' does not exist",
                        "type": "invalid_request_error",
                        "param": "model",
                        "code": "model_not_found",
                    }
                },
            )

    def _model_info(self) -> None:
        cfg = self.state.cfg
        if self.path.startswith("/get_model_info"):
            self.state.log.sglang(
                "Endpoint '/get_model_info' is deprecated and will be removed in a future "
                "version. Please use '/model_info' instead.",
                level=30,
            )
        self._json(
            200,
            {
                "model_path": cfg.args.model_path,
                "served_model_name": cfg.served_model_name,
                "tokenizer_path": cfg.tokenizer_path,
                "is_generation": True,
                "preferred_sampling_params": None,
                "weight_version": "default",
                "load_format": cfg.args.load_format,
                "reasoning_parser": cfg.args.reasoning_parser,
                "tool_call_parser": cfg.args.tool_call_parser,
                "disaggregation_mode": "null",
                "has_image_understanding": False,
                "has_audio_understanding": False,
                "model_type": cfg.model_type,
                "architectures": [cfg.architecture],
            },
        )

    def _server_info(self) -> None:
        st = self.state
        cfg = st.cfg
        if self.path.startswith("/get_server_info"):
            st.log.sglang(
                "Endpoint '/get_server_info' is deprecated and will be removed in a future "
                "version. Please use '/server_info' instead.",
                level=30,
            )
        args = resolved_args(cfg)
        mem = st.mem
        internal = dict(args)
        internal.update(
            world_size=cfg.tp,
            startup_time=st.startup_time,
            effective_max_running_requests_per_dp=cfg.max_running_requests,
            last_gen_throughput=round(st.last_gen_throughput, 3),
            memory_usage={
                "weight": mem.get("weight", 0.0),
                "kvcache": mem.get("kvcache", 0.0),
                "startup_available": mem.get("startup_available", 0.0),
                "token_capacity": cfg.max_total_num_tokens,
                "token_capacity_swa": None,
                "graph": {
                    "prefill": mem.get("graph_prefill", 0.0),
                    "decode": mem.get("graph_decode", 0.0),
                    "target_verify": 0.0,
                    "draft_prefill": 0.0,
                    "draft_decode": 0.0,
                    "draft_extend": 0.0,
                },
            },
            disaggregation_mode="null",
            decode_cuda_graph_bs=list(cfg.captured_decode_bs),
            decode_cuda_graph_memory_gb=mem.get("graph_decode", 0.0),
        )
        if st.like_0517:  # the real 0.5.17's internal_states (tests/fixtures/sglang-server-info)
            internal.update(world_size=None)
            del internal["decode_cuda_graph_bs"], internal["decode_cuda_graph_memory_gb"]
        info = dict(args)
        info.update(
            launch_command=shlex.join([sys.executable, "-m", "sglang.launch_server", *cfg.argv]),
            status="ready",
            max_total_num_tokens=cfg.max_total_num_tokens,
            max_req_input_len=cfg.context_len - 1,
            hicache_object_layout=None,
            kv_events=None,
            startup_time=st.startup_time,
            version="0.5.17" if st.like_0517 else __version__,
            # what the real server's environment would change (its routing simulation):
            # echoed so a test can see the variable reached the server process
            fake_simulate_env={
                k: v for k, v in os.environ.items() if k.startswith("SGLANG_SIMULATE_")
            },
            frontend="python",
            internal_states=[internal],
        )
        self._json(200, info)

    def _flush_cache(self) -> None:
        running, _, _ = self.state.snapshot()
        if running:
            self._send(400, FLUSH_FAIL.encode(), "text/plain; charset=utf-8")
            return
        self.state.log.sglang("Cache flushed successfully!", self.state.tag0)
        self._send(200, FLUSH_OK.encode(), "text/plain; charset=utf-8")

    def _metrics(self) -> None:
        st = self.state
        if not st.cfg.args.enable_metrics or st.no_metrics:
            self._json(404, {"detail": "Not Found"})
            return
        self._send(200, render_metrics(st).encode(), "text/plain; version=0.0.4; charset=utf-8")

    # --- generation ---
    def _generation(self, kind: str, body: bytes, t_body: float) -> None:
        st = self.state
        cfg = st.cfg
        try:
            req = json.loads(body or b"{}")
            if not isinstance(req, dict):
                raise ValueError("the request body must be a JSON object")
        except ValueError as exc:
            if kind == "generate":
                self._json(400, {"error": {"message": f"Invalid JSON: {exc}"}})
            else:
                self._openai_error(400, f"Invalid JSON: {exc}")
            return

        seq = st.next_seq()
        faults = st.faults
        if faults.get("http_500_every") and seq % faults["http_500_every"] == 0:
            msg = "Internal server error (injected by FAKE_SGLANG_FAULT=http_500_every)."
            if kind == "generate":
                self._json(500, {"error": {"message": msg}})
            else:
                self._openai_error(500, msg, "InternalServerError")
            return

        model = str(req.get("model") or "default")
        stream = bool(req.get("stream", False))
        include_usage = bool((req.get("stream_options") or {}).get("include_usage")) or (
            cfg.args.stream_response_default_include_usage
        )
        if kind == "chat":
            messages = req.get("messages")
            if not isinstance(messages, list) or not messages:
                self._openai_error(400, "messages: Field required")
                return
            texts = [_message_text(m.get("content")) for m in messages if isinstance(m, dict)]
            prompt_tokens = sum(word_count(t) for t in texts)
            users = [
                _message_text(m.get("content"))
                for m in messages
                if isinstance(m, dict) and m.get("role") == "user"
            ]
            prompt_text = users[-1] if users else (texts[-1] if texts else "")
            requested = req.get("max_completion_tokens") or req.get("max_tokens") or 16
            ignore_eos = bool(req.get("ignore_eos", False))
        elif kind == "completion":
            prompt = req.get("prompt", "")
            if isinstance(prompt, list) and prompt and isinstance(prompt[0], int):
                prompt_tokens, prompt_text = len(prompt), ""
            else:
                prompt_text = prompt if isinstance(prompt, str) else " ".join(map(str, prompt))
                prompt_tokens = word_count(prompt_text)
            requested = req.get("max_tokens") or 16
            ignore_eos = bool(req.get("ignore_eos", False))
        else:
            sp = req.get("sampling_params") or {}
            text = req.get("text")
            if isinstance(text, list) or isinstance((req.get("input_ids") or [None])[0], list):
                self._json(
                    400,
                    {
                        "error": {
                            "message": "Batch requests are not supported by the fake SGLang server."
                        }
                    },
                )
                return
            if text is None and req.get("input_ids") is not None:
                prompt_text, prompt_tokens = "", len(req["input_ids"])
            else:
                prompt_text = str(text or "")
                prompt_tokens = word_count(prompt_text)
            requested = sp.get("max_new_tokens")
            requested = 128 if requested is None else requested
            ignore_eos = bool(sp.get("ignore_eos", False))
        if prompt_tokens >= cfg.context_len:
            msg = (
                f"The input ({prompt_tokens} tokens) is longer than the model's context "
                f"length ({cfg.context_len} tokens)."
            )
            if kind == "generate":
                self._json(400, {"error": {"message": msg}})
            else:
                self._openai_error(400, msg)
            return

        n, finish = st.budget(max(int(requested), 0), ignore_eos)
        words = st.words(prompt_text, n, seq)
        cache_report = cfg.args.enable_cache_report
        fmt: ChatFormat | CompletionFormat | GenerateFormat
        if kind == "chat":
            fmt = ChatFormat(model, words, finish, prompt_tokens, include_usage, cache_report)
        elif kind == "completion":
            fmt = CompletionFormat(model, words, finish, prompt_tokens, include_usage, cache_report)
            if isinstance(req.get("logprobs"), int) and not isinstance(req["logprobs"], bool):
                words = _completion_logprobs(st.model, req, prompt_text, n, fmt)
                fmt.words = words
        else:
            fmt = GenerateFormat(words, finish, prompt_tokens, t_body, cfg.args.enable_metrics)
            if req.get("return_logprob"):
                fmt.logprobs = int(req.get("top_logprobs_num") or 0)
                words = _model_answer(st.model, req, prompt_text, n, fmt)
                fmt.words = words

        active = st.begin(prompt_tokens)
        # a queued request's first token comes a TTFT after its admission
        first_deadline = max(t_body, active.admitted_at) + st.ttft
        hang = faults.get("hang_after_tokens")
        # die_after_requests=N: the Nth request dies with the process at its first token
        die = bool(faults.get("die_after_requests")) and seq >= faults["die_after_requests"]
        t_first: float | None = None
        aborted = False
        try:
            if not stream:
                if die:
                    st.clock.sleep_until(first_deadline)
                    os._exit(137)
                if hang is not None and hang < n:
                    active.plan = (first_deadline, st.itl, hang)
                    st.stop.wait()
                    return
                # the toy model's answers (the answers check, never measured) skip the
                # decode time: a check of 16 prompts x 48 tokens must not add seconds per run
                itl = 0.0 if _toy_answer(fmt) else st.itl
                active.plan = (first_deadline, itl, n)
                st.clock.sleep_until(first_deadline + max(n - 1, 0) * itl)
                t_first = first_deadline  # when the first token was (notionally) made
                if isinstance(fmt, GenerateFormat):
                    fmt.t_first = t_first
                active.plan = None
                active.generated = n
                self._json(200, fmt.full(n))
                return
            cut = None
            every = faults.get("truncate_stream_every")
            if every and seq % every == 0:
                cut = max(1, n // 2) if n >= 2 else 1
            if die:
                cut = 1
            self.sendall(self._head(200, "text/event-stream; charset=utf-8", None))
            write = self.sendall
            itl = st.itl
            for i in range(n):
                if hang is not None and i >= hang:
                    st.stop.wait()
                    return
                st.clock.sleep_until(first_deadline + i * itl)
                buf = fmt.token(i)
                is_cut = cut is not None and i + 1 == cut
                if i == n - 1 and not is_cut:
                    buf += fmt.tail(n) + TERMINATOR
                write(buf)
                if i == 0:
                    t_first = st.clock.now()
                active.generated = i + 1
                if is_cut:
                    if die:
                        os._exit(137)
                    aborted = True
                    self.close_connection = True
                    with contextlib.suppress(OSError):
                        self.request.shutdown(socket.SHUT_RDWR)
                    return
            if n == 0:
                st.clock.sleep_until(first_deadline)
                if die:
                    os._exit(137)
                write(fmt.tail(0) + TERMINATOR)
        except (BrokenPipeError, ConnectionResetError):
            aborted = True
            self.close_connection = True
        finally:
            st.end(active, t_body, t_first, aborted)


def _model_answer(
    model: FakeModel, req: dict[str, Any], prompt_text: str, n: int, fmt: GenerateFormat
) -> list[str]:
    """The toy model's greedy answer with its logprobs (and, with ``logprob_start_len``
    >= 0, the input's own), set on ``fmt``; the words it says."""
    ids = req.get("input_ids")
    prompt = [int(i) for i in ids] if isinstance(ids, list) else model.ids_of_text(prompt_text)
    k = int(req.get("top_logprobs_num") or 0)
    chosen, tops = model.generate(prompt, n, k)
    meta: dict[str, Any] = {"output_token_logprobs": chosen, "output_top_logprobs": tops}
    start = req.get("logprob_start_len")
    if isinstance(start, int) and start >= 0:
        inputs, input_tops = model.score(prompt, start, k)
        meta.update(input_token_logprobs=inputs, input_top_logprobs=input_tops)
    fmt.model_meta = meta
    fmt.output_ids = [int(c[1]) for c in chosen]  # type: ignore[call-overload]
    return [str(c[2]) for c in chosen]


def _toy_answer(fmt: ChatFormat | CompletionFormat | GenerateFormat) -> bool:
    if isinstance(fmt, GenerateFormat):
        return fmt.output_ids is not None
    return isinstance(fmt, CompletionFormat) and fmt.logprobs is not None


def _completion_logprobs(
    model: FakeModel, req: dict[str, Any], prompt_text: str, n: int, fmt: CompletionFormat
) -> list[str]:
    """The toy model's greedy answer in OpenAI's ``logprobs`` shape (``echo``: the prompt's
    tokens first, the very first with a null logprob), set on ``fmt``; the words it says."""
    prompt = req.get("prompt")
    ids = [int(i) for i in prompt] if isinstance(prompt, list) else model.ids_of_text(prompt_text)
    k = int(req["logprobs"])
    chosen, tops = model.generate(ids, n, k)
    entries: list[tuple[list[object], list[list[object]] | None]] = list(
        zip(chosen, tops, strict=True)
    )
    if req.get("echo"):
        echoed, echo_tops = model.score(ids, 0, k)
        entries = list(zip(echoed, echo_tops, strict=True)) + entries
    fmt.logprobs = {
        "tokens": [str(c[2]) for c, _ in entries],
        "token_logprobs": [c[0] for c, _ in entries],
        "top_logprobs": [None if t is None else {str(x[2]): x[0] for x in t} for _, t in entries],
        "text_offset": list(range(len(entries))),
    }
    return [str(c[2]) for c in chosen]


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024


# ---------------------------------------------------------------------------------------------
# Metrics
# ---------------------------------------------------------------------------------------------


def _fmt_float(v: float) -> str:
    if v == float("inf"):
        return "+Inf"
    return repr(float(v))


def render_metrics(st: State) -> str:
    cfg = st.cfg
    running, used, gen = st.snapshot()
    name = cfg.served_model_name.replace("\\", "\\\\").replace('"', '\\"')
    sched = f'engine_type="unified",model_name="{name}",moe_ep_rank="0",pp_rank="0",tp_rank="0"'
    tok = f'engine_type="unified",model_name="{name}"'
    out: list[str] = []

    def metric(mname: str, mtype: str, help_: str, samples: list[tuple[str, str, float]]) -> None:
        out.append(f"# HELP {mname} {help_}")
        out.append(f"# TYPE {mname} {mtype}")
        for suffix, labels, value in samples:
            out.append(f"{mname}{suffix}{{{labels}}} {_fmt_float(value)}")

    def gauge(mname: str, help_: str, value: float, labels: str = sched) -> None:
        metric(mname, "gauge", help_, [("", labels, value)])

    def counter(mname: str, help_: str, value: float) -> None:
        metric(mname, "counter", help_, [("", tok, value)])

    def histogram(mname: str, help_: str, h: Histogram, extra: str = "") -> None:
        labels = tok + extra
        samples: list[tuple[str, str, float]] = [
            ("_bucket", f'{labels},le="{_fmt_float(b)}"', c)
            for b, c in zip(h.buckets, h.counts, strict=True)
        ]
        samples += [("_count", labels, h.total), ("_sum", labels, h.sum)]
        metric(mname, "histogram", help_, samples)

    usage = used / max(cfg.max_total_num_tokens, 1)
    mem = st.mem
    gauge("sglang:num_running_reqs", "The number of running requests.", running)
    with st.lock:
        queued = st.queued
        passes = dict(st.passes)
    gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.", queued)
    # 0.5.17's retraction and pause gauges (the fake never runs out of KV: always 0)
    gauge("sglang:num_retracted_reqs", "The number of retracted requests.", 0, sched + ',pid="1"')
    gauge("sglang:num_paused_reqs", "The number of paused requests.", 0, sched + ',pid="1"')
    if passes:
        metric(
            "sglang:cuda_graph_passes_total",
            "counter",
            "Forward passes by CUDA-graph mode.",
            [("", f'{sched},mode="{mode}"', float(int(n))) for mode, n in sorted(passes.items())],
        )
    gauge("sglang:num_used_tokens", "The number of used tokens.", used)
    gauge("sglang:token_usage", "The token usage.", round(usage, 6))
    gauge(
        "sglang:gen_throughput",
        "The generation throughput (token/s).",
        round(st.last_gen_throughput, 3),
    )
    gauge("sglang:cache_hit_rate", "The prefix cache hit rate.", 0.0)
    gauge(
        "sglang:is_cuda_graph",
        "Whether the batch is using CUDA graph.",
        1.0 if cfg.decode.enabled else 0.0,
    )
    gauge(
        "sglang:max_total_num_tokens",
        "Maximum total number of tokens in the KV cache pool.",
        cfg.max_total_num_tokens,
    )
    gauge("sglang:context_len", "The context length of the model.", cfg.context_len)
    gauge("sglang:weight_memory_usage_gb", "Weight memory usage in GB.", mem.get("weight", 0.0))
    gauge(
        "sglang:kv_cache_memory_usage_gb", "KV cache memory usage in GB.", mem.get("kvcache", 0.0)
    )
    gauge(
        "sglang:startup_available_gpu_memory_gb",
        "Available GPU memory at startup in GB.",
        mem.get("startup_available", 0.0),
    )
    with st.lock:
        counter(
            "sglang:prompt_tokens_total", "Number of prefill tokens processed.", st.prompt_total
        )
        counter("sglang:generation_tokens_total", "Number of generation tokens processed.", gen)
        counter("sglang:cached_tokens_total", "Number of cached prompt tokens.", 0)
        counter("sglang:num_requests_total", "Number of requests processed.", st.requests_total)
        counter(
            "sglang:num_aborted_requests_total", "Number of requests aborted.", st.aborted_total
        )
        histogram(
            "sglang:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            st.ttft_hist,
            ',is_streaming="True"',
        )
        histogram(
            "sglang:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            st.itl_hist,
        )
        histogram(
            "sglang:e2e_request_latency_seconds",
            "Histogram of End-to-end request latency in seconds",
            st.e2e_hist,
            ',is_streaming="True"',
        )
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------------
# Start-up, background threads, shutdown
# ---------------------------------------------------------------------------------------------


def _kv_dtype(cfg: Config) -> str:
    kv = cfg.args.kv_cache_dtype
    if kv in ("fp8_e4m3",):
        return "torch.float8_e4m3fn"
    if kv == "fp8_e5m2":
        return "torch.float8_e5m2"
    if kv in ("bf16", "bfloat16"):
        return "torch.bfloat16"
    return {
        "half": "torch.float16",
        "float16": "torch.float16",
        "float": "torch.float32",
        "float32": "torch.float32",
    }.get(cfg.args.dtype, "torch.bfloat16")


def _spawn_children(st: State) -> None:
    try:
        count = int(os.environ.get("FAKE_SGLANG_SPAWN_CHILD", "0") or 0)
    except ValueError:
        count = 1
    code = (
        "import ctypes, sys, time\n"
        "try:\n"
        "    ctypes.CDLL(None).prctl(15, sys.argv[1].encode()[:15], 0, 0, 0)\n"
        "except Exception:\n"
        "    pass\n"
        "time.sleep(3600)\n"
    )
    for i in range(count):
        if st.cfg.tp > 1:
            title = f"sglang::scheduler_TP{i}"
        else:
            title = "sglang::scheduler" if i == 0 else f"sglang::scheduler_{i}"
        with contextlib.suppress(OSError):
            st.children.append(
                subprocess.Popen(
                    [title, "-I", "-S", "-c", code, title],
                    executable=sys.executable,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )


def _kill_children(st: State) -> None:
    for child in st.children:
        with contextlib.suppress(OSError):
            child.kill()
    for child in st.children:
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            child.wait(timeout=1)


def _scheduler_died(st: State, text: str) -> int:
    log = st.log
    log.sglang(text, st.tag0, level=40)
    log.sglang(
        "Received sigquit from a child process. It usually means the child failed.", level=40
    )
    log.sglang("Rank 0 scheduler is dead. Please check if there are relevant logs.", level=40)
    log.sglang("Exit code: -3", level=40)
    site = "/usr/local/lib/python3.11/dist-packages/sglang"
    log.write_raw(
        "Traceback (most recent call last):\n"
        f'  File "{site}/launch_server.py", line 84, in <module>\n'
        "    launch_server(server_args)\n"
        f'  File "{site}/srt/entrypoints/engine.py", line 1262, in _launch_subprocesses\n'
        "    data = scheduler_pipe_readers[i].recv()\n"
        "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
        '  File "/usr/lib/python3.11/multiprocessing/connection.py", line 250, in recv\n'
        "    buf = self._recv_bytes()\n"
        "          ^^^^^^^^^^^^^^^^^^\n"
        "EOFError\n"
    )
    _kill_children(st)
    return 1


def run_startup(st: State) -> int | None:
    """Print the start-up log up to the summary line. Returns an exit code on a failure."""
    cfg = st.cfg
    log = st.log
    tp = cfg.tp
    tags = [f" TP{r}" if tp > 1 else "" for r in range(tp)]
    s = st.startup_s

    def each(msg: str) -> None:
        for tag in tags:
            log.sglang(msg, tag)

    _spawn_children(st)
    each("Memory baseline taken. mem usage=0.71 GB")
    time.sleep(0.1 * s)
    each(f"Load weight begin. avail mem={GPU_AVAIL_AT_START_GB:.2f} GB")
    t = perf()
    time.sleep(0.2 * s)
    weight = WEIGHT_GB / tp
    after_load = GPU_AVAIL_AT_START_GB - weight
    load_s = perf() - t
    quant = f"quant={cfg.args.quantization}, " if cfg.args.quantization else ""
    each(
        f"Load weight end. elapsed={load_s:.2f} s, type={cfg.architecture}, {quant}"
        f"avail mem={after_load:.2f} GB, mem usage={weight:.2f} GB."
    )
    st.startup_time["load_weight"] = round(load_s, 3)
    st.mem["weight"] = round(weight, 3)
    if "negative_kv" in st.faults or cfg.kv_gb_each <= 0 or cfg.max_total_num_tokens <= 0:
        return _scheduler_died(st, negative_kv_traceback(cfg.mem_fraction_static))
    kv = cfg.kv_gb_each
    each(
        f"KV Cache is allocated. dtype: {_kv_dtype(cfg)}, #tokens: {cfg.max_total_num_tokens}, "
        f"K size: {kv:.2f} GB, V size: {kv:.2f} GB"
    )
    avail = after_load - 2 * kv
    each(f"Memory pool end. avail mem={avail:.2f} GB")
    st.startup_time["kv_cache_allocation"] = 0.01
    st.mem["kvcache"] = round(2 * kv, 3)
    avail -= 0.31  # attention backend workspaces
    fault_capture = "oom_during_capture" in st.faults or "exception_during_capture" in st.faults
    if cfg.prefill.enabled:
        each(
            f"Capture target prefill CUDA graph begin. backend={cfg.prefill.backend}, "
            f"num_tokens={cfg.prefill.bs}, avail mem={avail:.2f} GB"
        )
        if fault_capture:
            oom = "oom_during_capture" in st.faults
            return _scheduler_died(st, capture_failure_traceback(oom, GPU_TOTAL_GB))
        t = perf()
        time.sleep(0.1 * s)
        use = 0.85
        avail -= use
        el = perf() - t
        each(
            f"Capture target prefill CUDA graph end. elapsed={el:.2f} s, mem usage={use:.2f} GB, "
            f"avail mem={avail:.2f} GB."
        )
        st.startup_time["cuda_graph"]["prefill"] = round(el, 3)
        st.mem["graph_prefill"] = use
    if cfg.decode.enabled:
        each(
            f"Capture target decode CUDA graph begin. backend={cfg.decode.backend}, "
            f"num_tokens_per_req=1, "
            + (f"bs={cfg.captured_decode_bs}, " if st.like_0517 else "")
            + f"avail mem={avail:.2f} GB"
        )
        if fault_capture:
            oom = "oom_during_capture" in st.faults
            return _scheduler_died(st, capture_failure_traceback(oom, GPU_TOTAL_GB))
        t = perf()
        bs = cfg.captured_decode_bs
        use = round(0.05 + 0.01 * len(bs), 2)
        for k, b in enumerate(reversed(bs)):
            pct = int(100 * k / max(len(bs), 1))
            am = avail - use * k / len(bs)
            log.write_raw(
                f"\rCapturing batches (bs={b} avail_mem={am:.2f} GB): {pct:3d}%|"
                f"          | {k}/{len(bs)} [00:00<?, ?it/s]"
            )
            time.sleep(0.1 * s / max(len(bs), 1))
        log.write_raw(
            f"\rCapturing batches (bs={bs[0]} avail_mem={avail - use:.2f} GB): 100%|"
            f"##########| {len(bs)}/{len(bs)} [00:00<00:00, 99.00it/s]\n"
        )
        avail -= use
        el = perf() - t
        each(
            "Capture target decode CUDA graph end. "
            + ("" if st.like_0517 else f"bs={bs}, ")
            + f"elapsed={el:.2f} s, mem usage={use:.2f} GB, avail mem={avail:.2f} GB."
        )
        st.startup_time["cuda_graph"]["decode"] = round(el, 3)
        st.mem["graph_decode"] = use
    avail -= 0.13
    st.mem["startup_available"] = round(avail, 3)
    log.sglang(
        f"max_total_num_tokens={cfg.max_total_num_tokens}, chunked_prefill_size="
        f"{cfg.chunked_prefill_size}, max_prefill_tokens={cfg.args.max_prefill_tokens}, "
        f"max_running_requests={cfg.max_running_requests}, context_len={cfg.context_len}, "
        f"available_gpu_mem={avail:.2f} GB",
        tags[0],
    )
    st.startup_time["scheduler_e2e"] = round(perf() - st.t0, 3)
    if st.like_0517:
        times = st.startup_time
        graphs = ", ".join(f"{k}={(v or 0.0):.2f}" for k, v in times["cuda_graph"].items())
        log.sglang(
            f"Engine startup timings (s): load_weight={times.get('load_weight', 0.0):.2f}, "
            f"kv_cache_allocation={times['kv_cache_allocation']:.2f}, "
            f"scheduler_e2e={times['scheduler_e2e']:.2f}, cuda_graph={{{graphs}}}",
            tags[0],
        )
    return None


def warmup(st: State) -> None:
    """The real server polls /model_info, sends one /generate, then says it is ready."""
    cfg = st.cfg
    if cfg.args.skip_server_warmup:
        st.up = True
        st.log.sglang("The server is fired up and ready to roll!")
        return
    if "never_ready" in st.faults:
        return  # the warmup request never completes
    sleep_until(st.t0 + st.startup_s * 0.75)
    port = random.randint(40000, 60000)
    st.log.access(f"127.0.0.1:{port}", "GET", "/model_info", 200, "OK")
    cg = cfg.prefill.enabled
    st.log.sglang(
        "Prefill batch, #new-seq: 1, #new-token: 7, #cached-token: 0, token usage: 0.00, "
        f"#running-req: 0, #queue-req: 0, #pending-token: 0, cuda graph: {cg}, "
        "input throughput (token/s): 0.00",
        st.tag0,
    )
    sleep_until(st.t0 + st.startup_s)
    st.log.access(f"127.0.0.1:{port + 2}", "POST", "/generate", 200, "OK")
    st.up = True
    st.log.sglang("The server is fired up and ready to roll!")


def decode_reporter(st: State) -> None:
    cfg = st.cfg
    interval = max(cfg.args.decode_log_interval * st.itl, 0.05)
    last_t = perf()
    last_gen = 0
    while not st.stop.wait(interval):
        running, used, gen = st.snapshot()
        now = perf()
        if running and st.up:
            thr = (gen - last_gen) / max(now - last_t, 1e-6)
            st.last_gen_throughput = thr
            # a batch larger than the largest captured size runs without graphs
            cg = cfg.decode.enabled and running <= (max(cfg.captured_decode_bs or [0]))
            # one decode pass per ITL while requests run
            st.count_passes(
                "decode_cuda_graph" if cg else "decode_none", (now - last_t) / max(st.itl, 1e-3)
            )
            with st.lock:
                queued = st.queued
            st.log.sglang(
                f"Decode batch, #running-req: {running}, #token: {used}, token usage: "
                f"{used / max(cfg.max_total_num_tokens, 1):.2f}, cuda graph: {cg}, "
                f"gen throughput (token/s): {thr:.2f}, #queue-req: {queued}",
                st.tag0,
            )
        last_t, last_gen = now, gen


def graceful_exit(st: State) -> None:
    if st.exiting:
        return
    st.exiting = True
    running, _, _ = st.snapshot()
    with st.lock:
        rids = list(st.active)
    st.log.sglang(
        f"Gracefully exiting... Remaining number of requests {running}. "
        f"Remaining requests remaining_rids={rids}."
    )
    deadline = perf() + 0.6
    while perf() < deadline and st.snapshot()[0]:
        time.sleep(0.02)
    _kill_children(st)
    st.log.uvicorn("Shutting down")
    st.log.uvicorn("Waiting for application shutdown.")
    st.log.uvicorn("Application shutdown complete.")
    st.log.uvicorn(f"Finished server process [{os.getpid()}]")
    os._exit(0)


def main(argv: list[str]) -> int:
    sys.setswitchinterval(0.0005)
    parser = build_parser()
    args = parser.parse_args(argv)
    cfg = resolve(args, argv)
    log = Logger(args.log_level, args.log_level_http)
    st = State(cfg, log)

    def on_signal(signum: int, frame: Any) -> None:
        threading.Thread(target=graceful_exit, args=(st,), daemon=True).start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    for w in cfg.deprecation_warnings:
        log.sglang(w, level=30)
    log.sglang(f"server_args={resolved_args(cfg)!r}")
    if "crash_on_start" in st.faults:
        log.write_raw(crash_on_start_traceback(args.model_path))
        return 1
    code = run_startup(st)
    if code is not None:
        return code

    Handler.state = st
    host = args.host
    try:
        _Server.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        server = _Server((host, args.port), Handler)
    except OSError as exc:
        log.uvicorn(f"Started server process [{os.getpid()}]")
        log.uvicorn("Waiting for application startup.")
        log.uvicorn("Application startup complete.")
        log.uvicorn(
            f"[Errno {exc.errno}] error while attempting to bind on address "
            f"('{host}', {args.port}): {exc.strerror.lower() if exc.strerror else exc}",
            "ERROR",
        )
        log.uvicorn("Waiting for application shutdown.")
        log.uvicorn("Application shutdown complete.")
        _kill_children(st)
        return 1
    log.uvicorn(f"Started server process [{os.getpid()}]")
    log.uvicorn("Waiting for application startup.")
    log.uvicorn("Application startup complete.")
    log.uvicorn(f"Uvicorn running on http://{host}:{args.port} (Press CTRL+C to quit)")
    threading.Thread(target=warmup, args=(st,), daemon=True, name="warmup").start()
    threading.Thread(target=decode_reporter, args=(st,), daemon=True, name="decode-log").start()
    server.serve_forever(poll_interval=0.5)
    return 0
