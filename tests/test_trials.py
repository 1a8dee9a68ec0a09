"""core.analysis.trials: an experiment's runs as loaded trials."""

from __future__ import annotations

from core.analysis.trials import experiment_runs
from core.experiments.design import list_experiments, parse_experiment, save_experiment
from core.experiments.records import ExperimentRecord
from core.settings import Settings
from tests.runs_by_hand import P1, make_run


def _aa(settings: Settings, values: dict[str, list[float]]) -> ExperimentRecord:
    exp = parse_experiment(
        {"name": "aa", "kind": "aa", "trials": 3, "arms": [{"label": a} for a in values]}
    )
    runs = []
    for arm, vals in values.items():
        for trial, v in enumerate(vals):
            rid = f"aa-{arm}-{trial}"
            make_run(settings.runs_dir, rid, points=[(P1, {"output_throughput": v}, "d")])
            runs.append((arm, trial, rid))
    runs.append(("A2", 3, "never-created"))  # queued then removed: no folder, no trial
    save_experiment(settings, exp, runs, "exp-aa")
    (record,) = list_experiments(settings)
    return record


def test_experiment_runs_are_the_trials_that_have_a_folder(settings: Settings) -> None:
    record = _aa(settings, {"A1": [100.0, 101.0, 99.0], "A2": [100.5, 99.5, 100.0]})
    runs = experiment_runs(settings, record)
    assert [(r.arm, r.trial, r.view.run_id) for r in runs] == [
        ("A1", 0, "aa-A1-0"),
        ("A1", 1, "aa-A1-1"),
        ("A1", 2, "aa-A1-2"),
        ("A2", 0, "aa-A2-0"),
        ("A2", 1, "aa-A2-1"),
        ("A2", 2, "aa-A2-2"),
    ]
    assert runs[0].view.points[0]["metrics"]["output_throughput"] == 100.0
