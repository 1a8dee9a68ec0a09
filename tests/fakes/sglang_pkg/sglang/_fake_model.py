"""The FAKE server's toy language model, for ``/generate`` asked with ``return_logprob``
(stdlib only): deterministic logits over a 64-token vocabulary (ids 1000-1063) from the
last four token ids, so greedy decoding, top-k alternatives and teacher forcing
(``logprob_start_len``: the input's own logprobs) behave like a real model's, and two
servers of one configuration answer identically.

``FAKE_SGLANG_ANSWERS`` (comma-separated) changes what it says, for the answers check:

``nan``               every logprob is NaN (the tokens are the greedy ones)
``garbage``           every token is the least likely one (far outside any top-k)
``diverge_in_topk``   in the first greedy decode asked with logprobs, the third token is
                      the second most likely (one divergence, inside the top-k);
                      teacher-forced scores unchanged
``drift=X``           every logit moved by X times a seeded normal draw (numerics changed)

``--kv-cache-dtype fp8_e5m2`` / ``fp8_e4m3`` adds ``drift=0.05`` (as an fp8 KV cache
moves a real model's logprobs).
"""

from __future__ import annotations

import math
import random
import zlib
from collections.abc import Sequence

VOCAB_START = 1000
VOCAB = 64


def parse_answers_mode(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, _, value = part.partition("=")
        out[name] = float(value) if value else 1.0
    return out


class FakeModel:
    def __init__(self, mode: dict[str, float], words: Sequence[str]) -> None:
        self.mode = mode
        self.words = list(words)
        self.decodes = 0  # greedy decodes asked so far

    def text(self, token_id: int) -> str:
        k = token_id - VOCAB_START
        return self.words[k] if 0 <= k < len(self.words) else f" w{token_id}"

    def ids_of_text(self, text: str) -> list[int]:
        return [VOCAB_START + zlib.crc32(w.encode()) % VOCAB for w in text.split()] or [VOCAB_START]

    def logprobs(self, context: Sequence[int]) -> list[float]:
        key = zlib.crc32(",".join(map(str, context[-4:])).encode())
        rng = random.Random(key)
        logits = [rng.gauss(0.0, 2.0) for _ in range(VOCAB)]
        drift = self.mode.get("drift", 0.0)
        if drift:
            noise = random.Random(key ^ 0x5BD1E995)
            logits = [x + drift * noise.gauss(0.0, 1.0) for x in logits]
        top = max(logits)
        log_z = top + math.log(sum(math.exp(x - top) for x in logits))
        return [x - log_z for x in logits]

    def _shown(self, value: float) -> float:
        return math.nan if "nan" in self.mode else value

    def _top(self, lps: list[float], k: int) -> list[list[object]]:
        order = sorted(range(VOCAB), key=lambda i: -lps[i])[:k]
        return [[self._shown(lps[i]), VOCAB_START + i, self.text(VOCAB_START + i)] for i in order]

    def _pick(self, lps: list[float], first: bool, step: int) -> int:
        order = sorted(range(VOCAB), key=lambda i: -lps[i])
        if "garbage" in self.mode:
            return order[-1]
        diverge = "diverge_in_topk" in self.mode and first
        return order[1] if diverge and step == 2 else order[0]

    def generate(
        self, prompt: Sequence[int], n: int, k: int
    ) -> tuple[list[list[object]], list[list[list[object]]]]:
        """(chosen [logprob, id, text] per step, top-k per step) of a greedy decode."""
        first = self.decodes == 0
        self.decodes += 1
        context = list(prompt)
        chosen: list[list[object]] = []
        tops: list[list[list[object]]] = []
        for step in range(n):
            lps = self.logprobs(context)
            i = self._pick(lps, first, step)
            chosen.append([self._shown(lps[i]), VOCAB_START + i, self.text(VOCAB_START + i)])
            tops.append(self._top(lps, k))
            context.append(VOCAB_START + i)
        return chosen, tops

    def score(
        self, ids: Sequence[int], start: int, k: int
    ) -> tuple[list[list[object]], list[list[list[object]] | None]]:
        """The input's own logprobs from ``start``, in SGLang's shape: the entry at ``start``
        is always null, whatever ``start`` is (its scheduler sets ``[None] +
        input_token_logprobs[:-1]`` against ``origin_input_ids[logprob_start_len:]``; measured
        on the device: "47 input token logprobs, 48 asked for" when asked from the prompt's
        end)."""
        chosen: list[list[object]] = []
        tops: list[list[list[object]] | None] = []
        first = max(start, 0)
        for pos in range(first, len(ids)):
            token = ids[pos]
            if pos == first:
                chosen.append([None, token, self.text(token)])
                tops.append(None)
                continue
            lps = self.logprobs(ids[:pos])
            k_id = token - VOCAB_START
            value = lps[k_id] if 0 <= k_id < VOCAB else -30.0
            chosen.append([self._shown(value), token, self.text(token)])
            tops.append(self._top(lps, k))
        return chosen, tops
