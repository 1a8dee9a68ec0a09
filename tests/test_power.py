"""core.analysis.power: the smallest effect N trials resolve, against a simulation of the
paired estimator; the host's noise from an A/A (or earlier trials); `experiment --dry-run`
through a real subprocess queues nothing and prints the figures."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from core.analysis.noise import fingerprint
from core.analysis.power import contrast_log_sd, host_noise, power_lines, resolvable_effect
from core.analysis.stats import paired_log_ratio
from core.experiments.design import parse_experiment, save_experiment
from core.run.machine import cpu_model
from core.settings import Settings
from tests.runs_by_hand import P1, make_run, run_facts

REPO = Path(__file__).resolve().parent.parent
SIMULATIONS = 2000


@pytest.mark.parametrize("trials", [3, 5, 8])
def test_the_stated_half_width_is_the_simulated_interval_width(trials: int) -> None:
    """Over simulated experiments with a per-trial log-ratio sd of 0.1, the paired
    interval's half-width (log scale) has the stated value as its root mean square; an
    effect of that size is resolved a little more than half the time, twice it nearly
    always."""
    sd = 0.1
    h = math.log1p(resolvable_effect(sd, trials) or math.nan)
    rng = np.random.default_rng(23 + trials)
    base = {t: 100.0 for t in range(trials)}
    widths: list[float] = []
    resolved = {1: 0, 2: 0}  # effect = 1 or 2 times the stated half-width: intervals above 0
    for _ in range(SIMULATIONS):
        d = rng.normal(0.0, sd, trials)
        _, low, high = paired_log_ratio({t: 100 * math.exp(x) for t, x in enumerate(d)}, base)
        assert low is not None and high is not None
        widths.append((math.log1p(high) - math.log1p(low)) / 2)
        for k in resolved:
            arm = {t: 100 * math.exp(x + k * h) for t, x in enumerate(d)}
            _, lo, _ = paired_log_ratio(arm, base)
            resolved[k] += lo is not None and lo > 0
    rms = math.sqrt(float(np.mean(np.square(widths))))
    assert rms == pytest.approx(h, rel=0.04)
    assert 0.45 <= resolved[1] / SIMULATIONS <= 0.7
    assert resolved[2] / SIMULATIONS >= 0.95


def test_fewer_than_three_trials_resolve_nothing_and_more_resolve_less() -> None:
    assert resolvable_effect(0.1, 2) is None
    effects = [resolvable_effect(0.1, n) or 0.0 for n in (3, 5, 8, 12)]
    assert effects == sorted(effects, reverse=True)
    # t(0.975, 2) = 4.303: 0.1 · 4.303 / √3 on the log scale
    assert effects[0] == pytest.approx(math.expm1(0.1 * 4.3027 / math.sqrt(3)), rel=1e-4)


def _experiment(
    settings: Settings,
    exp_id: str,
    kind: str,
    values: dict[str, list[float]],
    facts: dict[str, object] | None = None,
    base: dict[str, object] | None = None,
) -> None:
    exp = parse_experiment(
        {
            "name": exp_id,
            "kind": kind,
            "trials": 4,
            "arms": [{"label": a} for a in values],
            **({"base": base} if base else {}),
        }
    )
    runs = []
    for arm, vals in values.items():
        for trial, v in enumerate(vals):
            rid = f"{exp_id}-{arm}-{trial}"
            make_run(
                settings.runs_dir,
                rid,
                points=[(P1, {"output_throughput": v}, "d")],
                facts=run_facts(**(facts or {})),
            )
            runs.append((arm, trial, rid))
    save_experiment(settings, exp, runs, exp_id)


HERE = fingerprint(run_facts())  # the machine the runs by hand ran on


def test_host_noise_is_the_spread_of_the_aa_per_trial_log_ratios(settings: Settings) -> None:
    a1, a2 = [100.0, 104.0, 97.0, 101.0], [102.0, 99.0, 99.0, 106.0]
    _experiment(settings, "exp-1-aa", "aa", {"A1": a1, "A2": a2})
    noise = host_noise(settings, HERE)
    d = [math.log(b / a) for a, b in zip(a1, a2, strict=True)]
    assert noise is not None and noise.source == "A/A" and noise.experiment_id == "exp-1-aa"
    assert noise.sd_log == pytest.approx(float(np.std(d, ddof=1)))
    assert noise.df == 3
    lines = power_lines(noise, 4)
    assert "exp-1-aa" in lines[0] and any("with 4 trials: about +" in x for x in lines)
    sd = float(np.std(d, ddof=1))
    assert f"this host's run-to-run noise ±{math.expm1(sd) * 100:.1f}%" in lines[0]
    assert "1× NVIDIA H200" in lines[0]


@pytest.mark.parametrize(
    "other",
    [
        {"gpus": [{"name": "NVIDIA H100 80GB HBM3"}]},  # another GPU model
        {"gpus": [{"name": "NVIDIA H200"}, {"name": "NVIDIA H200"}]},  # another count
        {"gpus": []},  # a CPU host
        {"cpu_model": "AMD EPYC 9654"},  # another CPU
        {"engine_install": "sglang-0.5.14"},  # another engine installation
    ],
)
def test_noise_is_keyed_by_the_machine_never_by_its_name(
    settings: Settings, other: dict[str, object]
) -> None:
    """An A/A measured on another machine (same host name: the records say "vm" for both)
    is no noise for this one, nor is it for that one."""
    _experiment(settings, "exp-1-aa", "aa", {"A1": [100.0, 104.0, 97.0], "A2": [102, 99, 99]})
    elsewhere = fingerprint(run_facts(**other))
    assert elsewhere != HERE
    assert host_noise(settings, elsewhere) is None
    assert host_noise(settings, None) is None  # no machine to key by: none
    assert host_noise(settings, HERE) is not None


def test_an_effect_is_not_noise_earlier_trials_give_their_spread(settings: Settings) -> None:
    """Without an A/A, an earlier A/B's trials: B is 50 % faster in every trial, so its
    spread around that (not the 50 %) is the noise."""
    _experiment(
        settings, "exp-2-ab", "ab", {"A": [100.0, 90.0, 110.0, 95.0], "B": [150, 135, 165, 142.5]}
    )
    noise = host_noise(settings, HERE)
    assert noise is not None and noise.source == "trials" and noise.sd_log == pytest.approx(0.0)
    # the experiment's base is the default engine and model: another engine shows none
    assert host_noise(settings, HERE, engine="transformers") == noise
    assert host_noise(settings, HERE, engine="sglang") is None


def test_no_noise_known_says_how_to_measure_it(settings: Settings) -> None:
    assert host_noise(settings, HERE) is None
    (line,) = power_lines(None, 3)
    assert "no noise" in line and "A/A noise check" in line
    assert contrast_log_sd([], "A") is None


def test_experiment_dry_run_queues_nothing_and_prints_the_figures(
    settings: Settings, tmp_path: Path
) -> None:
    data = settings.data_dir
    # an A/A of the plan's engine on this machine (no GPU here: the subprocess detects)
    here = {"gpus": [], "cpu_model": cpu_model(), "engine": "sglang", "engine_version": None}
    _experiment(
        settings,
        "exp-3-aa",
        "aa",
        {"A1": [100.0, 104.0, 97.0, 101.0], "A2": [102.0, 99.0, 99.0, 106.0]},
        facts=here,
        base={"server": {"engine": "sglang"}},
    )
    before = sorted(p.name for p in settings.runs_dir.iterdir())
    plan = tmp_path / "plan.json"
    plan.write_text(
        '{"name": "dry", "trials": 3, "closing_baseline": true,'
        ' "base": {"server": {"engine": "sglang"}},'
        ' "arms": [{"label": "off", "changes": {"server.cuda_graphs": false}},'
        ' {"label": "on", "changes": {"server.cuda_graphs": true}}]}'
    )
    out = subprocess.run(
        [sys.executable, "-m", "core", "experiment", "--dry-run", str(plan)],
        cwd=REPO,
        env={**os.environ, "SERVELAB_DATA_DIR": str(data)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "nothing queued" in text
    assert "closing baseline: off" in text and text.count("trial ") >= 3
    assert "7 runs (2 arms × 3 trials + a closing baseline run)" in text
    assert "from A/A exp-3-aa on no GPU, CPU " in text
    assert "with 3 trials: about +" in text and "← this plan" in text
    assert "with 8 trials: about +" in text
    assert sorted(p.name for p in settings.runs_dir.iterdir()) == before  # no run queued
    assert sorted(p.name for p in (data / "experiments").iterdir()) == ["exp-3-aa"]
