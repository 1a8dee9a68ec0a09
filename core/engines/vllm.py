"""vLLM (``vllm serve MODEL``): detect, build the argv, read server facts.

vLLM usually lives in its own virtual environment, so everything here talks to it through
that environment's Python (``Settings.vllm_python``, or a named installation) in a
subprocess; nothing imports ``vllm``. The server is started as ``python -m
vllm.entrypoints.cli.main serve MODEL …`` (what the ``vllm`` console script runs), so a
named installation's Python picks its own vLLM. Flags differ between versions, so the argv
is checked against the installed version's own ``serve --help=all`` (plain ``--help`` lists
only the option groups since 0.10).

What vLLM can and cannot tell about CUDA graphs: the start-up log states the mode it
resolved (``cudagraph_mode`` in the engine config line), the capture sizes, and the capture's
time and memory (``Graph capturing finished in N secs, took X GiB``). ``/metrics`` has no
per-pass graph counter, so whether the benchmark's own forward passes ran in graphs is not
in the server view; with ``--cudagraph-metrics`` (passed whenever the installed version lists
it) the log carries periodic tables of passes per runtime mode, which the facts count.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from core.config import ServerConfig
from core.engines import detect_cache
from core.engines.base import EngineAdapter, EngineInfo, LaunchPlan, TokenLogprob
from core.engines.declare import EngineSpec, KnobSpec, LogprobSupport
from core.engines.logprobs import (
    COMPLETIONS_PATH,
    completions_logprobs_body,
    completions_score_body,
    parse_completions_logprobs,
    parse_completions_score,
)
from core.engines.vllm_log import FAILURE_REASONS, graph_runtime_modes, parse_vllm_log
from core.errors import ConfigError, EngineUnavailable
from core.settings import Settings

__all__ = ["ENGINE", "VLLMAdapter", "build_vllm_argv", "facts_from", "read_help_options"]

ENGINE = EngineSpec(
    name="vllm",
    title="vLLM",
    adapter="core.engines.vllm:VLLMAdapter",
    python_setting="vllm_python",
    has_install=True,
    install_hint=(
        "GPU hosts only: `pip install vllm` in its own virtual environment, then "
        "SERVELAB_VLLM_PYTHON (README, 'Engines'); bench/gpu/prepare_vllm.sh stages 0.26.0"
    ),
    reports_kv_pool=True,  # the log's "GPU KV cache size: N tokens"
    # `--load-format dummy`: random weights from config.json and a tokenizer (a model shape).
    # vLLM has no switch for uniform MoE routing: an MoE shape keeps the dummy gate's own.
    dummy_weights_args=("--load-format", "dummy"),
    knobs=(
        KnobSpec("tp_size", "--tensor-parallel-size", "GPUs the model is split over"),
        # Where the graphs' memory goes depends on the model runner, so the log says it per run:
        # the V1 runner profiles it into this budget (graphs on, smaller KV pool); 0.26.0's V2
        # runner, measured, sizes the pool first and spends the graphs beyond the fraction
        # (same pool, facts' over_budget_gb). The ledger shows both per arm.
        KnobSpec(
            "mem_fraction_static",
            "--gpu-memory-utilization",
            "KV cache tokens",
            "reserved_memory_kv_tokens",
        ),
        KnobSpec("attention_backend", "--attention-backend", "the attention kernels"),
        KnobSpec("dtype", "--dtype", "weights and activations precision"),
        KnobSpec(
            "cuda_graphs",
            "-cc.cudagraph_mode=NONE (off; default FULL_AND_PIECEWISE)",
            "forward passes run in CUDA graphs",
            "graph_memory",
        ),
        KnobSpec(
            "cuda_graph_max_bs",
            "-cc.max_cudagraph_capture_size",
            "running batch vs the largest captured",
            "graph_memory",
        ),
        # Not ServerConfig fields: set through extra_args, read back from the facts.
        KnobSpec("max_running_requests", "--max-num-seqs", "requests decoded together"),
        KnobSpec(
            "enforce_eager",
            "--enforce-eager",
            "torch.compile and CUDA graphs, both off",
            "graph_memory",
        ),
    ),
    server_metrics=MappingProxyType(
        {
            "running_reqs": ("vllm:num_requests_running",),
            "queued_reqs": ("vllm:num_requests_waiting",),
            "kv_usage": ("vllm:kv_cache_usage_perc",),  # a share of 1, despite the name
            # a preempted request is recomputed later: SGLang's "retracted"
            "retracted_total": ("vllm:num_preemptions_total",),
            "cached_tokens_total": ("vllm:prefix_cache_hits_total",),
            "prompt_tokens_total": ("vllm:prefix_cache_queries_total",),
        }
    ),
    memory_facts=MappingProxyType(
        {
            "weights_gb": "weight_mem_gb",
            "kv_cache_gb": "kv_cache_gb",
            "kv_cache_tokens": "kv_cache_tokens",
            "graph_gb": "graph_mem_gb",
        }
    ),
    # /v1/completions takes token ids as the prompt and, with echo, scores the prompt's own
    # tokens: the answers step's teacher forcing (issue 36).
    logprobs=LogprobSupport(COMPLETIONS_PATH, ("logprobs", "echo"), token_ids=True, scores=True),
    bench_backends=("vllm",),
    defaults=MappingProxyType(
        {
            "cuda_graphs": "on: cudagraph_mode FULL_AND_PIECEWISE",
            "torch_compile": "on: -O2 (VLLM_COMPILE), off only with --enforce-eager",
            "prefix_caching": "on",
            "chunked_prefill": "on",
            "graph_memory": "per run, from its log: inside the gpu-memory-utilization budget "
            "where vLLM profiles it (smaller KV pool); beyond it on 0.26.0's V2 runner (same "
            "pool, over_budget_gb)",
        }
    ),
)

VERSION_TIMEOUT_S = 60.0
# `serve --help=all` imports torch and most of vLLM: tens of seconds on a cold disk.
HELP_TIMEOUT_S = 240.0
FACTS_TIMEOUT_S = 10.0
MODULE = "vllm.entrypoints.cli.main"

_VERSION_CODE = "import importlib.metadata as m; print(m.version('vllm'))"
_FLAG_RE = re.compile(r"(?<![\w-])--?[A-Za-z][A-Za-z0-9_-]*")
_NUMBER_RE = re.compile(r"-\d+(\.\d*)?([eE][-+]?\d+)?|-\.\d+|-inf|-nan", re.IGNORECASE)
_GPU_INDEX_RE = re.compile(r"cuda:(\d+)")
# Flags ServeLab sets from ServerConfig fields; extra_args may not set them again.
_MANAGED_FLAGS: dict[str, str] = {
    "--host": "server.host",
    "--port": "server.port",
    "--tokenizer": "server.tokenizer",
    "--tensor-parallel-size": "server.tp_size",
    "-tp": "server.tp_size",
    "--gpu-memory-utilization": "server.mem_fraction_static",
    "--attention-backend": "server.attention_backend",
    "--dtype": "server.dtype",
}


def read_help_options(help_text: str) -> frozenset[str]:
    """Every option ``serve --help=all`` lists (``--flag`` and short ``-cc``/``-tp``)."""
    return frozenset(f.rstrip("-") for f in _FLAG_RE.findall(help_text) if len(f) > 2)


def _check_known(flag: str, field: str, version: str | None, options: frozenset[str]) -> None:
    if options and flag not in options:
        raise ConfigError(
            field,
            f"{flag} is unknown to vLLM {version or '(unknown version)'}; "
            "see `vllm serve --help=all`",
        )


def _check_extra_args(config: ServerConfig, version: str | None, options: frozenset[str]) -> None:
    for item in config.extra_args:
        if not item.startswith("-") or _NUMBER_RE.fullmatch(item):
            continue  # a value, e.g. the `64` of `--max-num-seqs 64`
        flag = item.split("=", 1)[0].split(".", 1)[0]  # `-cc.cudagraph_mode=…` → `-cc`
        if flag in _MANAGED_FLAGS:
            raise ConfigError(
                "server.extra_args", f"{flag} is set by ServeLab; use {_MANAGED_FLAGS[flag]}"
            )
        if flag == "--load-format" and config.shape is not None:
            raise ConfigError(
                "server.extra_args",
                "--load-format is set by server.shape (dummy weights); drop it from extra_args",
            )
        if flag == "--enforce-eager" and config.cuda_graphs:
            raise ConfigError(
                "server.extra_args",
                "--enforce-eager turns CUDA graphs off, and server.cuda_graphs is on; "
                "leave cuda_graphs unset or drop --enforce-eager",
            )
        _check_known(flag, "server.extra_args", version, options)


def _compilation_args(config: ServerConfig, options: frozenset[str]) -> list[str]:
    """The compilation-config items: dotted ``-cc.KEY=VALUE`` where the help lists ``-cc``
    (vLLM merges them into one JSON), else one ``--compilation-config`` JSON."""
    items: dict[str, str] = {}
    if config.cuda_graphs is False:
        items["cudagraph_mode"] = "NONE"
    elif config.cuda_graph_max_bs is not None:
        items["max_cudagraph_capture_size"] = str(config.cuda_graph_max_bs)
    if not items:
        return []
    if not options or "-cc" in options:
        return [f"-cc.{k}={v}" for k, v in items.items()]
    body = ", ".join(f'"{k}": ' + (v if v.isdigit() else f'"{v}"') for k, v in items.items())
    return ["--compilation-config", "{" + body + "}"]


def build_vllm_argv(
    config: ServerConfig, port: int, python: str, version: str | None, options: frozenset[str]
) -> list[str]:
    """The launch argv for one vLLM version; ``options`` empty means "not known"."""
    argv = [python, "-m", MODULE, "serve", config.model, "--host", config.host]
    argv += ["--port", str(port), "--tensor-parallel-size", str(config.tp_size)]
    if config.tokenizer:
        argv += ["--tokenizer", config.tokenizer]
    if config.mem_fraction_static is not None:
        argv += ["--gpu-memory-utilization", f"{config.mem_fraction_static:g}"]
    if config.attention_backend:
        _check_known("--attention-backend", "server.attention_backend", version, options)
        # vLLM's names are upper case (TRITON_ATTN, FLASH_ATTN); the env variable
        # VLLM_ATTENTION_BACKEND is no longer read.
        argv += ["--attention-backend", config.attention_backend.upper()]
    if config.dtype != "auto":
        argv += ["--dtype", config.dtype]
    if config.shape is not None:
        _check_known(ENGINE.dummy_weights_args[0], "server.shape", version, options)
        argv += list(ENGINE.dummy_weights_args)
    argv += _compilation_args(config, options)
    if "--cudagraph-metrics" in options:
        argv.append("--cudagraph-metrics")  # graph use per runtime mode, in the log
    _check_extra_args(config, version, options)
    return argv + list(config.extra_args)


def _read_options(python: str) -> tuple[frozenset[str], str]:
    """The option list of ``serve --help=all``; empty and the reason when unreadable."""
    try:
        proc = subprocess.run(
            [python, "-m", MODULE, "serve", "--help=all"],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=HELP_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return frozenset(), f"could not run `vllm serve --help=all`: {exc}"
    options = read_help_options(proc.stdout)
    if proc.returncode != 0 or "--gpu-memory-utilization" not in options:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return frozenset(), f"`vllm serve --help=all` failed ({proc.returncode}): {last}"
    return options, ""


def _get(client: httpx.Client, url: str) -> httpx.Response | None:
    try:
        resp = client.get(url)
    except (httpx.HTTPError, httpx.InvalidURL, OSError):
        return None
    return resp if resp.status_code == 200 else None


def _cache_config(metrics_text: str) -> dict[str, str]:
    """The labels of ``vllm:cache_config_info`` (every CacheConfig field, as text)."""
    try:
        for family in text_string_to_metric_families(metrics_text):
            for sample in family.samples:
                if sample.name == "vllm:cache_config_info":
                    return dict(sample.labels)
    except ValueError:
        pass  # a body that is not Prometheus text states nothing
    return {}


def _server_answers(base_url: str) -> dict[str, Any]:
    """What the running server says about itself: /version, /v1/models, /metrics."""
    out: dict[str, Any] = {"has_metrics_endpoint": False}
    base = base_url.rstrip("/")
    with httpx.Client(timeout=FACTS_TIMEOUT_S) as client:
        if (r := _get(client, base + "/version")) is not None:
            version = r.json().get("version") if isinstance(r.json(), dict) else None
            out["version"] = version if isinstance(version, str) else None
        if (r := _get(client, base + "/v1/models")) is not None:
            data = r.json().get("data") if isinstance(r.json(), dict) else None
            models = [m for m in data if isinstance(m, dict)] if isinstance(data, list) else []
            out["served_models"] = [str(m.get("id")) for m in models]
            out["max_model_len"] = models[0].get("max_model_len") if models else None
        if (r := _get(client, base + "/metrics")) is not None:
            out["has_metrics_endpoint"] = True
            out["cache_config"] = _cache_config(r.text)
    return out


def _int_text(value: Any) -> int | None:
    return int(value) if isinstance(value, str) and value.isdigit() else None


def facts_from(answers: dict[str, Any], log_text: str) -> dict[str, Any]:
    """The facts of a start-up log and the server's own answers (``_server_answers``);
    what ``collect_facts`` stores, also for re-reading a stored run."""
    log = parse_vllm_log(log_text)
    cache = answers.get("cache_config") or {}
    blocks, block = _int_text(cache.get("num_gpu_blocks")), _int_text(cache.get("block_size"))
    pool = blocks * block if blocks is not None and block is not None else None
    facts = dict(log)
    facts["engine_version"] = answers.get("version") or log["vllm_version"]
    facts["kv_cache_tokens"] = log["kv_cache_tokens"] or pool
    facts["kv_cache_blocks"] = blocks
    facts["kv_block_size"] = block
    facts["max_model_len"] = answers.get("max_model_len") or log["max_model_len"]
    facts["mem_fraction_static"] = log["gpu_memory_utilization"] or _float_text(
        cache.get("gpu_memory_utilization")
    )
    facts["served_models"] = answers.get("served_models")
    facts["has_metrics_endpoint"] = answers.get("has_metrics_endpoint", False)
    facts["graph_runtime_modes"] = graph_runtime_modes(log_text) or None
    facts["facts_source"] = (
        "+".join(
            s
            for s, used in (("server", bool(answers.get("version"))), ("log", bool(log_text)))
            if used
        )
        or "none"
    )
    return facts


def _float_text(value: Any) -> float | None:
    try:
        return float(value) if isinstance(value, str) else None
    except ValueError:
        return None


class VLLMAdapter(EngineAdapter):
    """Launches ``vllm serve`` from the Python that has vLLM."""

    name = ENGINE.name

    def __init__(self, python: str, cache_dir: Path | None = None) -> None:
        self.python = python
        self.cache_dir = cache_dir  # option lists between run processes (detect_cache)

    @classmethod
    def from_settings(cls, settings: Settings, install: str | None) -> VLLMAdapter:
        return cls(settings.engine_python(cls.name, install), settings.detect_cache_dir)

    def logprobs_request(
        self, model: str, prompt: str | Sequence[int], max_tokens: int, top_n: int
    ) -> tuple[str, dict[str, Any]]:
        # vLLM caps top_n at --max-logprobs (20 by default).
        return COMPLETIONS_PATH, completions_logprobs_body(model, prompt, max_tokens, top_n)

    def parse_logprobs(self, body: dict[str, Any]) -> list[TokenLogprob]:
        return parse_completions_logprobs(body)

    def score_request(
        self, model: str, prompt_ids: Sequence[int], continuation_ids: Sequence[int], top_n: int
    ) -> tuple[str, dict[str, Any]]:
        body = completions_score_body(model, prompt_ids, continuation_ids, top_n)
        return COMPLETIONS_PATH, body

    def parse_score(self, body: dict[str, Any], count: int) -> list[TokenLogprob]:
        return parse_completions_score(body, count)

    def _options(self, version: str) -> tuple[frozenset[str], str]:
        key = {"python": detect_cache.interpreter(self.python), "vllm": version}
        cached = detect_cache.load(self.cache_dir, "vllm", key)
        if cached is not None and isinstance(cached.get("options"), list):
            return frozenset(str(f) for f in cached["options"]), ""
        options, problem = _read_options(self.python)
        if options:
            detect_cache.store(self.cache_dir, "vllm", key, {"options": sorted(options)})
        return options, problem

    def detect(self) -> EngineInfo:
        try:
            proc = subprocess.run(
                [self.python, "-c", _VERSION_CODE],
                capture_output=True,
                text=True,
                errors="replace",
                timeout=VERSION_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return EngineInfo(
                self.name, installed=False, reason=f"could not run {self.python}: {exc}"
            )
        lines = proc.stdout.strip().splitlines()
        if proc.returncode != 0 or not lines:
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            return EngineInfo(
                self.name,
                installed=False,
                reason=f"vLLM is not installed for {self.python} ({last})",
            )
        version = lines[-1].strip()
        options, problem = self._options(version)
        notes = (f"{problem}; extra_args are not checked",) if problem else ()
        return EngineInfo(self.name, installed=True, version=version, options=options, notes=notes)

    def plan_launch(self, config: ServerConfig, port: int, info: EngineInfo) -> LaunchPlan:
        if not info.installed:
            raise EngineUnavailable(
                f"{info.reason or 'vLLM is not installed'}. {ENGINE.install_hint}."
            )
        if config.device in ("cpu", "mps"):
            raise ConfigError(
                "server.device", "ServeLab launches vLLM on CUDA GPUs only; use auto or cuda:N"
            )
        argv = build_vllm_argv(config, port, self.python, info.version, info.options)
        env: dict[str, str] = {}
        if m := _GPU_INDEX_RE.fullmatch(config.device):
            env["CUDA_VISIBLE_DEVICES"] = m[1]  # vLLM has no device-index flag
        notes: list[str] = []
        if config.cuda_graphs is False and config.cuda_graph_max_bs is not None:
            notes.append("cuda_graph_max_bs ignored: CUDA graphs are off")
        if not config.continuous_batching or config.compile:
            notes.append(
                "continuous_batching/compile apply to transformers only; vLLM always batches "
                "continuously and compiles unless --enforce-eager"
            )
        from core.shapes import load_shape

        if config.shape is not None and load_shape(config.shape).is_moe:
            notes.append(
                "MoE routing: the dummy gate's own, uneven (vLLM has no switch to simulate "
                "uniform routing)"
            )
        host = f"[{config.host}]" if ":" in config.host else config.host
        return LaunchPlan(
            argv=argv,
            base_url=f"http://{host}:{port}",
            health_path="/health",  # nothing listens until the engine is up, then 200
            env=env,
            tokenizer_path=config.tokenizer or config.model,
            supports_ignore_eos=True,  # a vLLM sampling parameter on /v1/* requests
            supports_flush_cache=False,  # /reset_prefix_cache only in VLLM_SERVER_DEV_MODE
            notes=tuple(notes),
        )

    def failure_in_log(self, log_text: str) -> str | None:
        label = parse_vllm_log(log_text)["failure"]
        return f"{FAILURE_REASONS[label]} ({label})" if label in FAILURE_REASONS else None

    def collect_facts(self, base_url: str, log_text: str) -> dict[str, Any]:
        return facts_from(_server_answers(base_url), log_text)
