"""Engine adapter for ``transformers serve`` (Hugging Face transformers' OpenAI-compatible server).

The CLI changes between releases, so nothing here assumes one version's flags:
``detect()`` reads ``serve --help`` of the installed version and ``plan_launch`` builds the
argv only from flags that help lists, naming the ``server.*`` field whenever a knob needs a
flag this version lacks. Behaviour measured on 5.24 (and read in the 5.17 sources) is written
up in docs/ENGINES.md, section "transformers serve". The parts that shape this module:

* the model is pinned as a positional argument (``FORCE_MODEL``) and loaded before the HTTP
  port opens, so ``/health`` refuses connections until the model is in memory, then answers
  200 ``{"status":"ok"}`` (503 if the continuous-batching worker died);
* a pinned server accepts a request's ``model`` only if it equals the pinned string exactly
  (HTTP 400 otherwise), so ``model_name`` is the argv's model string;
* ``ignore_eos`` (and ``min_tokens``) are rejected with HTTP 422; a request can instead carry
  ``generation_config='{"eos_token_id": -1}'`` to run to ``max_tokens`` (``exact_length_fields``);
* there is no ``/metrics`` and no prefix-cache flush endpoint;
* ``--cb-use-cuda-graph`` is accepted on CPU and silently does nothing, so ServeLab refuses
  ``server.cuda_graphs=true`` on a CPU-only host instead of recording a meaningless A/B.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from core.config import ServerConfig
from core.engines import detect_cache
from core.engines.base import EngineAdapter, EngineInfo, LaunchPlan
from core.engines.declare import EngineSpec, KnobSpec, LogprobSupport
from core.engines.model_setup import resolve_model
from core.errors import ConfigError, EngineUnavailable
from core.settings import Settings, cuda_visible_devices

ENGINE = EngineSpec(
    name="transformers",
    title="transformers serve",
    adapter="core.engines.transformers_serve:TransformersServeAdapter",
    has_install=True,
    install_hint="`pip install transformers[serving]`, or SERVELAB_TRANSFORMERS_PYTHON",
    knobs=(
        KnobSpec("device", "--device", "where the server runs"),
        KnobSpec("dtype", "--dtype", "weights and activations precision"),
        KnobSpec(
            "continuous_batching",
            "--continuous-batching / --no-continuous-batching",
            "requests batched together per decode step",
        ),
        KnobSpec(
            "cb_max_memory_percent",
            "--cb-max-memory-percent",
            "the continuous-batching KV cache",
            "reserved_memory_kv_tokens",
        ),
        KnobSpec("compile", "--compile", "the model's forward pass (torch.compile)"),
        KnobSpec(
            "cuda_graphs",
            "--cb-use-cuda-graph / --no-cb-use-cuda-graph",
            "decode passes run in CUDA graphs",
            "graph_memory",
        ),
    ),
    logprobs=LogprobSupport(
        None,
        why=(
            "transformers serve (5.25) returns no token logprobs on any route: chat "
            "completions ignore logprobs and top_logprobs, /v1/completions ignores logprobs "
            "and echo (logprobs null), /v1/responses answers an empty list; the answers "
            "check compares its greedy text only"
        ),
    ),
)

__all__ = [
    "CLI_MODULE",
    "NOTE_CB_CPU_BOUNDED",
    "NOTE_CB_HOST_MEMORY",
    "NOTE_CUDA_ABSENT",
    "NOTE_CUDA_AVAILABLE",
    "NOTE_MODEL_FLAG",
    "NOTE_MODEL_POSITIONAL",
    "TransformersServeAdapter",
    "exact_length_fields",
    "parse_serve_help",
]

CLI_MODULE = "transformers.cli.transformers"  # `python -m` entry point in 5.17 and 5.24

# Facts detect() records in EngineInfo.notes and plan_launch() reads back (exact strings).
NOTE_MODEL_POSITIONAL = "serve takes the model as a positional argument"
NOTE_MODEL_FLAG = "serve takes the model with --force-model"
NOTE_CUDA_AVAILABLE = "torch sees a CUDA device"
NOTE_CUDA_ABSENT = "torch sees no CUDA device"
_NOTE_CONSOLE_SCRIPT = "serve is run through the console script "  # + path
NOTE_CUDA_GRAPHS_CPU = "CUDA graphs do not apply on CPU"
# Measured on 5.24 (docs/BENCHMARKS.md §6): 13.6 GB resident on a 24 GiB host, OOM-killed there.
NOTE_CB_HOST_MEMORY = (
    "continuous batching on a CPU sizes its KV cache from free host memory "
    "(0.9 of it unless server.cb_max_memory_percent is set), built on the "
    "first request"
)
# What ServeLab does instead when nothing sizes that cache: a laptop's default run must not
# take most of its memory (and the build of that cache most of a CPU run's time: a CLI run
# on this repository's CPU host went from 90 s to 15 s with a bounded cache).
CPU_CB_MEMORY_FRACTION = 0.1
NOTE_CB_CPU_BOUNDED = (
    "continuous batching on a CPU: ServeLab bounds the KV cache to "
    f"{CPU_CB_MEMORY_FRACTION:g} of free host memory (the engine's default "
    "0.9 built ~14 GB on a 24 GB host); set server.cb_max_memory_percent "
    "or --cb-num-blocks to choose"
)
_CB_SIZING_FLAGS = ("--cb-num-blocks", "--cb-max-memory-percent", "--cb-max-batch-tokens")
NOTE_IGNORE_EOS = (
    "transformers serve rejects ignore_eos (HTTP 422); exact output lengths need "
    'generation_config={"eos_token_id": -1} in the request'
)

_DETECT_TIMEOUT_S = 120.0
_FACTS_TIMEOUT_S = 5.0
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_FLAG = re.compile(r"(?<![\w-])--?[A-Za-z0-9][A-Za-z0-9_-]*")
_NEGATIVE_NUMBER = re.compile(r"-\d+(\.\d+)?")

# Flags ServeLab sets itself: extra_args may not repeat them (name the field to use instead).
_RESERVED_FLAGS: dict[str, str] = {
    "--host": "server.host",
    "--port": "server.port (ServeLab picks the port)",
    "--continuous-batching": "server.continuous_batching",
    "--no-continuous-batching": "server.continuous_batching",
    "--device": "server.device",
    "--dtype": "server.dtype",
    "--compile": "server.compile",
    "--no-compile": "server.compile",
    "--cb-max-memory-percent": "server.cb_max_memory_percent",
    "--cb-use-cuda-graph": "server.cuda_graphs",
    "--no-cb-use-cuda-graph": "server.cuda_graphs",
    "--force-model": "server.model",
    "--help": "nothing (it only prints help)",
    "-h": "nothing (it only prints help)",
}

# One cheap subprocess on every detect(): versions and serving dependencies (no import of
# transformers or torch, so well under a second), the key of the detection cache.
_VERSIONS_CODE = """
import importlib.metadata as m, importlib.util as u, json
def v(name):
    try:
        return m.version(name)
    except m.PackageNotFoundError:
        return None
print(json.dumps({"transformers": v("transformers"), "torch": v("torch"),
                  "serve_deps_missing": [n for n in ("fastapi", "uvicorn", "pydantic", "openai")
                                         if u.find_spec(n) is None]}))
"""
# Only when the cache has no answer: CUDA visibility needs torch imported (seconds).
_CUDA_CODE = """
import json
out = {}
try:
    import torch
    out["torch"] = torch.__version__
    out["cuda"] = bool(torch.cuda.is_available())
    out["cuda_devices"] = torch.cuda.device_count() if out["cuda"] else 0
except Exception as exc:
    out["torch"] = None
    out["cuda"] = None
    out["torch_error"] = repr(exc)[:300]
print(json.dumps(out))
"""


def exact_length_fields() -> dict[str, str]:
    """Request-body fields that make ``transformers serve`` generate exactly ``max_tokens``
    tokens (its stand-in for ``ignore_eos``, which it rejects with HTTP 422).

    The server builds the request's generation config from this JSON instead of the model's;
    with continuous batching only ``max_new_tokens`` (from ``max_tokens``) and
    ``eos_token_id`` are per request, and -1 is its own "no EOS" value.
    """
    return {"generation_config": json.dumps({"eos_token_id": -1})}


def parse_serve_help(help_text: str) -> tuple[frozenset[str], bool]:
    """Read ``serve --help``: every flag an option line declares (both halves of
    ``--x / --no-x``, short forms too) and whether the usage line has a positional argument."""
    options: set[str] = set()
    positional = False
    for raw in help_text.splitlines():
        line = _ANSI.sub("", raw).replace("\t", "    ")
        line = line.lstrip("│┃|").rstrip("│┃| ")  # rich-style boxes, if a version uses them
        stripped = line.lstrip()
        usage = re.match(r"\s*Usage:.*\bserve\b(.*)$", line)
        if usage:
            rest = usage.group(1).replace("[OPTIONS]", " ").replace("[ARGS]...", " ")
            positional = bool(re.search(r"[A-Za-z_]", rest))
            continue
        if not stripped.startswith("-") or len(line) - len(stripped) > 8:
            continue  # descriptions are indented deeper than option declarations
        declaration = re.split(r"\s{2,}", stripped, maxsplit=1)[0]
        options.update(_FLAG.findall(declaration))
    return frozenset(options), positional


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update({"HF_HUB_OFFLINE": "1", "COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"})
    return env


def _run(argv: list[str]) -> tuple[int | None, str]:
    """Run a short command; return (exit code or None if it could not run, output)."""
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=_DETECT_TIMEOUT_S,
            env=_child_env(),
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, str(exc)
    return done.returncode, done.stdout + done.stderr


def _tail(text: str, chars: int = 300) -> str:
    return " ".join(text.strip().split())[-chars:]


def _connect_host(host: str) -> str:
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


@dataclass(frozen=True)
class _Flags:
    """The installed ``serve`` options; ``need`` names the field a missing flag blocks."""

    options: frozenset[str]
    version: str  # "transformers 5.24.0", as the messages say it

    def need(self, flag: str, field: str) -> str:
        if flag not in self.options:
            raise EngineUnavailable(
                f"{field}: {self.version} `serve` has no {flag} option; "
                f"leave {field} at its default or use a transformers "
                "version that has it"
            )
        return flag


def _check_settings(config: ServerConfig, flags: _Flags) -> None:
    """Refuse, before any argv is built, what no version of ``serve`` can run."""
    for flag in ("--host", "--port"):
        flags.need(flag, "server.engine")
    if config.cuda_graph_max_bs is not None:
        raise ConfigError(
            "server.cuda_graph_max_bs",
            "transformers serve has no such setting (sglang only); leave it unset",
        )
    if config.cb_max_memory_percent is not None and not config.continuous_batching:
        raise ConfigError(
            "server.cb_max_memory_percent",
            "sizes the continuous-batching KV cache; set "
            "server.continuous_batching=true or leave it unset",
        )


def _model_args(model: str, info: EngineInfo, flags: _Flags) -> list[str]:
    if NOTE_MODEL_POSITIONAL in info.notes or (
        NOTE_MODEL_FLAG not in info.notes and "--force-model" not in flags.options
    ):
        return [model]
    return [flags.need("--force-model", "server.model"), model]


def _knob_args(config: ServerConfig, flags: _Flags) -> list[str]:
    """Batching, device, dtype, KV-cache size and compile, from flags this version lists."""
    opts, need = flags.options, flags.need
    argv: list[str] = []
    if config.continuous_batching:
        argv.append(need("--continuous-batching", "server.continuous_batching"))
    elif "--no-continuous-batching" in opts:
        argv.append("--no-continuous-batching")
    if "--device" in opts:
        argv += ["--device", config.device]
    elif config.device != "auto":
        need("--device", "server.device")
    if "--dtype" in opts:
        argv += ["--dtype", config.dtype]
    elif config.dtype != "auto":
        need("--dtype", "server.dtype")
    if config.cb_max_memory_percent is not None:
        argv += [
            need("--cb-max-memory-percent", "server.cb_max_memory_percent"),
            f"{config.cb_max_memory_percent:g}",
        ]
    if config.compile:
        argv.append(need("--compile", "server.compile"))
    elif "--no-compile" in opts:
        argv.append("--no-compile")
    return argv


def _on_cpu(config: ServerConfig, info: EngineInfo) -> bool:
    cuda_seen = (
        True
        if NOTE_CUDA_AVAILABLE in info.notes
        else False
        if NOTE_CUDA_ABSENT in info.notes
        else None
    )
    return config.device == "cpu" or (config.device == "auto" and cuda_seen is False)


def _cpu_args(config: ServerConfig, flags: _Flags, python: str) -> tuple[list[str], list[str]]:
    """Refuse CUDA graphs on CPU; bound the continuous-batching cache nothing else sizes."""
    if config.cuda_graphs is True:
        where = (
            "server.device is cpu"
            if config.device == "cpu"
            else f"torch for {python} sees no CUDA device"
        )
        raise ConfigError(
            "server.cuda_graphs",
            f"CUDA graphs need a CUDA device; this host has none ({where}). "
            "Leave server.cuda_graphs unset on CPU.",
        )
    argv: list[str] = []
    notes = [NOTE_CUDA_GRAPHS_CPU]
    sized = config.cb_max_memory_percent is not None or any(
        a.split("=", 1)[0] in _CB_SIZING_FLAGS for a in config.extra_args
    )
    if config.continuous_batching and not sized:
        if "--cb-max-memory-percent" in flags.options:
            argv += ["--cb-max-memory-percent", f"{CPU_CB_MEMORY_FRACTION:g}"]
            notes.append(NOTE_CB_CPU_BOUNDED)
        else:
            notes.append(NOTE_CB_HOST_MEMORY)
    return argv, notes


def _cuda_graph_args(config: ServerConfig, flags: _Flags) -> tuple[list[str], list[str]]:
    if config.cuda_graphs is None:
        return [], ["CUDA graphs: the engine's default"]
    if not config.continuous_batching:
        raise ConfigError(
            "server.cuda_graphs",
            "transformers serve uses CUDA graphs only with continuous "
            "batching; set server.continuous_batching=true or leave "
            "server.cuda_graphs unset",
        )
    flag = "--cb-use-cuda-graph" if config.cuda_graphs else "--no-cb-use-cuda-graph"
    return [flags.need(flag, "server.cuda_graphs")], []


class TransformersServeAdapter(EngineAdapter):
    """``transformers serve`` run by ``python`` (any Python with transformers installed)."""

    name = ENGINE.name

    def __init__(self, python: str, models_dir: Path, cache_dir: Path | None = None) -> None:
        self.python = python
        self.models_dir = models_dir
        self.cache_dir = cache_dir  # detection results per interpreter + versions (None: off)
        self._version: str | None = None  # from the last detect() or plan_launch()

    @classmethod
    def from_settings(cls, settings: Settings, install: str | None) -> TransformersServeAdapter:
        return cls(
            settings.engine_python(cls.name, install),
            settings.models_dir,
            settings.detect_cache_dir,
        )

    # -- detect ------------------------------------------------------------------------------

    def _launcher(self, info: EngineInfo) -> list[str]:
        for note in info.notes:
            if note.startswith(_NOTE_CONSOLE_SCRIPT):
                return [note.removeprefix(_NOTE_CONSOLE_SCRIPT)]
        return [self.python, "-m", CLI_MODULE]

    def detect(self) -> EngineInfo:
        """What is installed: one quick subprocess for the versions, then the option list and
        CUDA visibility from the cache (``core.engines.detect_cache``), or, the first time
        for this interpreter and these versions, from ``serve --help`` and torch."""
        rc, out = _run([self.python, "-c", _VERSIONS_CODE])
        if rc is None:
            return EngineInfo(self.name, False, reason=f"cannot run {self.python}: {_tail(out)}")
        try:
            versions = json.loads(out.strip().splitlines()[-1]) if rc == 0 else {}
        except (ValueError, IndexError):
            versions = {}
        version = versions.get("transformers") if isinstance(versions, dict) else None
        if not isinstance(version, str):
            return EngineInfo(
                self.name,
                False,
                reason=f"transformers is not installed for {self.python} "
                "(pip install 'transformers[serving]')",
            )
        self._version = version
        script = Path(self.python).parent / "transformers"
        key = {
            "python": detect_cache.interpreter(self.python),
            "transformers": version,
            "torch": versions.get("torch"),
            "console_script": script.is_file(),
            # what torch reports about CUDA depends on which devices it may see
            "cuda_visible_devices": cuda_visible_devices(),
        }
        cached = detect_cache.load(self.cache_dir, self.name, key)
        if cached is not None:
            options = frozenset(cached.get("options") or ())
            notes = tuple(cached.get("notes") or ())
        else:
            found = self._read_cli(version, script)
            if isinstance(found, EngineInfo):
                return found
            options, notes = found
            detect_cache.store(
                self.cache_dir, self.name, key, {"options": sorted(options), "notes": list(notes)}
            )
        missing = versions.get("serve_deps_missing") or []
        if missing:
            return EngineInfo(
                self.name,
                False,
                version=version,
                options=options,
                notes=notes,
                reason=f"`transformers serve` needs {', '.join(missing)}: "
                "pip install 'transformers[serving]'",
            )
        return EngineInfo(self.name, True, version=version, options=options, notes=notes)

    def _read_cli(
        self, version: str, script: Path
    ) -> tuple[frozenset[str], tuple[str, ...]] | EngineInfo:
        """(options, notes) from ``serve --help`` and torch; an uninstalled EngineInfo
        saying why when there is no working ``serve``."""
        launchers = [[self.python, "-m", CLI_MODULE]]
        if script.is_file():
            launchers.append([str(script)])
        options: frozenset[str] = frozenset()
        positional = False
        notes: list[str] = []
        help_out = ""
        for launcher in launchers:
            rc, help_out = _run([*launcher, "serve", "--help"])
            if rc == 0:
                options, positional = parse_serve_help(help_out)
            if "--port" in options:
                if launcher[0] != self.python:
                    notes.append(_NOTE_CONSOLE_SCRIPT + launcher[0])
                break
        else:
            return EngineInfo(
                self.name,
                False,
                version=version,
                reason=f"transformers {version} has no working `serve` command: {_tail(help_out)}",
            )
        if positional:
            notes.append(NOTE_MODEL_POSITIONAL)
        elif "--force-model" in options:
            notes.append(NOTE_MODEL_FLAG)

        rc, probe_out = _run([self.python, "-c", _CUDA_CODE])
        probe: dict[str, Any] = {}
        if rc == 0:
            try:
                probe = json.loads(probe_out.strip().splitlines()[-1])
            except (ValueError, IndexError):
                probe = {}
        if probe.get("cuda") is True:
            notes.append(NOTE_CUDA_AVAILABLE)
            notes.append(f"torch {probe.get('torch')}: {probe.get('cuda_devices')} CUDA device(s)")
        elif probe.get("cuda") is False:
            notes.append(NOTE_CUDA_ABSENT)
            notes.append(f"torch {probe.get('torch')}: no CUDA device")
        return options, tuple(notes)

    # -- plan_launch -------------------------------------------------------------------------

    def plan_launch(self, config: ServerConfig, port: int, info: EngineInfo) -> LaunchPlan:
        if not info.installed:
            raise EngineUnavailable(
                f"transformers serve is not available with {self.python}: {info.reason}"
            )
        self._version = info.version or self._version
        flags = _Flags(info.options, f"transformers {info.version or '(unknown version)'}")
        _check_settings(config, flags)
        model = resolve_model(config.model, self.models_dir)
        argv = [*self._launcher(info), "serve", *_model_args(model, info, flags)]
        argv += ["--host", config.host, "--port", str(port)]
        argv += _knob_args(config, flags)
        if _on_cpu(config, info):
            graph_argv, notes = _cpu_args(config, flags, self.python)
        else:
            graph_argv, notes = _cuda_graph_args(config, flags)
        argv += graph_argv
        argv += self._checked_extra_args(config.extra_args, flags.options, flags.version)
        return LaunchPlan(
            argv=argv,
            base_url=f"http://{_connect_host(config.host)}:{port}",
            health_path="/health",
            env={"HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"},
            model_name=model,
            tokenizer_path=config.tokenizer or model,
            supports_ignore_eos=False,
            exact_length_body=exact_length_fields(),
            supports_flush_cache=False,
            notes=(*notes, NOTE_IGNORE_EOS),
        )

    @staticmethod
    def _checked_extra_args(
        extra: tuple[str, ...], opts: frozenset[str], version: str
    ) -> list[str]:
        for item in extra:
            if not item.startswith("-") or _NEGATIVE_NUMBER.fullmatch(item):
                continue  # a value
            flag = item.split("=", 1)[0]
            if flag in _RESERVED_FLAGS:
                raise ConfigError(
                    "server.extra_args",
                    f"{flag} is set by ServeLab; use {_RESERVED_FLAGS[flag]} instead",
                )
            if flag not in opts:
                near = difflib.get_close_matches(flag, sorted(opts), n=2, cutoff=0.75)
                hint = f"did you mean {' or '.join(near)}? " if near else ""
                raise ConfigError(
                    "server.extra_args",
                    f"{flag} is not an option of {version} `serve`: {hint}"
                    "remove it, or pick one that `transformers serve --help` "
                    "lists",
                )
        return list(extra)

    # -- collect_facts -----------------------------------------------------------------------

    def collect_facts(self, base_url: str, log_text: str) -> dict[str, Any]:
        facts: dict[str, Any] = {
            "engine": self.name,
            "engine_version": self._version,
            "served_models": None,
            "has_metrics_endpoint": None,
            "server_pid": None,
            "weights_dtype": None,
            "continuous_batching": None,
            "cuda_graphs": None,
            "kv_cache_memory_mb": None,
            "kv_cache_sectors": None,
            "max_batch_tokens": None,
        }
        from core.load.openai import served_models

        base = base_url.rstrip("/")
        try:
            with httpx.Client(timeout=_FACTS_TIMEOUT_S) as client:
                facts["served_models"], _answer = served_models(client, base)
                metrics = client.get(f"{base}/metrics")
                facts["has_metrics_endpoint"] = metrics.status_code == 200
        except (httpx.HTTPError, ValueError, AttributeError):
            pass

        text = _ANSI.sub("", log_text)
        if m := re.search(r"Started server process \[(\d+)\]", text):
            facts["server_pid"] = int(m.group(1))
        if m := re.search(r"Will use dtype=torch\.(\w+)", text):
            facts["weights_dtype"] = m.group(1)
        if cb_flags := re.findall(r"\[Request received\] Model: .*?, CB: (True|False)", text):
            facts["continuous_batching"] = cb_flags[-1] == "True"
        # Continuous-batching internals log at INFO on a logger of their own, so these appear
        # only if that logger was turned up; they stay None otherwise.
        graphs = r"Using cuda graphs for \(varlen, decode\) paths: \((\w+), (\w+)\)"
        if m := re.search(graphs, text):
            facts["cuda_graphs"] = {"varlen": m.group(1) == "True", "decode": m.group(2) == "True"}
        if m := re.search(r"Memory available for cache allocation: (\d+) MB", text):
            facts["kv_cache_memory_mb"] = int(m.group(1))
        if m := re.search(r"max_batch_tokens = (\d+), self\.num_sectors = (\d+)", text):
            facts["max_batch_tokens"] = int(m.group(1))
            facts["kv_cache_sectors"] = int(m.group(2))
        return facts
