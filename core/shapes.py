"""Model shapes as data: the config.json of real models, run with dummy weights.

``data/shapes/<name>/config.json`` holds a real model's shape (layers, widths, experts, vocab,
context), taken from a package that ships them under a licence that allows it
(data/shapes/README.md). A run with ``server.shape`` set loads no weight files: the run
materialises a model folder from the shape (config.json plus a tokenizer's files) and the
engine fills the weights with random values (SGLang ``--load-format dummy``). Its speed is a
real model's speed; its answers mean nothing, and every view says so (``DUMMY_WEIGHTS``).
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import ConfigError
from core.settings import REPO_ROOT

__all__ = [
    "DUMMY_WEIGHTS",
    "SHAPES_DIR",
    "SHAPE_NAME",
    "TOKENIZER_FILES",
    "Shape",
    "fill_vocabulary",
    "load_shape",
    "materialise",
    "model_label",
    "runs_routing",
    "shape_names",
    "shape_note",
    "shapes_line",
    "spec_shapes",
]

SHAPES_DIR = REPO_ROOT / "data" / "shapes"
# What every view prints beside a run, arm or experiment measured on a shape.
DUMMY_WEIGHTS = "dummy weights: speed only, answers meaningless"
# A shape's name: its folder under data/shapes.
SHAPE_NAME = re.compile(r"[a-z0-9][a-z0-9._\-]{0,63}")
# The files a tokenizer folder may hold; the model folder gets each one that exists.
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
)


@dataclass(frozen=True)
class Shape:
    """One shipped shape: its name, the model it is the shape of and the facts a reader
    needs (MoE or dense, layers, experts, context)."""

    name: str
    config: dict[str, Any]

    @property
    def architecture(self) -> str:
        archs = self.config.get("architectures") or ["?"]
        return str(archs[0])

    @property
    def experts(self) -> int:
        """Routed experts per MoE layer (0: a dense model)."""
        for key in ("num_experts", "n_routed_experts", "num_local_experts"):
            value = self.config.get(key)
            if isinstance(value, int) and value > 0:
                return value
        return 0

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def layers(self) -> int:
        return int(self.config.get("num_hidden_layers") or 0)

    @property
    def vocab_size(self) -> int:
        return int(self.config.get("vocab_size") or 0)

    @property
    def context_tokens(self) -> int | None:
        value = self.config.get("max_position_embeddings")
        return value if isinstance(value, int) else None

    @property
    def summary(self) -> str:
        """``Qwen3MoeForCausalLM, 48 layers, 128 experts (8 per token)``."""
        parts = [self.architecture, f"{self.layers} layers"]
        if self.is_moe:
            per_token = self.config.get("num_experts_per_tok")
            parts.append(f"{self.experts} experts ({per_token} per token)")
        return ", ".join(parts)


def shape_names(shapes_dir: Path = SHAPES_DIR) -> list[str]:
    """Every shipped shape, by name."""
    if not shapes_dir.is_dir():
        return []
    return sorted(
        p.name
        for p in shapes_dir.iterdir()
        if (p / "config.json").is_file() and SHAPE_NAME.fullmatch(p.name)
    )


def load_shape(name: str, shapes_dir: Path = SHAPES_DIR) -> Shape:
    """The shape ``name``; ConfigError on ``server.shape`` naming those there are."""
    path = shapes_dir / name / "config.json"
    if not SHAPE_NAME.fullmatch(name) or not path.is_file():
        known = ", ".join(shape_names(shapes_dir)) or "none"
        raise ConfigError("server.shape", f"no shape {name[:64]!r}; use one of: {known}")
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError("server.shape", f"shape {name!r} cannot be read: {exc}") from exc
    if not isinstance(config, dict):
        raise ConfigError("server.shape", f"shape {name!r}: config.json is not an object")
    return Shape(name, config)


def materialise(shape: Shape, dest: Path, tokenizer_dir: Path) -> Path:
    """``dest`` as a model folder an engine loads with dummy weights: the shape's
    config.json and the tokenizer files of ``tokenizer_dir`` (tokenizer.json filled up to
    the shape's vocabulary, ``fill_vocabulary``); no weight file. Written whole each time
    (a folder left by an older shape file is brought up to date)."""
    found = [tokenizer_dir / f for f in TOKENIZER_FILES if (tokenizer_dir / f).is_file()]
    if not found:
        raise ConfigError(
            "server.tokenizer",
            f"{tokenizer_dir} has no tokenizer files ({', '.join(TOKENIZER_FILES[:2])}); "
            "give a tokenizer folder",
        )
    dest.mkdir(parents=True, exist_ok=True)
    for path in found:
        if path.name == "tokenizer.json":
            _write_tokenizer(path, dest / path.name, shape.vocab_size)
        else:
            shutil.copyfile(path, dest / path.name)
    tmp = dest / "config.json.tmp"
    tmp.write_text(json.dumps(shape.config, indent=2))
    tmp.replace(dest / "config.json")
    return dest


def _write_tokenizer(source: Path, dest: Path, vocab_size: int) -> None:
    """``source``'s tokenizer.json at ``dest``, its vocabulary filled up to the shape's."""
    try:
        data = json.loads(source.read_text())
        filled = fill_vocabulary(data, vocab_size) if isinstance(data, dict) else None
    except (OSError, ValueError) as exc:
        raise ConfigError("server.tokenizer", f"{source} cannot be read: {exc}") from exc
    if filled is None:
        shutil.copyfile(source, dest)
        return
    tmp = dest.with_name(dest.name + ".tmp")
    tmp.write_text(json.dumps(filled, ensure_ascii=False))
    tmp.replace(dest)


def fill_vocabulary(tokenizer: dict[str, Any], vocab_size: int) -> dict[str, Any] | None:
    """A byte-level BPE tokenizer.json whose ids run up to ``vocab_size`` (None: nothing to
    fill, or a kind this cannot fill).

    Why: a dummy-weight model draws its output ids from the shape's whole vocabulary
    (Qwen3's 151,936), nearly all beyond a small tokenizer's (SmolLM2's 49,152); the server
    streams such an id as no text, so TTFT and ITL would time only the rare visible tokens.
    Each missing id becomes a token " id<N>" that no merge can produce: encoding (the
    prompts, their lengths) is unchanged, and every generated id decodes to visible text."""
    model = tokenizer.get("model") or {}
    vocab = model.get("vocab")
    decoder = tokenizer.get("decoder") or {}
    if model.get("type") != "BPE" or decoder.get("type") != "ByteLevel" or not vocab:
        return None
    ids = list(vocab.values()) + [t.get("id", -1) for t in tokenizer.get("added_tokens") or []]
    first = max(ids) + 1
    if first >= vocab_size:
        return None
    # "\u0120" is the byte-level alphabet's space: the token reads " id49152".
    extra = {f"\u0120id{i}": i for i in range(first, vocab_size)}
    if extra.keys() & vocab.keys():
        return None  # a vocabulary that already spells these: leave it as it is
    return {**tokenizer, "model": {**model, "vocab": {**vocab, **extra}}}


def shape_note(shape: str | None) -> str:
    """The words beside a run measured on ``shape`` ("" when it ran real weights)."""
    return f"{shape} shape, {DUMMY_WEIGHTS}" if shape else ""


def model_label(server: Mapping[str, Any]) -> str | None:
    """What a stored run's model is called in lists (the catalog's model column): the
    shape's name and "(dummy weights)" for a shape run, else ``server.model``."""
    shape = server.get("shape")
    return f"{shape} (dummy weights)" if shape else server.get("model")


def spec_shapes(specs: Iterable[Mapping[str, Any]]) -> list[str]:
    """The shapes named by run specs or an experiment's spec (``spec.json`` /
    ``experiment.json`` dicts: ``server.shape``, an arm's or a grid's ``server.shape``), each
    once, in order."""
    found: list[str] = []
    for spec in specs:
        server = spec.get("server") or (spec.get("base") or {}).get("server") or {}
        names = [server.get("shape")]
        names += [(a.get("changes") or {}).get("server.shape") for a in spec.get("arms") or []]
        names += list(((spec.get("grid") or {}).get("knobs") or {}).get("server.shape") or [])
        found += [n for n in names if isinstance(n, str) and n not in found]
    return found


def shapes_line(specs: Iterable[Mapping[str, Any]], uniform_routing: bool | None = None) -> str:
    """The one line every view prints above runs measured on shapes: "Model shape
    qwen3-30b-a3b: dummy weights: speed only, answers meaningless; MoE routing simulated
    uniformly." ("" when none ran on one). ``uniform_routing``: what the runs' launch.json
    recorded (None: not read here); said only where a named shape is MoE (a dense shape's
    launch.json records False: no routing to simulate)."""
    names = spec_shapes(specs)
    if not names:
        return ""
    if not any(_is_moe(n) for n in names):
        uniform_routing = None
    routing = {
        True: "; MoE routing simulated uniformly",
        False: "; MoE routing: the dummy gate's own (uneven)",
        None: "",
    }[uniform_routing]
    plural = "s" if len(names) > 1 else ""
    return f"Model shape{plural} {', '.join(names)}: {DUMMY_WEIGHTS}{routing}."


def runs_routing(launches: Iterable[Mapping[str, Any]]) -> bool | None:
    """How the runs' MoE routing ran, from their launch.json (``uniform_experts``): True or
    False when every run that recorded it agrees, None when none did or they differ (then
    ``shapes_line`` claims neither)."""
    seen = {
        v for v in (launch.get("uniform_experts") for launch in launches) if isinstance(v, bool)
    }
    return seen.pop() if len(seen) == 1 else None


def _is_moe(name: str) -> bool:
    try:
        return load_shape(name).is_moe
    except ConfigError:
        return False  # a shape no longer shipped: no routing words, the name still shown
