"""The error rates behind "same answers" (core/analysis/same_answers.py), by seeded
simulation through the public functions (compare_pair, thresholds_from, judge_arm):
docs/METRICS.md "Same answers".

Each simulated run is an answers.json of 16 token-id prompts x 48 greedy tokens. Per-token
teacher-forced differences are drawn to match issue 36's H200 figures: an A/A (two servers of
one configuration) with |Δ logprob| median about 0.0001 and max about 0.016 (a Laplace core
plus a 2 % heavy tail), and an fp8 KV cache with median about 0.016 and greedy divergence in
5 of 8 prompts. Reported per scenario and threshold source (the defaults, or one A/A
pair's): the share of arms read same / differs / broken.

    python -m bench.answers_sim [--sims 1000 --seed 36]
"""

from __future__ import annotations

import argparse
import json
import random
from typing import Any

from core.analysis.same_answers import compare_pair, judge_arm, thresholds_from

PROMPTS, TOKENS, TOP_K = 16, 48, 5


def _reference(rng: random.Random) -> dict[str, Any]:
    rows, forced = [], []
    for i in range(PROMPTS):
        ids = [rng.randrange(1000, 2000) for _ in range(TOKENS)]
        lps = [-rng.expovariate(1.0) for _ in range(TOKENS)]
        top = [
            [[t, lp]] + [[t + k, lp - k] for k in range(1, TOP_K)]
            for t, lp in zip(ids, lps, strict=True)
        ]
        text = " ".join(map(str, ids))
        rows.append({"index": i, "tokens": [str(t) for t in ids], "token_ids": ids,
                     "logprobs": lps, "top": top, "text": text, "error": None})  # fmt: skip
        forced.append({"index": i, "logprobs": list(lps), "error": None})
    return {"set": "sim", "prompts": rows, "forced": forced,
            "reference": {"run_id": None, "self": True}}  # fmt: skip


def _delta(rng: random.Random, median: float, tail: float) -> float:
    """A signed per-token difference: Laplace with this median |Δ|, 2 % from a wider one."""
    scale = (tail if rng.random() < 0.02 else median) / 0.6931
    return rng.choice((-1, 1)) * rng.expovariate(1.0 / scale)


def _run(
    rng: random.Random, ref: dict[str, Any], median: float, tail: float, diverge: float
) -> dict[str, Any]:
    """Another run that scored the reference's tokens: its logprobs moved by the noise, its
    greedy tokens diverging in a share ``diverge`` of the prompts (to the second choice)."""
    rows, forced = [], []
    for row, f in zip(ref["prompts"], ref["forced"], strict=True):
        ids = list(row["token_ids"])
        if rng.random() < diverge:
            at = rng.randrange(5, TOKENS)
            ids[at:] = [ids[at] + 1] + [rng.randrange(1000, 2000) for _ in range(TOKENS - at - 1)]
        lps = [v + _delta(rng, median, tail) for v in row["logprobs"]]
        rows.append({**row, "token_ids": ids, "tokens": [str(t) for t in ids], "logprobs": lps,
                     "text": " ".join(map(str, ids))})  # fmt: skip
        forced.append({"index": f["index"], "logprobs": [v + _delta(rng, median, tail)
                       for v in f["logprobs"]], "error": None})  # fmt: skip
    return {"set": "sim", "prompts": rows, "forced": forced,
            "reference": {"run_id": "ref", "self": False}}  # fmt: skip


AA = (0.0001, 0.004, 0.0)  # median, tail median, share of prompts diverging
SCENARIOS = {
    "A/A": AA,
    "10x the A/A (median 0.001)": (0.001, 0.01, 0.0),
    "fp8 KV-like (median 0.016, 5/8 diverge)": (0.016, 0.06, 5 / 8),
    "fp8 KV-like, no divergence": (0.016, 0.06, 0.0),
}


def simulate(sims: int, seed: int) -> dict[str, dict[str, dict[str, float]]]:
    """Per scenario and threshold source: the share of simulated arms read same / differs /
    broken."""
    rng = random.Random(seed)
    counts: dict[tuple[str, str, str], int] = {}
    for _ in range(sims):
        ref = _reference(rng)
        aa = compare_pair(ref, "ref", _run(rng, ref, *AA), "aa", ref, "ref")
        for how, thr in (("defaults", thresholds_from([])), ("A/A", thresholds_from([aa]))):
            for name, params in SCENARIOS.items():
                pair = compare_pair(ref, "ref", _run(rng, ref, *params), "arm", ref, "ref")
                outcome = judge_arm("arm", "ref", [pair], thr, ref).outcome
                counts[(name, how, outcome)] = counts.get((name, how, outcome), 0) + 1
    out: dict[str, dict[str, dict[str, float]]] = {}
    for (name, how, outcome), count in sorted(counts.items()):
        out.setdefault(name, {}).setdefault(f"thresholds: {how}", {})[outcome] = count / sims
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sims", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=36)
    args = parser.parse_args()
    result = simulate(args.sims, args.seed)
    print(json.dumps({"sims": args.sims, "seed": args.seed, "outcomes": result}, indent=2))


if __name__ == "__main__":
    main()
