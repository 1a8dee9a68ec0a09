"""Command line of the FAKE SGLang 0.5.23 and the resolution of the simulated server state.

The parser copies the option *names* of the real 0.5.23 parser that matter for prefix
matching (``allow_abbrev`` stays True, as in SGLang): ``--cuda-graph-max-bs`` and
``--cuda-graph-bs`` are ambiguous prefixes and fail with exit code 2, ``--tp 2`` is read as
``--tp-size 2``.  Only a subset of the real flags exists; an unknown flag exits with 2.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sglang import __version__

# The fake 0.5.14 (tests/fakes/sglang_0514_pkg) has the one-phase CUDA graph flags.
OLD_FLAGS = __version__ == "0.5.14"
# A simulated H200 (numbers in GiB, which SGLang prints as "GB").
GPU_TOTAL_GB = 139.81
GPU_AVAIL_AT_START_GB = 139.10
WEIGHT_GB = 0.98  # about a Qwen2.5-0.5B in bf16
KV_TOKENS_PER_MEM_FRACTION = 400_000  # #tokens = int(mem_fraction_static * this)
DEFAULT_MEM_FRACTION_STATIC = 0.85
DEFAULT_DECODE_MAX_BS = 8  # the real default depends on GPU memory (256 on an H200)
DEFAULT_CHUNKED_PREFILL_SIZE = 8192
DEFAULT_MAX_RUNNING_REQUESTS = 4096
DEFAULT_CONTEXT_LEN = 32768
DEFAULT_ARCH = "Qwen2ForCausalLM"
DEFAULT_MODEL_TYPE = "qwen2"
DEFAULT_ATTENTION_BACKEND = "fa3"  # what 0.5.23 picks on Hopper for a non-MLA model

ATTENTION_BACKENDS = [
    "triton", "torch_native", "flex_attention", "dsa", "nsa", "qsa", "dsv4", "compressed",
    "fa3", "fa4", "flashinfer", "llada2_cfg_flashinfer", "flashmla", "trtllm_mla",
    "cutedsl_mla", "tokenspeed_mla", "trtllm_mha", "hpc_ops", "minicpm_flashattn",
    "minicpm_flashinfer", "aiter", "wave", "intel_amx", "ascend", "intel_xpu",
]  # fmt: skip
LOAD_FORMATS = [
    "auto", "pt", "safetensors", "npcache", "dummy", "sharded_state", "gguf", "bitsandbytes",
    "layered", "flash_rl", "remote", "remote_instance", "fastsafetensors", "private",
]  # fmt: skip
DTYPES = ["auto", "half", "float16", "bfloat16", "float", "float32"]
KV_CACHE_DTYPES = [
    "auto", "fp8_e5m2", "fp8_e4m3", "mxfp8", "bf16", "bfloat16", "nvfp4", "fp4_mx_block16",
]  # fmt: skip
SCHEDULE_POLICIES = [
    "lpm", "random", "fcfs", "dfs-weight", "lof", "priority", "routing-key", "hrrn",
    "shortest-prefill-first",
]  # fmt: skip
CUDA_GRAPH_BACKENDS = ["full", "breakable", "disabled"]


def _human_int(text: str) -> int:
    """``--context-length`` accepts human-readable ints such as ``32k`` or ``1M``."""
    t = text.strip().lower()
    mult = 1
    if t and t[-1] in "km":
        mult = 1024 if t[-1] == "k" else 1024 * 1024
        t = t[:-1]
    return int(float(t) * mult)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sglang serve")  # allow_abbrev keeps its default (True)
    a = p.add_argument
    # fields/model.py
    a(
        "--model-path",
        "--model",
        dest="model_path",
        type=str,
        required=True,
        help="The path of the model weights. This can be a local folder or a Hugging Face repo ID.",
    )
    a("--tokenizer-path", type=str, default=None, help="The path of the tokenizer.")
    a("--tokenizer-mode", type=str, default="auto", choices=["auto", "slow"])
    a("--skip-tokenizer-init", action="store_true")
    a(
        "--load-format",
        type=str,
        default="auto",
        choices=LOAD_FORMATS,
        help="The format of the model weights to load. 'dummy' will initialize the weights with "
        "random values, which is mainly for profiling.",
    )
    a("--model-loader-extra-config", type=str, default="{}")
    a("--trust-remote-code", action="store_true")
    a("--context-length", type=_human_int, default=None)
    a("--is-embedding", action="store_true")
    a("--revision", type=str, default=None)
    a("--dtype", type=str, default="auto", choices=DTYPES)
    a("--kv-cache-dtype", type=str, default="auto", choices=KV_CACHE_DTYPES)
    a("--quantization", type=str, default=None)
    a("--json-model-override-args", type=str, default="{}")
    # fields/serving.py
    a("--host", type=str, default="127.0.0.1")
    a("--port", type=int, default=30000)
    a("--served-model-name", type=str, default=None)
    a("--chat-template", type=str, default=None)
    a("--api-key", type=str, default=None)
    a("--skip-server-warmup", action="store_true")
    a("--enable-cache-report", action="store_true")
    a("--stream-interval", type=int, default=1)
    a("--stream-response-default-include-usage", action="store_true")
    if not OLD_FLAGS:  # a flag 0.5.14 lacks (tests: a flag one installation lacks)
        a("--incremental-streaming-output", action="store_true")
    a("--reasoning-parser", type=str, default=None)
    a("--tool-call-parser", type=str, default=None)
    # fields/parallel.py
    a("--tp-size", "--tensor-parallel-size", dest="tp_size", type=int, default=1)
    a("--dp-size", "--data-parallel-size", dest="dp_size", type=int, default=1)
    a("--pp-size", "--pipeline-parallel-size", dest="pp_size", type=int, default=1)
    a("--ep-size", "--expert-parallel-size", dest="ep_size", type=int, default=1)
    a("--nnodes", type=int, default=1)
    a("--node-rank", type=int, default=0)
    a("--dist-init-addr", type=str, default=None)
    a("--enable-dp-attention", action="store_true")
    # fields/schedule.py, fields/memory.py
    a(
        "--mem-fraction-static",
        type=float,
        default=None,
        help="The fraction of the memory used for static allocation (model weights and KV cache "
        "memory pool).",
    )
    a("--max-running-requests", type=int, default=None)
    a("--max-total-tokens", type=int, default=None)
    a("--chunked-prefill-size", type=int, default=None)
    a("--max-prefill-tokens", type=int, default=16384)
    a("--schedule-policy", type=str, default="fcfs", choices=SCHEDULE_POLICIES)
    a("--schedule-conservativeness", type=float, default=1.0)
    a("--page-size", type=int, default=None)
    a("--disable-radix-cache", action="store_true")
    # fields/exec_.py
    a("--attention-backend", type=str, default=None, choices=ATTENTION_BACKENDS)
    a("--prefill-attention-backend", type=str, default=None, choices=ATTENTION_BACKENDS)
    a("--decode-attention-backend", type=str, default=None, choices=ATTENTION_BACKENDS)
    a(
        "--sampling-backend",
        type=str,
        default=None,
        choices=["flashinfer", "pytorch", "ascend", "intel_xpu"],
    )
    # The real server takes it (0.5.17 and 0.5.23); ServeLab's H200 runs pass "none".
    a(
        "--grammar-backend",
        type=str,
        default=None,
        choices=["xgrammar", "outlines", "llguidance", "none"],
    )
    if OLD_FLAGS:
        # 0.5.14's one-phase flags (no per-phase ones): the argv ServeLab builds differs.
        a("--cuda-graph-max-bs", type=int, default=None)
        a("--cuda-graph-bs", type=int, nargs="+", default=None)
        p.set_defaults(
            cuda_graph_max_bs_decode=None,
            cuda_graph_max_bs_prefill=None,
            cuda_graph_bs_decode=None,
            cuda_graph_bs_prefill=None,
            cuda_graph_backend_decode=None,
            cuda_graph_backend_prefill=None,
        )
    else:
        a(
            "--cuda-graph-max-bs-decode",
            type=int,
            default=None,
            help="The largest decode batch size captured by CUDA graphs.",
        )
        a(
            "--cuda-graph-max-bs-prefill",
            type=int,
            default=None,
            help="The largest prefill token bucket captured by CUDA graphs.",
        )
        a(
            "--cuda-graph-bs-decode",
            type=int,
            nargs="+",
            default=None,
            help="The decode batch sizes to capture.",
        )
        a(
            "--cuda-graph-bs-prefill",
            type=int,
            nargs="+",
            default=None,
            help="The prefill token buckets to capture.",
        )
        a("--cuda-graph-backend-decode", type=str, default=None, choices=CUDA_GRAPH_BACKENDS)
        a("--cuda-graph-backend-prefill", type=str, default=None, choices=CUDA_GRAPH_BACKENDS)
    a("--disable-decode-cuda-graph", action="store_true")
    a("--disable-prefill-cuda-graph", action="store_true")
    a(
        "--disable-cuda-graph",
        action="store_true",
        help="Deprecated. Use '--cuda-graph-backend-{decode,prefill}=disabled' instead.",
    )
    a("--disable-cuda-graph-padding", action="store_true")
    a(
        "--cuda-graph-config",
        type=str,
        default=None,
        help='Per-phase JSON such as {"decode":{"backend":"full","max_bs":256}}.',
    )
    a("--enable-torch-compile", action="store_true")
    a("--torch-compile-max-bs", type=int, default=32)
    a("--disable-overlap-schedule", action="store_true")
    a("--enable-mixed-chunk", action="store_true")
    a("--disable-custom-all-reduce", action="store_true")
    a("--enable-p2p-check", action="store_true")
    # speculative decoding, LoRA
    a("--speculative-algorithm", type=str, default=None)
    a("--speculative-draft-model-path", type=str, default=None)
    a("--speculative-num-steps", type=int, default=None)
    a("--speculative-eagle-topk", type=int, default=None)
    a("--speculative-num-draft-tokens", type=int, default=None)
    a("--lora-paths", type=str, nargs="+", default=None)
    a("--max-loras-per-batch", type=int, default=8)
    # fields/observability.py
    a("--log-level", type=str, default="info")
    a("--log-level-http", type=str, default=None)
    a("--log-requests", action="store_true")
    a("--log-requests-level", type=int, default=2)
    a(
        "--enable-metrics",
        action="store_true",
        help="Enable log prometheus metrics (exposes /metrics).",
    )
    a("--decode-log-interval", type=int, default=40)
    a("--show-time-cost", action="store_true")
    # fields/device.py
    a("--device", type=str, default=None)
    a("--base-gpu-id", type=int, default=0)
    a("--random-seed", type=int, default=None)
    a("--watchdog-timeout", type=float, default=300)
    return p


def default_decode_bs(max_bs: int) -> list[int]:
    """``cuda_graph_hook.py:500-532`` without speculative decoding."""
    bs = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16), *range(512, max_bs + 1, 32)]
    bs = [b for b in bs if b <= max_bs]
    if max_bs not in bs:
        bs.append(max_bs)
    return bs


def default_prefill_buckets(max_tokens: int) -> list[int]:
    """``cuda_graph_hook.py:480-497``."""
    b = [
        *range(4, 33, 4), *range(48, 257, 16), *range(288, 513, 32), *range(576, 1025, 64),
        *range(1280, 4097, 256), *range(4608, max_tokens + 1, 512),
    ]  # fmt: skip
    return [x for x in b if x <= max_tokens]


@dataclass
class PhaseGraph:
    backend: str
    max_bs: int
    bs: list[int]  # the configured list

    @property
    def enabled(self) -> bool:
        return self.backend != "disabled"


@dataclass
class Config:
    args: argparse.Namespace
    argv: list[str]
    served_model_name: str
    tokenizer_path: str
    mem_fraction_static: float
    attention_backend: str
    chunked_prefill_size: int
    context_len: int
    architecture: str
    model_type: str
    max_total_num_tokens: int
    max_running_requests: int  # effective
    kv_gb_each: float  # K size == V size, per rank
    decode: PhaseGraph
    prefill: PhaseGraph
    captured_decode_bs: list[int]
    deprecation_warnings: list[str] = field(default_factory=list)

    @property
    def tp(self) -> int:
        return max(1, int(self.args.tp_size))


def _phase(
    json_cfg: dict[str, Any],
    flag_backend: str | None,
    disable_phase: bool,
    disable_all: bool,
    default_backend: str,
) -> str:
    if json_cfg.get("backend"):
        return str(json_cfg["backend"])
    if flag_backend:
        return flag_backend
    if disable_phase or disable_all:
        return "disabled"
    return default_backend


def _read_model_config(model_path: str) -> dict[str, Any]:
    try:
        cfg = json.loads((Path(model_path) / "config.json").read_text())
    except (OSError, ValueError):
        return {}
    return cfg if isinstance(cfg, dict) else {}


def resolve(args: argparse.Namespace, argv: list[str]) -> Config:
    warnings: list[str] = []
    if args.disable_cuda_graph:
        warnings.append(
            "'--disable-cuda-graph' is deprecated and will be removed in a future release. "
            "Use '--cuda-graph-backend-{decode,prefill}=disabled' instead."
        )
    model_cfg = _read_model_config(args.model_path)
    archs = model_cfg.get("architectures") or [DEFAULT_ARCH]
    context_len = args.context_length or int(
        model_cfg.get("max_position_embeddings") or DEFAULT_CONTEXT_LEN
    )
    mfs = (
        args.mem_fraction_static
        if args.mem_fraction_static is not None
        else DEFAULT_MEM_FRACTION_STATIC
    )
    tokens = int(mfs * KV_TOKENS_PER_MEM_FRACTION)
    if args.max_total_tokens is not None:
        tokens = min(tokens, args.max_total_tokens)
    if args.page_size and args.page_size > 1:
        tokens = tokens // args.page_size * args.page_size
    tp = max(1, args.tp_size)
    after_load = GPU_AVAIL_AT_START_GB - WEIGHT_GB / tp
    kv_total = after_load - GPU_TOTAL_GB * (1 - mfs)
    chunked = args.chunked_prefill_size or DEFAULT_CHUNKED_PREFILL_SIZE
    mrr = args.max_running_requests or DEFAULT_MAX_RUNNING_REQUESTS

    try:
        cg_json = json.loads(args.cuda_graph_config) if args.cuda_graph_config else {}
    except ValueError:
        cg_json = {}
    dj = cg_json.get("decode") or {}
    pj = cg_json.get("prefill") or {}

    d_backend = _phase(
        dj,
        args.cuda_graph_backend_decode,
        args.disable_decode_cuda_graph,
        args.disable_cuda_graph,
        "full",
    )
    d_list = dj.get("bs") or args.cuda_graph_bs_decode
    d_max = (
        dj.get("max_bs")
        or args.cuda_graph_max_bs_decode
        or getattr(args, "cuda_graph_max_bs", None)
    )
    if d_max is None:
        d_max = max(d_list) if d_list else DEFAULT_DECODE_MAX_BS
        if args.max_running_requests is not None and args.max_running_requests < d_max:
            d_max = args.max_running_requests
    if d_list:
        d_bs = sorted({int(b) for b in d_list if int(b) <= d_max})
    elif args.disable_cuda_graph_padding:
        d_bs = list(range(1, d_max + 1))
    else:
        d_bs = default_decode_bs(d_max)
    captured = [b for b in d_bs if b <= mrr]
    if d_bs and mrr < d_bs[-1]:
        captured.append(mrr)
    if d_backend == "disabled":
        captured = []

    p_backend = _phase(
        pj,
        args.cuda_graph_backend_prefill,
        args.disable_prefill_cuda_graph,
        args.disable_cuda_graph,
        "breakable",
    )
    p_list = pj.get("bs") or args.cuda_graph_bs_prefill
    p_max = (
        pj.get("max_bs")
        or args.cuda_graph_max_bs_prefill
        or (max(p_list) if p_list else (chunked if chunked > 0 else DEFAULT_CHUNKED_PREFILL_SIZE))
    )
    p_bs = sorted({int(b) for b in p_list}) if p_list else default_prefill_buckets(p_max)

    return Config(
        args=args,
        argv=argv,
        served_model_name=args.served_model_name or args.model_path,
        tokenizer_path=args.tokenizer_path or args.model_path,
        mem_fraction_static=mfs,
        attention_backend=args.attention_backend or DEFAULT_ATTENTION_BACKEND,
        chunked_prefill_size=chunked,
        context_len=context_len,
        architecture=str(archs[0]),
        model_type=str(model_cfg.get("model_type") or DEFAULT_MODEL_TYPE),
        max_total_num_tokens=tokens,
        max_running_requests=mrr,
        kv_gb_each=kv_total / 2,
        decode=PhaseGraph(d_backend, int(d_max), d_bs),
        prefill=PhaseGraph(p_backend, int(p_max), p_bs),
        captured_decode_bs=captured,
        deprecation_warnings=warnings,
    )


def resolved_args(cfg: Config) -> dict[str, Any]:
    """The flat ``ServerArgs.resolved_dict()`` part of ``/server_info``."""
    d = dict(vars(cfg.args))
    d.update(
        served_model_name=cfg.served_model_name,
        tokenizer_path=cfg.tokenizer_path,
        mem_fraction_static=cfg.mem_fraction_static,
        attention_backend=cfg.attention_backend,
        chunked_prefill_size=cfg.chunked_prefill_size,
        context_length=cfg.args.context_length,
        log_level_http=cfg.args.log_level_http or cfg.args.log_level,
        device=cfg.args.device or "cuda",
        page_size=cfg.args.page_size or 1,
        sampling_backend=cfg.args.sampling_backend or "flashinfer",
        cuda_graph_config={
            "decode": {
                "backend": cfg.decode.backend,
                "max_bs": cfg.decode.max_bs,
                "bs": cfg.decode.bs,
            },
            "prefill": {
                "backend": cfg.prefill.backend,
                "max_bs": cfg.prefill.max_bs,
                "bs": cfg.prefill.bs,
            },
        },
    )
    if d.get("api_key"):
        d["api_key"] = None  # never echo the key
    return d
