"""experiment.json, typed (core/experiments/records.py): the shipped files load, and files
of older or newer versions keep what they have."""

from __future__ import annotations

import json
from pathlib import Path

from core.experiments.design import list_experiments, load_experiment
from core.experiments.records import ExperimentRecord, read_experiment
from core.settings import Settings

DEMO_EXPERIMENTS = Path(__file__).resolve().parent.parent / "data" / "demo" / "experiments"


def test_every_shipped_experiment_loads_typed_and_round_trips() -> None:
    paths = sorted(DEMO_EXPERIMENTS.glob("*/experiment.json"))
    assert len(paths) >= 2  # the transformers serve A/B, the SGLang grids
    for path in paths:
        record = read_experiment(path)
        assert record is not None and record.experiment_id == path.parent.name
        assert record.runs and all(r.arm in record.arm_labels for r in record.runs)
        # trials: auto records how many trials it took (adaptive.stop), a fixed plan says it
        trials = record.spec["trials"]
        if trials == "auto":
            assert record.adaptive is not None and record.adaptive.stop is not None
            trials = record.adaptive.stop.queued_trials
        assert {r.trial for r in record.runs} == set(range(trials))
        assert record.name and record.kind and record.host
        assert record.run_ids == [r.run_id for r in record.runs]
        # Written back, the JSON is what was on disk: no key added, none dropped.
        assert record.as_json() == json.loads(path.read_text())


def test_unknown_keys_are_kept_and_what_is_not_a_record_reads_as_none(tmp_path: Path) -> None:
    path = tmp_path / "experiment.json"
    assert read_experiment(path) is None  # no file
    path.write_text('{"experiment_id": "exp-x", "runs": [{"run_id": "r", "arm": "a", ')
    assert read_experiment(path) is None  # half-copied
    path.write_text(json.dumps([1, 2]))
    assert read_experiment(path) is None  # not an object
    path.write_text(json.dumps({"runs": []}))
    assert read_experiment(path) is None  # no id: not an experiment
    path.write_text(
        json.dumps(
            {
                "experiment_id": "exp-x",
                "future": {"k": 1},
                "runs": [{"run_id": "r", "arm": "a", "trial": 0, "node": "n1"}],
            }
        )
    )
    record = read_experiment(path)
    assert record is not None and record.model_extra == {"future": {"k": 1}}
    assert record.runs[0].model_extra == {"node": "n1"}
    assert (record.spec, record.host, record.name, record.arm_labels) == ({}, None, None, [])


def test_load_and_list_return_records(settings: Settings) -> None:
    root = settings.data_dir / "experiments"
    for name in ("exp-20990101-000000-aaaa", "exp-20990102-000000-bbbb"):
        (root / name).mkdir(parents=True)
        (root / name / "experiment.json").write_text(
            json.dumps({"experiment_id": name, "spec": {"name": name}, "runs": []})
        )
    (root / "exp-broken").mkdir()
    (root / "exp-broken" / "experiment.json").write_text("{")
    listed = list_experiments(settings)
    assert [r.experiment_id for r in listed] == [
        "exp-20990102-000000-bbbb",
        "exp-20990101-000000-aaaa",
    ]  # newest first, the unreadable one left out
    assert all(isinstance(r, ExperimentRecord) for r in listed)
    assert load_experiment(settings, "exp-20990101-000000-aaaa") == listed[1]
    assert load_experiment(settings, "exp-broken") is None
    assert load_experiment(settings, "../etc") is None
