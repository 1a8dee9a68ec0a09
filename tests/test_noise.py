"""core.analysis.noise: a run's fingerprint from its stored facts, and the rule it serves: an
A/A measured on another machine changes no shipped verdict."""

from __future__ import annotations

import json

import pytest

from core.analysis.card import experiment_story
from core.analysis.noise import fingerprint, runs_fingerprint
from core.analysis.runs import load_run
from core.experiments.design import list_experiments, parse_experiment, save_experiment
from core.portal.demo import install_demo
from core.run_folder import RunFolder
from core.settings import DEMO_DIR, Settings
from core.views.report import format_experiment
from tests.runs_by_hand import P1, make_run, run_facts

H200 = [{"gpu": 0, "used_mib": 1.0, "total_mib": 143_771.0, "name": "NVIDIA H200"}]


FACTS = {"gpus": H200, "cpu_model": "AMD EPYC 9654", "engine": "sglang", "engine_version": "0.5.17"}


def test_the_fingerprint_is_the_machine_and_engine_never_the_host_name() -> None:
    one = fingerprint({**FACTS, "engine_install": None, "host": "vm"})
    assert one.text == "1× NVIDIA H200, CPU AMD EPYC 9654, sglang 0.5.17"
    assert one.key.startswith("fp-") and one.key == fingerprint(FACTS).key
    # a used-memory reading or a host name is no part of it
    again = fingerprint({**FACTS, "gpus": [{**H200[0], "used_mib": 9e4}], "host": "other"})
    assert again == one
    for change in (
        {"gpus": H200 * 2},
        {"gpus": []},
        {"cpu_model": "Intel Xeon"},
        {"engine_install": "sglang-next"},
        {"engine": "vllm"},
    ):
        other = fingerprint({**FACTS, **change})
        assert not one.plans_for(other) and other.key != one.key
    # a run not launched yet has no version: the machine and installation decide
    assert one.plans_for(fingerprint({**FACTS, "engine_version": None}))
    assert not one.plans_for(fingerprint({**FACTS, "engine_version": "0.5.14"}))


def test_an_experiments_fingerprint_is_its_first_succeeded_runs(settings: Settings) -> None:
    make_run(settings.runs_dir, "r1", facts=run_facts(cpu_model="X"))
    assert runs_fingerprint([load_run(RunFolder(settings.runs_dir / "r1"))]) == fingerprint(
        run_facts(cpu_model="X")
    )
    assert runs_fingerprint([]) is None


def _noisy_aa(settings: Settings, exp_id: str, host: str, facts: dict[str, object]) -> None:
    """A finished A/A of the demo's engine whose arms differ by up to ±130 % (a noisy
    machine), recorded under host name ``host``."""
    exp = parse_experiment(
        {
            "name": exp_id,
            "kind": "aa",
            "trials": 3,
            "arms": [{"label": "A1"}, {"label": "A2"}],
            "base": {"server": {"engine": "sglang"}},
        }
    )
    runs = []
    for arm, scale in (("A1", 1.0), ("A2", 2.3)):
        for trial in range(3):
            rid = f"{exp_id}-{arm}-{trial}"
            v = 100.0 * (scale if trial != 1 else 1 / scale)
            metrics = {
                "output_throughput": v,
                "median_ttft_ms": v,
                "median_itl_ms": v,
                "p99_ttft_ms": v,
                "request_throughput": v,
            }
            make_run(settings.runs_dir, rid, points=[(P1, metrics, "d")], facts=run_facts(**facts))
            runs.append((arm, trial, rid))
    path = save_experiment(settings, exp, runs, exp_id) / "experiment.json"
    record = json.loads(path.read_text())
    path.write_text(json.dumps({**record, "host": host}))


def _verdicts(settings: Settings) -> dict[str, str]:
    out = {}
    for record in list_experiments(settings):
        if record.kind == "aa":
            continue
        story = experiment_story(settings, record)
        out[record.experiment_id] = "\n".join(
            [
                format_experiment(settings, record),
                *story.verdict,
                story.noise,
                json.dumps([r.__dict__ for r in story.card], default=str),
            ]
        )
    return out


@pytest.mark.parametrize(
    ("host", "facts"),
    [
        ("gpu-box-2", {"gpus": [{"name": "NVIDIA H100 80GB HBM3"}] * 2, "cpu_model": "Xeon"}),
        # the case issue 35 found: a CPU box also called "vm", the demo's host name
        ("vm", {"gpus": [], "cpu_model": "Intel(R) Xeon(R) Platinum 8480+"}),
        # the demo's very GPU model, another CPU
        ("vm", {"gpus": H200, "cpu_model": "AMD EPYC 7763"}),
    ],
)
def test_an_aa_on_another_machine_leaves_every_shipped_verdict_byte_identical(
    settings: Settings, host: str, facts: dict[str, object]
) -> None:
    install_demo(settings)
    before = _verdicts(settings)
    assert len(before) == len(list((DEMO_DIR / "experiments").iterdir()))  # every one shipped
    _noisy_aa(settings, "exp-29990101-000000-aaaa", host, facts)
    assert any(r.kind == "aa" and r.host == host for r in list_experiments(settings))
    assert _verdicts(settings) == before
