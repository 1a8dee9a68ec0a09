"""SGLang (``python -m sglang.launch_server``): detect, build the argv, read server facts.

SGLang usually lives in its own virtual environment, so everything here talks to it
through that environment's Python (``Settings.sglang_python``) in a subprocess; nothing
imports ``sglang``. Flags differ between versions (0.5.17, run for real on the H200, has the
per-phase CUDA graph flags and keeps ``--cuda-graph-max-bs``/``--disable-cuda-graph`` as
deprecated aliases; 0.5.23 dropped the aliases, so ``--cuda-graph-max-bs`` is an ambiguous
prefix there, exit code 2), so the argv is decided by the installed version's own ``--help``
whenever it could be read (per-phase flags whenever it lists them).
"""

from __future__ import annotations

import re
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from core.config import ServerConfig
from core.engines import detect_cache
from core.engines.base import EngineAdapter, EngineInfo, LaunchPlan, TokenLogprob
from core.engines.declare import EngineSpec, KnobSpec, LogprobSupport
from core.engines.logprobs import (
    GENERATE_PATH,
    generate_logprobs_body,
    generate_score_body,
    parse_generate_logprobs,
    parse_generate_score,
)
from core.engines.sglang_log import FAILURE_REASONS, LOG_FACT_KEYS, parse_sglang_log
from core.errors import ConfigError, EngineUnavailable
from core.metrics import as_number
from core.settings import Settings

__all__ = [
    "ENGINE",
    "SERVER_INFO_FACT_KEYS",
    "SGLangAdapter",
    "build_sglang_argv",
    "facts_from",
    "merge_facts",
    "server_info_facts",
    "uniform_experts_env",
]

ENGINE = EngineSpec(
    name="sglang",
    title="SGLang",
    adapter="core.engines.sglang:SGLangAdapter",
    has_install=True,
    install_hint=(
        "GPU hosts only: `pip install -r requirements-sglang.txt`, or "
        "SERVELAB_SGLANG_PYTHON (README, 'Engines')"
    ),
    reports_kv_pool=True,  # /server_info max_total_num_tokens, or the start-up log
    # `--load-format dummy`: random weights, config.json and tokenizer only (reference §1.5)
    dummy_weights_args=("--load-format", "dummy"),
    # an EnvBool in sglang/srt/environ.py; a release that lacks it ignores it
    uniform_experts_env="SGLANG_SIMULATE_UNIFORM_EXPERTS",
    knobs=(
        KnobSpec("tp_size", "--tp-size", "GPUs the model is split over"),
        KnobSpec(
            "mem_fraction_static",
            "--mem-fraction-static",
            "KV cache tokens",
            "reserved_memory_kv_tokens",
        ),
        KnobSpec("attention_backend", "--attention-backend", "the attention kernels"),
        KnobSpec("dtype", "--dtype", "weights and activations precision"),
        KnobSpec("device", "--device", "where the server runs"),
        KnobSpec(
            "cuda_graphs",
            "--cuda-graph-backend-decode/prefill disabled (0.5.23+), --disable-cuda-graph",
            "decode passes run in CUDA graphs",
            "graph_memory",
        ),
        KnobSpec(
            "cuda_graph_max_bs",
            "--cuda-graph-max-bs-decode (0.5.23+), --cuda-graph-max-bs",
            "running batch vs the largest captured",
            "graph_memory",
        ),
        # Not a ServerConfig field: set through extra_args, read back from the facts.
        KnobSpec("chunked_prefill_size", "--chunked-prefill-size", "prompt tokens vs the chunk"),
    ),
    server_metrics={
        "running_reqs": ("sglang:num_running_reqs",),
        "queued_reqs": ("sglang:num_queue_reqs",),
        "kv_used_tokens": ("sglang:num_used_tokens", "sglang:kv_used_tokens"),
        "kv_usage": ("sglang:token_usage", "sglang:full_token_usage"),
        "gen_throughput_tok_s": ("sglang:gen_throughput",),
        "retracted_reqs": ("sglang:num_retracted_reqs",),
        "retracted_total": ("sglang:num_retracted_requests_total",),
        "paused_reqs": ("sglang:num_paused_reqs",),
        "graph_passes_total": ("sglang:cuda_graph_passes_total",),
        "cached_tokens_total": ("sglang:cached_tokens_total",),
        "prompt_tokens_total": ("sglang:prompt_tokens_total",),
        "weights_gb": ("sglang:weight_memory_usage_gb",),
        "kv_cache_gb": ("sglang:kv_cache_memory_usage_gb",),
        "kv_cache_tokens": ("sglang:max_total_num_tokens",),
        "free_at_ready_gb": ("sglang:startup_available_gpu_memory_gb",),
        "graph_gb": ("sglang:graph_memory_usage_gb",),
    },
    memory_facts={
        "weights_gb": "weight_mem_gb",
        "kv_cache_gb": "kv_cache_gb",
        "kv_cache_tokens": "kv_cache_tokens",
        "graph_gb": "graph_mem_gb",
        "free_after_weights_gb": "avail_mem_gb_after_load",
        "free_after_kv_gb": "avail_mem_gb_after_kv_pool",
        "free_after_capture_gb": "avail_mem_gb_after_graph",
        "free_at_ready_gb": "available_gpu_mem_gb",
    },
    logprobs=LogprobSupport(
        GENERATE_PATH,
        ("return_logprob", "top_logprobs_num", "logprob_start_len"),
        token_ids=True,
        scores=True,
    ),
    bench_backends=("sglang", "sglang-native"),
)

VERSION_TIMEOUT_S = 60.0
# `--help` imports torch and most of SGLang: tens of seconds on a cold disk.
HELP_TIMEOUT_S = 180.0
SERVER_INFO_TIMEOUT_S = 10.0
# The first version whose CUDA graph flags are per phase (see the reference §1.3).
PER_PHASE_GRAPH_FLAGS_SINCE = (0, 5, 23)

# The version (last line), after the environment variables ServeLab may set that this
# release's srt/environ.py declares (read as text: nothing of SGLang is imported).
_VERSION_CODE = (
    "import importlib.metadata as m, importlib.util as u, pathlib as p\n"
    "s = u.find_spec('sglang')\n"
    "e = [p.Path(d, 'srt', 'environ.py') for d in (s.submodule_search_locations or [])][:1]\n"
    "t = e[0].read_text(errors='replace') if e and e[0].is_file() else ''\n"
    "print('env:' + ','.join(v for v in %r if v in t))\n"
    "print(m.version('sglang'))"
)
_FLAG_RE = re.compile(r"(?<![\w-])--[A-Za-z][A-Za-z0-9_-]*")
_VERSION_NUMS_RE = re.compile(r"\d+")
_GPU_INDEX_RE = re.compile(r"cuda:(\d+)")
_NUMBER_RE = re.compile(r"-\d+(\.\d*)?([eE][-+]?\d+)?|-\.\d+|-inf|-nan", re.IGNORECASE)

# Flags ServeLab sets from ServerConfig fields; extra_args may not override them, or the
# stored spec would disagree with the server actually run (argparse keeps the last value).
_MANAGED_FLAGS: dict[str, str] = {
    "--model-path": "server.model",
    "--model": "server.model",
    "--tokenizer-path": "server.tokenizer",
    "--host": "server.host",
    "--port": "server.port",
    "--tp-size": "server.tp_size",
    "--tensor-parallel-size": "server.tp_size",
    "--tp": "server.tp_size",
    "--mem-fraction-static": "server.mem_fraction_static",
    "--attention-backend": "server.attention_backend",
    "--dtype": "server.dtype",
    "--device": "server.device",
    "--base-gpu-id": "server.device",
    "--load-format": "server.shape",
    "--disable-cuda-graph": "server.cuda_graphs",
    "--cuda-graph-backend-decode": "server.cuda_graphs",
    "--cuda-graph-backend-prefill": "server.cuda_graphs",
    "--cuda-graph-max-bs": "server.cuda_graph_max_bs",
    "--cuda-graph-max-bs-decode": "server.cuda_graph_max_bs",
}

# Keys collect_facts reads from /server_info (the log fills whichever stay None).
SERVER_INFO_FACT_KEYS: tuple[str, ...] = (
    "engine_version",
    "kv_cache_tokens",
    "weight_mem_gb",
    "kv_cache_gb",
    "graph_mem_gb",
    "graph_mem_gb_by_phase",
    "available_gpu_mem_gb",
    "cuda_graph_batch_sizes",
    "cuda_graph_enabled",
    "mem_fraction_static",
    "attention_backend",
    "tp_size",
    "startup_s",
    "launch_command",
    "max_total_num_tokens",
    "load_weight_s",
    "kv_cache_allocation_s",
    "cuda_graph_capture_s",
    "last_gen_throughput",
)
# A log key that means the same as a /server_info key under another name.
_LOG_KEY_FOR: dict[str, tuple[str, ...]] = {
    "engine_version": ("sglang_version",),
    "available_gpu_mem_gb": ("available_gpu_mem_gb_final",),
    "kv_cache_tokens": ("kv_cache_tokens", "max_total_num_tokens"),
}

# The environment variables a launch may set, asked of each installed release.
_SETTABLE_ENV = tuple(v for v in (ENGINE.uniform_experts_env,) if v)

_options_cache: dict[tuple[str, str], frozenset[str]] = {}
_options_lock = threading.Lock()


def _version_tuple(version: str | None) -> tuple[int, ...]:
    """``0.5.10.post1`` -> (0, 5, 10); unknown -> ()."""
    if not version:
        return ()
    head = re.split(r"[^\d.]", version, maxsplit=1)[0]
    return tuple(int(n) for n in _VERSION_NUMS_RE.findall(head)[:3])


def _per_phase_graph_flags(version: str | None, options: frozenset[str], flag: str) -> bool:
    """Whether to use 0.5.23's per-phase flag ``flag``: by the option list when known,
    else by version."""
    if options:
        return flag in options
    return _version_tuple(version) >= PER_PHASE_GRAPH_FLAGS_SINCE


def _check_known(flag: str, field: str, version: str | None, options: frozenset[str]) -> None:
    if options and flag not in options:
        raise ConfigError(
            field,
            f"{flag} is unknown to SGLang {version or '(unknown version)'}; "
            "see `python -m sglang.launch_server --help`",
        )


def _check_extra_args(
    extra_args: tuple[str, ...], version: str | None, options: frozenset[str]
) -> None:
    for item in extra_args:
        if not item.startswith("-") or _NUMBER_RE.fullmatch(item):
            continue  # a value, e.g. the `8` of `--max-running-requests 8`, or `-1`
        flag = item.split("=", 1)[0]
        if not item.startswith("--"):
            # `-h` and other short options are not in the option list: refused, so that
            # nothing the list does not know reaches the server.
            raise ConfigError(
                "server.extra_args",
                f"{flag} is a short option; give the long --flag form that "
                "`python -m sglang.launch_server --help` lists",
            )
        if flag in _MANAGED_FLAGS:
            raise ConfigError(
                "server.extra_args",
                f"{flag} is set by ServeLab; use {_MANAGED_FLAGS[flag]} instead",
            )
        # Exact names only: SGLang's argparse also takes unique prefixes, but an ambiguous
        # one (0.5.23's --cuda-graph-max-bs) makes the server exit with code 2.
        _check_known(flag, "server.extra_args", version, options)


def build_sglang_argv(
    config: ServerConfig, port: int, python: str, version: str | None, options: frozenset[str]
) -> list[str]:
    """The launch argv for one SGLang version; ``options`` empty means "not known"."""
    argv = [
        python,
        "-m",
        "sglang.launch_server",
        "--model-path",
        config.model,
        "--host",
        config.host,
        "--port",
        str(port),
        "--tp-size",
        str(config.tp_size),
    ]
    if config.tokenizer:
        argv += ["--tokenizer-path", config.tokenizer]
    if config.mem_fraction_static is not None:
        argv += ["--mem-fraction-static", f"{config.mem_fraction_static:g}"]
    if config.attention_backend:
        argv += ["--attention-backend", config.attention_backend]
    if config.dtype != "auto":
        argv += ["--dtype", config.dtype]
    if config.device == "cpu" or config.device.startswith("cuda"):
        _check_known("--device", "server.device", version, options)
        argv += ["--device", "cpu" if config.device == "cpu" else "cuda"]
        if m := _GPU_INDEX_RE.fullmatch(config.device):
            _check_known("--base-gpu-id", "server.device", version, options)
            argv += ["--base-gpu-id", m[1]]
    argv.append("--enable-metrics")  # so /metrics exists for the sampler
    if config.shape is not None:
        _check_known(ENGINE.dummy_weights_args[0], "server.shape", version, options)
        argv += list(ENGINE.dummy_weights_args)
    if config.cuda_graphs is False:
        if _per_phase_graph_flags(version, options, "--cuda-graph-backend-decode"):
            argv += [
                "--cuda-graph-backend-decode",
                "disabled",
                "--cuda-graph-backend-prefill",
                "disabled",
            ]
        else:
            _check_known("--disable-cuda-graph", "server.cuda_graphs", version, options)
            argv.append("--disable-cuda-graph")
    elif config.cuda_graph_max_bs is not None:
        if _per_phase_graph_flags(version, options, "--cuda-graph-max-bs-decode"):
            argv += ["--cuda-graph-max-bs-decode", str(config.cuda_graph_max_bs)]
        else:
            _check_known("--cuda-graph-max-bs", "server.cuda_graph_max_bs", version, options)
            argv += ["--cuda-graph-max-bs", str(config.cuda_graph_max_bs)]
    _check_extra_args(config.extra_args, version, options)
    return argv + list(config.extra_args)


def uniform_experts_env(config: ServerConfig) -> dict[str, str]:
    """The environment that makes an MoE shape's routing uniform; {} for a dense shape, a
    real model, or ``uniform_experts`` False."""
    from core.shapes import load_shape

    if config.shape is None or config.uniform_experts is False or not ENGINE.uniform_experts_env:
        return {}
    if not load_shape(config.shape).is_moe:
        return {}
    return {ENGINE.uniform_experts_env: "1"}


def _read_options(python: str, version: str) -> tuple[frozenset[str], str]:
    """Every ``--flag`` in ``launch_server --help``, cached per (python, version); an empty
    set and the reason when the help could not be read (failures are not cached)."""
    key = (python, version)
    with _options_lock:
        if key in _options_cache:
            return _options_cache[key], ""
    try:
        proc = subprocess.run(
            [python, "-m", "sglang.launch_server", "--help"],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=HELP_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return frozenset(), f"could not run `sglang.launch_server --help`: {exc}"
    options = frozenset(f.rstrip("-") for f in _FLAG_RE.findall(proc.stdout))
    if proc.returncode != 0 or not options:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return frozenset(), f"`sglang.launch_server --help` failed ({proc.returncode}): {last}"
    with _options_lock:
        _options_cache[key] = options
    return options, ""


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _graph_enabled(info: dict[str, Any], state: dict[str, Any]) -> bool | None:
    bs = state.get("decode_cuda_graph_bs")
    if isinstance(bs, list) and bs:
        return True
    if info.get("disable_cuda_graph") is True:
        return False
    phases = _dict(info.get("cuda_graph_config"))
    backends = [_dict(phases.get(p)).get("backend") for p in ("decode", "prefill")]
    if phases and all(b == "disabled" for b in backends):
        return False
    if isinstance(bs, list):
        return False  # the reference: `[]` when disabled
    # 0.5.17's internal_states lack decode_cuda_graph_bs; a ready server with a phase whose
    # backend is not "disabled" has captured that phase.
    if any(isinstance(b, str) and b != "disabled" for b in backends):
        return True
    return None


def _decode_batch_sizes(info: dict[str, Any], state: dict[str, Any]) -> list[int] | None:
    """The decode batch sizes captured: internal_states' list (0.5.23), else the resolved
    ``cuda_graph_config.decode.bs`` when decode graphs are on (0.5.17 states only that)."""
    bs = state.get("decode_cuda_graph_bs")
    if not isinstance(bs, list):
        decode = _dict(_dict(info.get("cuda_graph_config")).get("decode"))
        if decode.get("backend") in (None, "disabled") or info.get("disable_cuda_graph"):
            return None
        bs = decode.get("bs")
    if not isinstance(bs, list):
        return None
    return [int(b) for b in bs if _int(b) is not None]


def server_info_facts(info: dict[str, Any]) -> dict[str, Any]:
    """The facts /server_info states (reference §3.3); None where it does not say."""
    states = info.get("internal_states")
    state = _dict(states[0]) if isinstance(states, list) and states else {}
    usage = _dict(state.get("memory_usage"))
    graph = usage.get("graph")
    graph_gb = [v for v in _dict(graph).values() if as_number(v) is not None]
    startup = _dict(info.get("startup_time")) or _dict(state.get("startup_time"))
    capture = [v for v in _dict(startup.get("cuda_graph")).values() if as_number(v) is not None]
    version = info.get("version")
    command = info.get("launch_command")
    backend = info.get("attention_backend", state.get("attention_backend"))
    return {
        "engine_version": version if isinstance(version, str) else None,
        "max_total_num_tokens": _int(info.get("max_total_num_tokens")),
        "kv_cache_tokens": _int(info.get("max_total_num_tokens"))
        or _int(usage.get("token_capacity")),
        "weight_mem_gb": as_number(usage.get("weight")),
        "kv_cache_gb": as_number(usage.get("kvcache")),
        "graph_mem_gb": round(sum(graph_gb), 3) if graph_gb else as_number(graph),
        # per phase (0.5.17+: prefill, decode, draft_…), the phases that took memory
        "graph_mem_gb_by_phase": {
            str(k): x for k, v in _dict(graph).items() if (x := as_number(v)) is not None and x > 0
        }
        or None,
        "available_gpu_mem_gb": as_number(usage.get("startup_available")),
        "cuda_graph_batch_sizes": _decode_batch_sizes(info, state),
        "cuda_graph_enabled": _graph_enabled(info, state),
        "mem_fraction_static": as_number(
            info.get("mem_fraction_static", state.get("mem_fraction_static"))
        ),
        "attention_backend": backend if isinstance(backend, str) else None,
        "tp_size": _int(info.get("tp_size", state.get("tp_size"))),
        # /server_info has per-phase times only; the whole start-up comes from the log.
        "startup_s": None,
        "load_weight_s": as_number(startup.get("load_weight")),
        "kv_cache_allocation_s": as_number(startup.get("kv_cache_allocation")),
        "cuda_graph_capture_s": round(sum(capture), 3) if capture else None,
        "last_gen_throughput": as_number(state.get("last_gen_throughput")),
        "launch_command": command if isinstance(command, str) else None,
    }


def _fetch_server_info(base_url: str) -> dict[str, Any] | None:
    """GET /server_info, or the deprecated /get_server_info of older versions; None if
    neither answers with a JSON object."""
    try:
        with httpx.Client(timeout=SERVER_INFO_TIMEOUT_S) as client:
            for path in ("/server_info", "/get_server_info"):
                try:
                    resp = client.get(base_url.rstrip("/") + path)
                    body = resp.json() if resp.status_code == 200 else None
                except (httpx.HTTPError, httpx.InvalidURL, ValueError):
                    continue
                if isinstance(body, dict):
                    return body
    except (httpx.HTTPError, httpx.InvalidURL, OSError):
        pass
    return None


class SGLangAdapter(EngineAdapter):
    """Launches ``python -m sglang.launch_server`` from the Python that has SGLang."""

    name = ENGINE.name

    def __init__(self, python: str, cache_dir: Path | None = None) -> None:
        self.python = python
        # Where the option list of a (python, version) is kept between run processes
        # (core/engines/detect_cache.py): each run is its own process, and `--help`
        # imports torch and SGLang, tens of seconds.
        self.cache_dir = cache_dir

    @classmethod
    def from_settings(cls, settings: Settings, install: str | None) -> SGLangAdapter:
        return cls(settings.engine_python(cls.name, install), settings.detect_cache_dir)

    def logprobs_request(
        self, model: str, prompt: str | Sequence[int], max_tokens: int, top_n: int
    ) -> tuple[str, dict[str, Any]]:
        return GENERATE_PATH, generate_logprobs_body(prompt, max_tokens, top_n)

    def parse_logprobs(self, body: dict[str, Any]) -> list[TokenLogprob]:
        return parse_generate_logprobs(body)

    def score_request(
        self, model: str, prompt_ids: Sequence[int], continuation_ids: Sequence[int], top_n: int
    ) -> tuple[str, dict[str, Any]]:
        return GENERATE_PATH, generate_score_body(prompt_ids, continuation_ids, top_n)

    def parse_score(self, body: dict[str, Any], count: int) -> list[TokenLogprob]:
        return parse_generate_score(body, count)

    def _options(self, version: str) -> tuple[frozenset[str], str]:
        key = {"python": detect_cache.interpreter(self.python), "sglang": version}
        cached = detect_cache.load(self.cache_dir, "sglang", key)
        if cached is not None and isinstance(cached.get("options"), list):
            return frozenset(str(f) for f in cached["options"]), ""
        options, problem = _read_options(self.python, version)
        if options:
            detect_cache.store(self.cache_dir, "sglang", key, {"options": sorted(options)})
        return options, problem

    def detect(self) -> EngineInfo:
        try:
            proc = subprocess.run(
                [self.python, "-c", _VERSION_CODE % (_SETTABLE_ENV,)],
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
                reason=f"SGLang is not installed for {self.python} ({last})",
            )
        version = lines[-1].strip()
        env_line = next((ln for ln in lines[:-1] if ln.startswith("env:")), "env:")
        env_vars = frozenset(v for v in env_line[4:].split(",") if v)
        options, problem = self._options(version)
        notes = (
            (f"{problem}; flags are chosen by version and extra_args are not checked",)
            if problem
            else ()
        )
        return EngineInfo(
            self.name,
            installed=True,
            version=version,
            options=options,
            notes=notes,
            env_vars=env_vars,
        )

    def plan_launch(self, config: ServerConfig, port: int, info: EngineInfo) -> LaunchPlan:
        if not info.installed:
            raise EngineUnavailable(
                f"{info.reason or 'SGLang is not installed'}. To add SGLang, run "
                "`pip install -r requirements-sglang.txt` on a GPU host, or set "
                "SERVELAB_SGLANG_PYTHON to the python of a virtual environment that has SGLang."
            )
        if config.device == "mps":
            raise ConfigError(
                "server.device", "SGLang does not run on mps; use auto, cuda, cuda:N or cpu"
            )
        argv = build_sglang_argv(config, port, self.python, info.version, info.options)
        notes: list[str] = []
        if config.cuda_graphs is False and config.cuda_graph_max_bs is not None:
            notes.append("cuda_graph_max_bs ignored: CUDA graphs are off")
        if config.device == "cpu" and config.cuda_graphs:
            notes.append("CUDA graphs do not apply on CPU")
        if not config.continuous_batching or config.compile:
            notes.append(
                "continuous_batching/compile apply to transformers only; SGLang "
                "always batches continuously"
            )
        host = f"[{config.host}]" if ":" in config.host else config.host
        env = uniform_experts_env(config)
        if env and not set(env) <= info.env_vars:  # this release would ignore it
            if config.uniform_experts:
                raise ConfigError(
                    "server.uniform_experts",
                    f"SGLang {info.version or '(unknown version)'} does not read "
                    f"{ENGINE.uniform_experts_env}; set uniform_experts to false, or use a "
                    "release that has it",
                )
            env = {}
            notes.append(
                f"MoE routing: the dummy gate's own, uneven (SGLang {info.version} does not "
                f"read {ENGINE.uniform_experts_env})"
            )
        if env:
            notes.append("MoE routing simulated uniformly (dummy gate weights route unevenly)")
        return LaunchPlan(
            argv=argv,
            env=env,
            base_url=f"http://{host}:{port}",
            # 503 until SGLang's own warm-up request succeeds, then 200.
            health_path="/health",
            tokenizer_path=config.tokenizer or config.model,
            supports_ignore_eos=True,
            supports_flush_cache=True,
            notes=tuple(notes),
        )

    def failure_in_log(self, log_text: str) -> str | None:
        """Why start-up failed, in words, when the log shows a known failure."""
        label = parse_sglang_log(log_text)["failure"]
        return f"{FAILURE_REASONS[label]} ({label})" if label in FAILURE_REASONS else None

    def collect_facts(self, base_url: str, log_text: str) -> dict[str, Any]:
        """/server_info facts, each still-None key filled from the log; ``facts_source`` says
        where the facts came from overall and ``facts_source_by_key`` per key."""
        return facts_from(_fetch_server_info(base_url), log_text)


def merge_facts(
    from_info: dict[str, Any], from_log: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, str]]:
    """/server_info's facts first, each key it does not state filled from the log's (under
    the log's own name for it); also the source of each key ("server_info" or "log").
    Launched and imported runs both merge through here, so they name every fact the same."""
    facts: dict[str, Any] = {}
    by_key: dict[str, str] = {}
    for key in dict.fromkeys([*SERVER_INFO_FACT_KEYS, *from_log]):
        value = from_info.get(key)
        if value is not None:
            facts[key], by_key[key] = value, "server_info"
            continue
        for log_key in _LOG_KEY_FOR.get(key, (key,)):
            if from_log.get(log_key) is not None:
                facts[key], by_key[key] = from_log[log_key], "log"
                break
        else:
            facts[key] = None
    return facts, by_key


def facts_from(raw: dict[str, Any] | None, log_text: str) -> dict[str, Any]:
    """The facts of a /server_info body (None: none answered) and a start-up log; what
    ``collect_facts`` stores, also for re-reading a stored run (bench/gpu/import_results.py)."""
    from_info = server_info_facts(raw) if raw is not None else dict.fromkeys(SERVER_INFO_FACT_KEYS)
    # A blank log states nothing, not even "not ready" or "0 decode lines".
    from_log = parse_sglang_log(log_text) if log_text.strip() else dict.fromkeys(LOG_FACT_KEYS)
    facts, by_key = merge_facts(from_info, from_log)
    sources = sorted(set(by_key.values()), reverse=True)
    facts["facts_source"] = "+".join(sources) if sources else "none"
    facts["facts_source_by_key"] = by_key
    facts["server_info_raw"] = raw
    return facts
