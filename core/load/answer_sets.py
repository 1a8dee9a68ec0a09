"""The prompt sets of the answers check (core/run/answers_step.py): fixed and versioned, so two
runs months apart asked the same things. A set's version is stored with every run's
answers; a changed set gets a new version, never an edit in place.

Two kinds: known-answer questions for real weights (each with its one-word or numeric
answer, so a run also counts how many it got right), and token-id prompts for random-weight
models, whose text means nothing but whose numerics can still be compared arm to arm."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

__all__ = [
    "QUESTIONS",
    "TOKEN_IDS",
    "AnswerPrompt",
    "AnswerSet",
    "answer_set",
    "is_correct",
    "normalise_answer",
]


@dataclass(frozen=True)
class AnswerPrompt:
    """One prompt: text (a question) or token ids; ``expect`` the normalised right answer
    (None for token-id prompts: nothing is right or wrong there)."""

    text: str | None
    token_ids: tuple[int, ...] = ()
    expect: str | None = None


@dataclass(frozen=True)
class AnswerSet:
    name: str  # "questions" or "token_ids"
    version: str  # e.g. "questions-v1": stored with the run's answers
    prompts: tuple[AnswerPrompt, ...]
    max_tokens: int  # greedy tokens decoded per prompt

    @property
    def is_text(self) -> bool:
        return self.name == "questions"


# A question, then its short answer as normalise_answer leaves it.
_QUESTIONS_V1 = (
    ("What is the capital of France?", "paris"),
    ("What is the capital of Japan?", "tokyo"),
    ("What is the capital of Italy?", "rome"),
    ("What is the capital of Germany?", "berlin"),
    ("What is the capital of Spain?", "madrid"),
    ("What is the capital of England?", "london"),
    ("What is the capital of Russia?", "moscow"),
    ("What is the capital of Egypt?", "cairo"),
    ("What is 2 + 2?", "4"),
    ("What is 3 + 5?", "8"),
    ("What is 10 - 3?", "7"),
    ("What is 6 times 7?", "42"),
    ("What is 9 + 1?", "10"),
    ("How many days are in a week?", "7"),
    ("How many legs does a spider have?", "8"),
    ("How many months are in a year?", "12"),
    ("How many hours are in a day?", "24"),
    ("How many sides does a triangle have?", "3"),
    ("What color is the sky on a clear day?", "blue"),
    ("What color is grass?", "green"),
    ("What color is snow?", "white"),
    ("What is frozen water called?", "ice"),
    ("What planet do we live on?", "earth"),
    ("What is the largest planet in the solar system?", "jupiter"),
    ("What star is at the center of our solar system?", "sun"),
    ("What animal is known as man's best friend?", "dog"),
    ("What gas do plants absorb from the air?", "carbon dioxide"),
    ("What is the opposite of hot?", "cold"),
    ("What is the opposite of up?", "down"),
    ("Which language is spoken in Brazil?", "portuguese"),
    ("What is the chemical symbol for gold?", "au"),
    ("Who wrote Romeo and Juliet?", "shakespeare"),
)
_ONE_WORD = " Answer with one word or number only."
QUESTIONS = AnswerSet(
    "questions",
    "questions-v1",
    tuple(AnswerPrompt(q + _ONE_WORD, expect=a) for q, a in _QUESTIONS_V1),
    max_tokens=12,
)


def _token_id_prompts(count: int, length: int, seed: int) -> tuple[AnswerPrompt, ...]:
    """Seeded ids in [1000, 10000): inside every real tokenizer's vocabulary, clear of the
    special tokens most put first."""
    rng = random.Random(seed)
    return tuple(
        AnswerPrompt(None, tuple(rng.randrange(1000, 10000) for _ in range(length)))
        for _ in range(count)
    )


# 16 prompts of 16 ids, 48 greedy tokens each (the H200 check of issue 36 used 8 x 48).
TOKEN_IDS = AnswerSet("token_ids", "token-ids-v1", _token_id_prompts(16, 16, 36), max_tokens=48)
_SETS = {s.name: s for s in (QUESTIONS, TOKEN_IDS)}


def answer_set(name: str) -> AnswerSet:
    """The current set of kind ``name`` ("questions" or "token_ids")."""
    return _SETS[name]


_LEAD = re.compile(r"^(?:the answer is|answer:|it is|it's|the|a|an)\s+")


def normalise_answer(text: str) -> str:
    """A short answer as compared: its first line, lower case, without punctuation around
    words, a leading "The answer is" / "the" / "a", or surrounding space."""
    line = next((ln for ln in text.strip().splitlines() if ln.strip()), "")
    line = re.sub(r"[^\w\s+-]", " ", line.lower())
    line = re.sub(r"\s+", " ", line).strip()
    return _LEAD.sub("", line).strip()


def is_correct(answer: str, expect: str) -> bool:
    """Exact match of the normalised short answer; a sentence counts when it starts or ends
    with the answer ("Paris", "Paris is the capital", "The capital of France is Paris.")."""
    said = normalise_answer(answer)
    return said == expect or said.startswith(expect + " ") or said.endswith(" " + expect)
