"""Seeded simulation of the drift findings through their public function
(``core.analysis.drift.drift_findings``, what the card's "Read with care" line says):
an A/B experiment (B 10 % faster), arms interleaved in a shuffled order per trial, one run
every 2 minutes, a closing baseline run after the last trial. Each run's log value is the
arm's, plus the trial's host state (a share ``rho`` of the variance: the runs of one trial
are correlated), plus its own noise, at CV ``cv``; with drift, every run is multiplied by
1 + drift × (its time ÷ the last run's), linearly.

    python -m bench.sim_noise --seed 35 --experiments 2000
    # the figures before issue 35, with the base commit's drift module:
    git show e31f5b0:core/analysis/drift.py > /tmp/drift_before.py
    python -m bench.sim_noise --seed 35 --experiments 2000 --drift-module /tmp/drift_before.py

Prints the table of docs/METRICS.md ("Drift"): the share of experiments flagged by the
across-trial test, by the closing baseline, and by either."""

from __future__ import annotations

import argparse
import importlib.util
import math
import sys
from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import Any

import numpy as np

from core.analysis import drift as drift_module
from core.analysis.runs import RunView
from core.analysis.stats import RunOfArm
from core.run_folder import RunStatus

POINT = {"concurrency": 64, "request_rate": "inf", "input_len": 128, "output_len": 128}
T0 = datetime(2026, 12, 1, tzinfo=UTC)
CASES = (  # (trials, cv, drift, within-trial correlation)
    *((n, cv, 0.0, 0.5) for n in (3, 5) for cv in (0.03, 0.10, 0.25)),
    *((n, 0.03, -0.20, rho) for rho in (0.5, 0.0) for n in (3, 5, 8)),
)


def _run(arm: str, trial: int, minute: float, value: float) -> RunOfArm:
    when = (T0 + timedelta(minutes=minute)).isoformat()
    point = {
        "index": 0,
        "label": "c=64",
        "point": POINT,
        "started_at": when,
        "metrics": {"output_throughput": value},
    }
    view = RunView(
        f"{arm}-{trial}", {}, RunStatus(state="succeeded", started_at=when), {}, None, {}, [point]
    )
    return RunOfArm(arm, trial, view)


def experiment(
    rng: np.random.Generator, trials: int, cv: float, drift: float, rho: float = 0.5
) -> tuple[list[RunOfArm], list[RunOfArm]]:
    """(trial runs, [the closing baseline run]) of one simulated experiment."""
    order = [(str(arm), t) for t in range(trials) for arm in rng.permutation(["A", "B"])]
    order.append(("A", trials))  # the closing baseline: one more unit of its own
    shared = rng.normal(0, cv * math.sqrt(rho), trials + 1)
    last = 2.0 * (len(order) - 1)
    runs = []
    for i, (arm, t) in enumerate(order):
        host = 1 + drift * (2.0 * i) / last
        log_v = math.log(1000) + (math.log(1.1) if arm == "B" else 0.0) + shared[t]
        log_v += rng.normal(0, cv * math.sqrt(1 - rho))
        runs.append(_run(arm, t, 2.0 * i, math.exp(log_v) * host))
    return runs[:-1], runs[-1:]


def table(seed: int, experiments: int, module: ModuleType = drift_module) -> list[str]:
    rng = np.random.default_rng(seed)
    lines = [
        "| trials | CV | within-trial corr. | drift | across trials | closing baseline | either |",
        "|---|---|---|---|---|---|---|",
    ]
    for trials, cv, drift, rho in CASES:
        across = closing = either = 0
        for _ in range(experiments):
            runs, last = experiment(rng, trials, cv, drift, rho)
            kinds = {d.kind for d in module.drift_findings(runs, last, "A", within=False)}
            across += "across trials" in kinds
            closing += "closing baseline" in kinds
            either += bool(kinds)
        share = [f"{x / experiments:.1%}" for x in (across, closing, either)]
        lines.append(
            f"| {trials} | {cv:.0%} | {rho:g} | {drift:+.0%} | " + " | ".join(share) + " |"
        )
    return lines


def _load(path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location("drift_under_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["drift_under_test"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def main(argv: Any = None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--seed", type=int, default=35)
    p.add_argument("--experiments", type=int, default=2000)
    p.add_argument("--drift-module", help="a drift.py to measure instead (the 'before')")
    args = p.parse_args(argv)
    module = _load(args.drift_module) if args.drift_module else drift_module
    print("\n".join(table(args.seed, args.experiments, module)))


if __name__ == "__main__":
    main()
