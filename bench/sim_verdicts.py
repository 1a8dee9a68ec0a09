"""How often the verdict's words claim a difference where there is none: seeded A/A
simulations through ServeLab's public functions (docs/METRICS.md, "The verdict's words").

Each simulated experiment is a 2×2 grid over two SGLang knobs that do nothing (an A/A:
every arm draws from the same distribution): 3 concurrencies × the card's 5 per-point
metrics, ``--trials`` trials, each run's value lognormal with a coefficient of variation
``--cv``. Its card is built by ``core.analysis.card.summary_card`` (the Experiment page's,
the CLI's and the report's) and its Regressions paragraph by ``regressions_paragraph``;
the single-run pair (one run of the baseline arm, one of a knob's arm) goes through
``comparison_story`` (the Compare page's). Counted:

* experiments whose verdict has a Regressions paragraph (the issue's target: ≤ 5 %);
* experiments where any card cell reads better / worse (coloured);
* single-run Compare pairs whose words say better or worse (target: 0);
* card cells that read better alone / worse alone (their own 95 % interval excludes zero,
  the family does not confirm them): the per-cell rate such a word carries, and the share
  of experiments with at least one;
* experiments whose Summary, having no Regressions, names a confirmatory contrast that reads
  worse alone (``worse_alone_lines``: the "No confirmed regression; worse alone" note).

    .venv/bin/python -m bench.sim_verdicts --seed 35 --experiments 1000

Runs on one core in about a minute per 1,000 experiments; prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import time
from typing import Any

import numpy as np

from core.analysis.card import (
    comparison_story,
    regressions_paragraph,
    summary_card,
    worse_alone_lines,
)
from core.analysis.runs import RunView
from core.run_folder import RunStatus

CONCURRENCIES = (1, 16, 64)
# The card's per-point metrics at plausible levels (their sizes do not matter: log ratios)
LEVELS = {
    "output_throughput": 1000.0,
    "median_ttft_ms": 50.0,
    "p99_ttft_ms": 120.0,
    "median_itl_ms": 8.0,
    "median_tpot_ms": 9.0,
}
# Two knobs of the SGLang declaration with no intended cost, two values each: a 2×2 grid
ARMS = {
    "base": {"attention_backend": "flashinfer", "chunked_prefill_size": 8192},
    "triton": {"attention_backend": "triton", "chunked_prefill_size": 8192},
    "chunk 4096": {"attention_backend": "flashinfer", "chunked_prefill_size": 4096},
    "both": {"attention_backend": "triton", "chunked_prefill_size": 4096},
}
_FINDING = re.compile(r"\b(better|worse)\b")


def _run(name: str, server: dict[str, Any], rng: np.random.Generator, sigma: float) -> RunView:
    points = [
        {
            "index": i,
            "label": f"c={c}",
            "point": {"concurrency": c, "request_rate": "inf", "input_len": 64, "output_len": 64},
            "metrics": {m: level * math.exp(rng.normal(0.0, sigma)) for m, level in LEVELS.items()},
        }
        for i, c in enumerate(CONCURRENCIES)
    ]
    spec = {"server": {"engine": "sglang", "model": "/m", **server}}
    return RunView(name, spec, RunStatus(state="succeeded"), {}, None, {}, points)


_ALONE = ("better alone", "worse alone")


def one_experiment(rng: np.random.Generator, trials: int, cv: float) -> dict[str, int]:
    """One A/A 2×2: does its verdict have a Regressions paragraph, does any card cell read
    better / worse, and does the single-run Compare of trial 0 say better / worse."""
    sigma = math.sqrt(math.log1p(cv**2))  # lognormal with this coefficient of variation
    arms = {
        arm: [_run(f"{arm}-{t}", server, rng, sigma) for t in range(trials)]
        for arm, server in ARMS.items()
    }
    rows = summary_card(arms, "base", {a: list(range(trials)) for a in arms})
    pair = comparison_story([arms["triton"][0], arms["base"][0]], 1, ["triton", "base"])
    words = " ".join(line for line in pair.verdict)
    return {
        "regressions": bool(regressions_paragraph(rows)),
        "any_cell": any(r.verdict in ("better", "worse") for r in rows),
        "compare_single": bool(_FINDING.search(words))
        or any(r.verdict in ("better", "worse") for r in pair.card),
        "any_alone": any(r.verdict in _ALONE for r in rows),
        # the Summary's "no confirmed regression; worse alone" note (pages/_story.py)
        "summary_worse_alone": not regressions_paragraph(rows) and bool(worse_alone_lines(rows)),
        "alone_cells": sum(r.verdict in _ALONE for r in rows),
        "cells": len(rows),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=35)
    parser.add_argument("--experiments", type=int, default=1000)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--cv", type=float, default=0.10)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    start = time.perf_counter()
    counts = dict.fromkeys(
        (
            "regressions",
            "any_cell",
            "compare_single",
            "any_alone",
            "summary_worse_alone",
            "alone_cells",
            "cells",
        ),
        0,
    )
    for _ in range(args.experiments):
        for key, hit in one_experiment(rng, args.trials, args.cv).items():
            counts[key] += hit
    n = args.experiments
    print(
        json.dumps(
            {
                "seed": args.seed,
                "experiments": n,
                "trials": args.trials,
                "cv": args.cv,
                "regressions_paragraph_share": counts["regressions"] / n,
                "any_cell_better_or_worse_share": counts["any_cell"] / n,
                "single_run_compare_better_or_worse_share": counts["compare_single"] / n,
                "any_cell_better_or_worse_alone_share": counts["any_alone"] / n,
                "cells_better_or_worse_alone_share": counts["alone_cells"] / counts["cells"],
                "summary_worse_alone_note_share": counts["summary_worse_alone"] / n,
                "seconds": round(time.perf_counter() - start, 1),
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
