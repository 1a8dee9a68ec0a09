"""Read the server facts a vLLM start-up log carries (``vllm serve``, V1 engine).

The line formats are vLLM 0.26.0's, read from its wheel's source (file:line in each
pattern's comment) and checked against public logs of 0.10 … 0.2x where those show the
same line. Each line is optional: the parser reports ``None`` for anything the text does
not state, never guesses and never raises. Lines come prefixed by the process that wrote
them (``(EngineCore_DP0 pid=387) INFO 12-05 11:00:00 [gpu_worker.py:561] …``); the
patterns search, so any prefix reads the same.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = [
    "FAILURE_REASONS",
    "LOG_FACT_KEYS",
    "STATS_KEYS",
    "graph_runtime_modes",
    "parse_stats_lines",
    "parse_vllm_log",
]

# The keys every result has, in a stable order.
LOG_FACT_KEYS: tuple[str, ...] = (
    "vllm_version",
    "model_path",
    "dtype",
    "max_model_len",
    "tp_size",
    "enforce_eager",
    "cudagraph_mode",
    "compilation_mode",
    "cuda_graph_capture_sizes",
    "cuda_graph_enabled",
    "prefix_caching",
    "attention_backend",
    "weight_mem_gb",
    "load_weight_s",
    "kv_cache_gb",
    "kv_cache_tokens",
    "max_concurrency",
    "graph_mem_gb",
    "cuda_graph_capture_s",
    "graph_memory_profiled",
    "gpu_memory_utilization",
    "gpu_memory_utilization_without_graphs",
    "activation_peak_gb",
    "non_torch_mem_gb",
    "over_budget_gb",
    "init_engine_s",
    "compile_s",
    "ready",
    "failure",
    "stats_lines",
)
STATS_KEYS = (
    "prompt_tok_s",
    "gen_tok_s",
    "running",
    "waiting",
    "preemptions",
    "kv_usage",
    "prefix_hit_rate",
)

OOM = "cuda-out-of-memory"
NO_KV_MEMORY = "no-memory-for-kv-cache"
LEN_OVER_KV = "max-model-len-over-kv-cache"
BACKEND_INVALID = "attention-backend-invalid"
FAILURE_REASONS: dict[str, str] = {
    OOM: "vLLM ran out of GPU memory; lower gpu-memory-utilization (mem_fraction_static) or "
    "max-num-seqs, or turn cuda_graphs off",
    NO_KV_MEMORY: "no GPU memory was left for the KV cache; raise gpu-memory-utilization "
    "(mem_fraction_static) or use a smaller model",
    LEN_OVER_KV: "the model's max length does not fit the KV cache; pass --max-model-len in "
    "extra_args or raise gpu-memory-utilization",
    BACKEND_INVALID: "the attention backend asked for cannot run this model on this GPU; "
    "see the log's reasons, or leave attention_backend unset",
}

_NUM = r"(-?\d{1,12}(?:\.\d{1,9})?)"
_INT_COMMAS = r"(\d{1,3}(?:,\d{3}){0,6}|\d{1,18})"
# api_utils.py:325 (logo off) or the logo's "version X" line (colour codes in between)
_VERSION = (
    re.compile(r"vLLM server version (\S+), serving model"),
    re.compile(r"Initializing a V1 LLM engine \(v([^)\s]+)\)"),  # v1/engine/core.py:117
    re.compile(r"█(?:\x1b\[[0-9;]*m)*\s+version\s+(?:\x1b\[[0-9;]*m)*(\d[\w.+]*)"),
)
_CONFIG = re.compile(r"Initializing a V1 LLM engine \(v[^)]*\) with config: (.*)")
_CONFIG_FIELDS = {  # config/vllm.py __str__: key=value, ...
    "model_path": re.compile(r"\bmodel='([^']*)'"),
    "dtype": re.compile(r"\bdtype=torch\.(\w+)"),
    "max_model_len": re.compile(r"\bmax_seq_len=(\d+)"),
    "tp_size": re.compile(r"\btensor_parallel_size=(\d+)"),
    "enforce_eager": re.compile(r"\benforce_eager=(True|False)"),
    "prefix_caching": re.compile(r"\benable_prefix_caching=(True|False)"),
    "cudagraph_mode": re.compile(r"'cudagraph_mode': <CUDAGraphMode\.(\w+)"),
    "compilation_mode": re.compile(r"'mode': <CompilationMode\.(\w+)"),
}
_CAPTURE_SIZES = re.compile(r"'cudagraph_capture_sizes': \[([\d, ]*)\]")
# platforms/cuda.py:422 (chosen by flag) and :483 (chosen by vLLM)
_BACKEND = re.compile(r"Using (\w+) (?:attention )?backend(?: out of potential backends|\.)")
# gpu_model_runner.py:5348
_LOADED = re.compile(rf"Model loading took {_NUM} GiB(?: memory)? and {_NUM} seconds")
_KV_MEM = re.compile(rf"Available KV cache memory: {_NUM} GiB")  # gpu_worker.py:561
_KV_TOKENS = re.compile(rf"GPU KV cache size: {_INT_COMMAS} tokens")  # kv_cache_utils.py:2177
_CONCURRENCY = re.compile(rf"Maximum concurrency for {_INT_COMMAS} tokens per request: {_NUM}x")
_CAPTURED = re.compile(rf"Graph capturing finished in {_NUM} secs, took {_NUM} GiB")  # :6845
# gpu_worker.py:575 (the V1 GPU model runner): graph memory profiled and charged to the KV budget
_PROFILED = re.compile(
    rf"CUDA graph memory profiling is enabled.*?--gpu-memory-utilization={_NUM} is "
    rf"equivalent to --gpu-memory-utilization={_NUM} without"
)
_NOT_PROFILED = re.compile(r"CUDA graph memory profiling is disabled")
# gpu_worker.py:857 (0.26's V2 model runner, as live H100 servers wrote it): how the budget
# was spent, the graphs' memory among it. This runner sizes the KV cache before it captures:
# graphs on and off got the same pool, and the graphs went beyond the fraction (over_budget_gb)
_BUDGET = re.compile(
    rf"Desired GPU memory utilization is \({_NUM}, {_NUM} GiB\)\. Actual usage is {_NUM} GiB "
    rf"for weight, {_NUM} GiB for peak activation, {_NUM} GiB for non-torch memory, and "
    rf"{_NUM} GiB for CUDAGraph memory"
)
# v1/engine/core.py:331-348
_INIT = re.compile(
    rf"init engine \(profile, create kv cache, warmup model\) took {_NUM} s"
    rf"(?: \(compilation: {_NUM} s)?"
)
_READY = re.compile(r"Application startup complete|Starting vLLM (?:API )?server on")
# v1/metrics/loggers.py:263-300 (Preemptions only when > 0)
_STATS = re.compile(
    rf"Avg prompt throughput: {_NUM} tokens/s, Avg generation throughput: {_NUM} tokens/s, "
    rf"Running: (\d+) reqs, Waiting: (\d+) reqs,(?: Deferred: \d+ reqs,)?"
    rf"(?: Preemptions: (\d+),)? GPU KV cache usage: {_NUM}%, Prefix cache hit rate: {_NUM}%"
)
# compilation/cuda_graph.py:60-117 (--cudagraph-metrics): one table row per
# (unpadded, padded, paddings, runtime mode) and its count over the interval
_GRAPH_ROW = re.compile(r"\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*(\w+)\s*\|\s*(\d+)\s*\|")
_FAILURES = (
    (NO_KV_MEMORY, re.compile(r"No available memory for the cache blocks")),
    (LEN_OVER_KV, re.compile(r"larger than the maximum number of tokens that can be stored")),
    (BACKEND_INVALID, re.compile(r"Selected backend \w+ is not valid for this configuration")),
    (OOM, re.compile(r"CUDA out of memory|torch\.OutOfMemoryError|OutOfMemoryError")),
)


def _count(text: str) -> int:
    return int(text.replace(",", ""))


def _first(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    return pattern.search(text)


def _config_facts(text: str) -> dict[str, Any]:
    m = _first(_CONFIG, text)
    line = m[1] if m else ""
    out: dict[str, Any] = {}
    for key, pattern in _CONFIG_FIELDS.items():
        found = pattern.search(line)
        value: Any = found[1] if found else None
        if value in ("True", "False"):
            value = value == "True"
        elif key in ("max_model_len", "tp_size") and value is not None:
            value = int(value)
        out[key] = value
    sizes = _CAPTURE_SIZES.search(line)
    out["cuda_graph_capture_sizes"] = (
        [int(s) for s in sizes[1].split(",") if s.strip()] if sizes else None
    )
    return out


def _over_budget_gb(budget: re.Match[str] | None, kv: re.Match[str] | None) -> float | None:
    """GiB the start-up spent beyond --gpu-memory-utilization's budget: weights + activation
    peak + non-torch + graphs + the KV cache, less the budget (the log prints each to 0.01
    GiB, so a few hundredths either way is rounding). None without the budget line."""
    if budget is None or kv is None:
        return None
    spent = sum(float(budget[i]) for i in (3, 4, 5, 6)) + float(kv[1])
    return round(spent - float(budget[2]), 2)


def _memory_facts(text: str) -> dict[str, Any]:
    loaded, kv, tokens = _first(_LOADED, text), _first(_KV_MEM, text), _first(_KV_TOKENS, text)
    conc, captured, profiled = (
        _first(_CONCURRENCY, text),
        _first(_CAPTURED, text),
        _first(_PROFILED, text),
    )
    init, budget = _first(_INIT, text), _first(_BUDGET, text)
    util = profiled or budget  # the fraction: the profiling line's, else the budget line's
    return {
        "weight_mem_gb": float(loaded[1]) if loaded else None,
        "load_weight_s": float(loaded[2]) if loaded else None,
        "kv_cache_gb": float(kv[1]) if kv else None,
        "kv_cache_tokens": _count(tokens[1]) if tokens else None,
        "max_concurrency": float(conc[2]) if conc else None,
        "graph_mem_gb": float(captured[2]) if captured else None,
        "cuda_graph_capture_s": float(captured[1]) if captured else None,
        "graph_memory_profiled": True
        if profiled or budget
        else (False if _NOT_PROFILED.search(text) else None),
        "gpu_memory_utilization": float(util[1]) if util else None,
        "gpu_memory_utilization_without_graphs": float(profiled[2]) if profiled else None,
        "activation_peak_gb": float(budget[4]) if budget else None,
        "non_torch_mem_gb": float(budget[5]) if budget else None,
        "over_budget_gb": _over_budget_gb(budget, kv),
        "init_engine_s": float(init[1]) if init else None,
        "compile_s": float(init[2]) if init and init[2] else None,
    }


def _graphs_enabled(facts: dict[str, Any]) -> bool | None:
    """Captured (the capture line) → True; the config says NONE or eager → False."""
    if facts["graph_mem_gb"] is not None:
        return True
    if facts["enforce_eager"] is True or facts["cudagraph_mode"] == "NONE":
        return False
    return None


def parse_stats_lines(text: str) -> list[dict[str, Any]]:
    """Every periodic stats line (``Engine 000: Avg prompt throughput: …``) as numbers;
    usage and hit rate as shares of 1."""
    rows = []
    for m in _STATS.finditer(text):
        rows.append(
            {
                "prompt_tok_s": float(m[1]),
                "gen_tok_s": float(m[2]),
                "running": int(m[3]),
                "waiting": int(m[4]),
                "preemptions": int(m[5]) if m[5] else 0,
                "kv_usage": float(m[6]) / 100,
                "prefix_hit_rate": float(m[7]) / 100,
            }
        )
    return rows


def graph_runtime_modes(text: str) -> dict[str, int]:
    """Forward passes per runtime CUDA-graph mode (FULL, PIECEWISE, NONE) summed over the
    ``--cudagraph-metrics`` tables in ``text``; empty when the log has none (the flag was
    not passed, or nothing ran)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        m = _GRAPH_ROW.search(line)  # NewLineFormatter puts the line prefix on each row
        if m:
            out[m[4]] = out.get(m[4], 0) + int(m[5])
    return out


def _failure(text: str) -> str | None:
    return next((label for label, pattern in _FAILURES if pattern.search(text)), None)


def parse_vllm_log(text: str) -> dict[str, Any]:
    """The facts ``text`` states, under ``LOG_FACT_KEYS``; None for what it does not."""
    version = next((m[1] for p in _VERSION if (m := p.search(text))), None)
    backend = _first(_BACKEND, text)
    facts: dict[str, Any] = {"vllm_version": version}
    facts |= _config_facts(text)
    facts["attention_backend"] = backend[1] if backend else None
    facts |= _memory_facts(text)
    facts["cuda_graph_enabled"] = _graphs_enabled(facts)
    facts["ready"] = bool(_READY.search(text))
    facts["failure"] = _failure(text)
    facts["stats_lines"] = len(parse_stats_lines(text))
    return {k: facts.get(k) for k in LOG_FACT_KEYS}
