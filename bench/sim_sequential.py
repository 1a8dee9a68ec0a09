"""Seeded simulation of `trials: auto` through its public stop rule
(``core.analysis.sequential.headline_contrasts``, the function the controller calls):
per experiment two arms, the three headline metrics, one load point; each trial's runs
share the host's state (within-trial correlation ``rho``); looks after every trial from
min_trials to max_trials, decided contrasts stay decided, stop when all are decided.

    python -m bench.sim_sequential --seed 35 --experiments 3000
    # the figures before issue 35, with the base commit's stop rule:
    git show e31f5b0:core/analysis/sequential.py > /tmp/sequential_before.py
    python -m bench.sim_sequential --seed 35 --experiments 3000 \
        --sequential-module /tmp/sequential_before.py

Prints the error and power table of docs/METRICS.md ("Adaptive trials")."""

from __future__ import annotations

import argparse
import importlib.util
import math
import sys
from collections.abc import Sequence
from types import ModuleType

import numpy as np

from core.analysis.runs import RunView
from core.analysis.sequential import ALPHA, headline_contrasts, margins_for
from core.analysis.stats import RunOfArm
from core.run_folder import RunStatus

METRICS = ("output_throughput", "median_ttft_ms", "median_itl_ms")
POINT = {"concurrency": 64, "request_rate": "inf", "input_len": 128, "output_len": 128}


def runs_of(values: dict[str, np.ndarray], trials: int) -> list[RunOfArm]:
    """In-memory runs: ``values[arm]`` is trials × metrics."""
    out = []
    for arm, table in values.items():
        for t in range(trials):
            metrics = {m: float(table[t, i]) for i, m in enumerate(METRICS)}
            point = {"index": 0, "label": "c=64", "point": POINT, "metrics": metrics}
            view = RunView(f"{arm}-{t}", {}, RunStatus(state="succeeded"), {}, None, {}, [point])
            out.append(RunOfArm(arm, t, view))
    return out


def draw(
    rng: np.random.Generator, effect: float, cv: float, rho: float, trials: int
) -> dict[str, np.ndarray]:
    """Log-normal run values at CV ``cv``: a per-trial host state shared by both arms (a
    share ``rho`` of the variance) and a per-run part; B is ``effect`` faster (throughput
    × (1 + effect), latencies ÷ (1 + effect)); the three metrics' noises independent."""
    shared = rng.normal(0, cv * math.sqrt(rho), (trials, len(METRICS)))
    own = math.sqrt(1 - rho) * cv
    sign = np.array([1.0, -1.0, -1.0])
    a = np.exp(shared + rng.normal(0, own, (trials, 3))) * 100
    b = np.exp(shared + rng.normal(0, own, (trials, 3)) + sign * math.log1p(effect)) * 100
    return {"A": a, "B": b}


def experiment(
    rng: np.random.Generator,
    effect: float,
    cv: float,
    rho: float,
    low: int,
    high: int,
    margin: float = 0.05,
    alpha: float = ALPHA,
    module: ModuleType | None = None,
) -> tuple[dict[str, str], int]:
    """One adaptive experiment: each metric's final decision, and the trials it ran.
    ``module``: another sequential.py to measure (the base commit's: its Bonferroni rule,
    whose looks re-decide every contrast)."""
    values = draw(rng, effect, cv, rho, high)
    previous: Sequence = ()
    n = low
    for n in range(low, high + 1):
        runs = runs_of({k: v[:n] for k, v in values.items()}, n)
        if module is not None:
            margins = module.margins_for({}, None, margin)
            level = module.look_level(low, high)
            previous = module.headline_contrasts(runs, "A", margins, level)
        else:
            previous = headline_contrasts(
                runs,
                "A",
                margins_for({}, margin),
                n,
                min_trials=low,
                max_trials=high,
                previous=previous,
                alpha=alpha,
            )
        if all(c.decision != "undecided" for c in previous):
            break
    return {c.metric: c.decision for c in previous}, n


CASES = ((0.0, 0.03), (0.0, 0.10), (0.0, 0.25), (0.10, 0.03), (0.10, 0.10), (0.10, 0.25))


def table(
    seed: int,
    experiments: int,
    low: int = 3,
    high: int = 10,
    rho: float = 0.5,
    alpha: float = ALPHA,
    module: ModuleType | None = None,
    cases: Sequence[tuple[float, float]] = CASES,
) -> list[str]:
    """Per case (true effect, CV): the share of experiments with any contrast called
    better/worse with no effect, throughput called better, any contrast "equivalent"
    under a true +10 % (on every metric), and the mean trials run."""
    rng = np.random.default_rng(seed)
    lines = [
        "| true change | CV | any false better/worse | throughput better "
        "| any 'equivalent' | mean trials |",
        "|---|---|---|---|---|---|",
    ]
    for effect, cv in cases:
        wrong = better = equiv = 0
        took = []
        for _ in range(experiments):
            d, n = experiment(rng, effect, cv, rho, low, high, alpha=alpha, module=module)
            took.append(n)
            wrong += effect == 0 and any(x in ("better", "worse") for x in d.values())
            better += d["output_throughput"] == "better"
            equiv += effect != 0 and any(x == "equivalent" for x in d.values())
        name = "none (A/A)" if effect == 0 else f"+{effect:.0%}"
        cells = [
            f"{wrong / experiments:.1%}" if effect == 0 else "–",
            f"{better / experiments:.1%}",
            f"{equiv / experiments:.1%}" if effect else "–",
        ]
        lines.append(f"| {name} | {cv:.0%} | " + " | ".join(cells) + f" | {np.mean(took):.1f} |")
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--seed", type=int, default=35)
    p.add_argument("--experiments", type=int, default=2000)
    p.add_argument("--alpha", type=float, default=ALPHA)
    p.add_argument("--sequential-module", help="a sequential.py to measure instead (before)")
    p.add_argument("--aa-only", action="store_true", help="only the no-effect rows")
    args = p.parse_args()
    module = _load(args.sequential_module) if args.sequential_module else None
    cases = [c for c in CASES if c[0] == 0] if args.aa_only else CASES
    print(
        "\n".join(table(args.seed, args.experiments, alpha=args.alpha, module=module, cases=cases))
    )


def _load(path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location("sequential_under_test", path)
    assert spec is not None and spec.loader is not None
    out = importlib.util.module_from_spec(spec)
    sys.modules["sequential_under_test"] = out  # its dataclasses look their module up
    spec.loader.exec_module(out)
    return out


if __name__ == "__main__":
    main()
