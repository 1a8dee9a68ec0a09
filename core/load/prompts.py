"""Seeded random prompts with exact token lengths in the served model's tokenizer.

Like ``bench_serving --dataset-name random-ids`` the prompt is made of token ids and
decoded to text, but ServeLab only draws ids that decode to a plain " word" and
re-encodes the text to check the length is exact (random ids often merge or split
when the text is re-encoded, which silently changes the input length).
The same (tokenizer, seed, point) always gives the same prompts, so every arm of a
comparison sees identical input.
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from core.errors import ConfigError

__all__ = [
    "Prompt",
    "Tokenizer",
    "load_tokenizer",
    "make_prompts",
    "prompt_of_length",
    "prompts_digest",
    "word_ids",
]

_WORD = re.compile(r"^ [a-z]{3,10}$")


class Tokenizer(Protocol):
    def encode(self, text: str) -> list[int]: ...
    def decode(self, ids: list[int]) -> str: ...
    def vocab_size(self) -> int: ...
    def __hash__(self) -> int: ...


@dataclass(frozen=True)
class Prompt:
    text: str
    prompt_tokens: int
    output_len: int
    # The messages before this one ((role, content)): a multi-turn session's turns so far,
    # set when the turn is sent (core/load/generator.py); () for a single-turn request.
    history: tuple[tuple[str, str], ...] = ()


class _HFTokenizers:
    """A ``tokenizers`` tokenizer.json: loads in milliseconds, unlike AutoTokenizer."""

    def __init__(self, path: Path) -> None:
        from tokenizers import Tokenizer as RawTokenizer

        self._tok = RawTokenizer.from_file(str(path))

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: list[int]) -> str:
        return str(self._tok.decode(ids, skip_special_tokens=True))

    def vocab_size(self) -> int:
        return int(self._tok.get_vocab_size())


class _AutoTokenizer:
    def __init__(self, name: str) -> None:
        from transformers import AutoTokenizer

        self._tok: Any = AutoTokenizer.from_pretrained(name)

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False))

    def decode(self, ids: list[int]) -> str:
        return str(self._tok.decode(ids, skip_special_tokens=True))

    def vocab_size(self) -> int:
        return len(self._tok)


def load_tokenizer(path_or_name: str) -> Tokenizer:
    """The served model's tokenizer, from a local folder (tokenizer.json preferred)."""
    path = Path(path_or_name)
    if (path / "tokenizer.json").is_file():
        return _HFTokenizers(path / "tokenizer.json")
    if path.is_file() and path.suffix == ".json":
        return _HFTokenizers(path)
    try:
        return _AutoTokenizer(path_or_name)
    except Exception as exc:  # transformers raises many types for a missing tokenizer
        raise ConfigError(
            "server.tokenizer",
            f"cannot load a tokenizer from {path_or_name!r} ({type(exc).__name__}); "
            "give a local folder that holds tokenizer.json",
        ) from exc


@functools.lru_cache(maxsize=4)  # the vocabulary scan takes ~1 s; tokenizers are reused
def _word_ids(tok: Tokenizer) -> list[int]:
    ids = []
    for i in range(tok.vocab_size()):
        text = tok.decode([i])
        if _WORD.match(text) and tok.encode(text) == [i]:
            ids.append(i)
    if len(ids) < 50:
        raise ConfigError(
            "server.tokenizer",
            "the tokenizer has too few plain word tokens to build prompts of exact length",
        )
    return ids


def word_ids(tok: Tokenizer) -> list[int]:
    """The ids that decode to one plain " word" and re-encode to themselves: any sequence of
    them decodes to a text of exactly that many tokens (core/load/workloads.py builds on it)."""
    return _word_ids(tok)


def prompt_of_length(tok: Tokenizer, rng: random.Random, input_len: int, output_len: int) -> Prompt:
    """One seeded prompt of exactly ``input_len`` tokens (without the chat template)."""
    pool = _word_ids(tok)
    for _attempt in range(20):
        ids = [rng.choice(pool) for _ in range(input_len)]
        text = tok.decode(ids)
        if len(tok.encode(text)) == input_len:
            return Prompt(text=text, prompt_tokens=input_len, output_len=output_len)
    raise ConfigError(
        "plan.points.input_len", f"could not build a prompt of exactly {input_len} tokens"
    )


def make_prompts(
    tok: Tokenizer, n: int, input_len: int, output_len: int, seed: int
) -> list[Prompt]:
    """``n`` prompts of exactly ``input_len`` tokens (without the chat template)."""
    rng = random.Random(seed)
    return [prompt_of_length(tok, rng, input_len, output_len) for _ in range(n)]


def prompts_digest(prompts: list[Prompt]) -> str:
    """A short fingerprint to prove two runs sent the same prompts."""
    blob = json.dumps([[p.text, p.output_len] for p in prompts]).encode()
    return hashlib.sha256(blob).hexdigest()[:16]
