"""History: which runs form a series, the band, and how often its alert is right.

The band's rates are proven on synthetic series from seeded generators (no clock, no
timing): an A/A series alerts no more than the stated rate, and a regression of known size
is alerted (docs/METRICS.md, "History and the regression band")."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from core.analysis.history import (
    AA_ALERT_RATE,
    HISTORY_METRICS,
    MIN_EARLIER_RUNS,
    alert_text,
    caught_drop,
    check_value,
    is_series_key,
    load_history,
    prediction_band,
    series_key,
    series_of_run,
)
from core.views.history import history_figure, history_json, history_lines
from tests.runs_by_hand import P1, P4, make_run, request_records, run_facts


def _aa_series(rng: np.random.Generator, n: int, cv: float) -> tuple[list[float], float]:
    """n earlier runs and a new one, all from the same log-normal host (an A/A series)."""
    values = 1000.0 * np.exp(rng.normal(0.0, cv, n + 1))
    return [float(v) for v in values[:-1]], float(values[-1])


def test_an_aa_series_alerts_no_more_than_the_stated_rate() -> None:
    """4,000 seeded A/A series (3 to 10 earlier runs, CV 1-10 %), each run checked on the
    three headline metrics drawn independently (the worst case for the union of three
    checks: real metrics move together): at most AA_ALERT_RATE of them alert."""
    rng = np.random.default_rng(20261202)
    series, alerted, per_metric = 4000, 0, 0
    for _ in range(series):
        n, cv = int(rng.integers(MIN_EARLIER_RUNS, 11)), float(rng.uniform(0.01, 0.10))
        outcomes = []
        for metric in HISTORY_METRICS:
            earlier, new = _aa_series(rng, n, cv)
            outcomes.append(check_value(metric, new, earlier).outcome)
        per_metric += outcomes.count("regression")
        alerted += "regression" in outcomes
    assert alerted / series <= AA_ALERT_RATE
    # each check alerts on its worse side only: half of the 1 % outside a 99 % band
    assert per_metric / (3 * series) <= 0.0075


def test_a_15_percent_drop_after_5_stable_runs_at_3_percent_cv_is_alerted() -> None:
    # five runs whose logs have exactly a 3 % spread around 1,000 tok/s
    z = np.array([-1.2, -0.4, 0.0, 0.4, 1.2])
    earlier = [float(v) for v in 1000.0 * np.exp(0.03 * z / np.std(z, ddof=1))]
    check = check_value("output_throughput", 850.0, earlier, "c=64", "new")
    assert check.outcome == "regression"
    assert check.band is not None and check.band.n == 5
    assert 0 < -check.change < 0.02  # just below the band's lower edge
    # the same drop in a latency is an improvement; a 15 % rise is the regression
    assert check_value("median_ttft_ms", 850.0, earlier).outcome == "improvement"
    assert check_value("median_ttft_ms", 1180.0, earlier).outcome == "regression"


@pytest.mark.parametrize(("n", "at_least"), [(5, 0.55), (10, 0.9)])
def test_how_often_a_15_percent_drop_is_alerted(n: int, at_least: float) -> None:
    """The band's power on 1,000 seeded series with a 3 % CV: the documented rates (66 %
    after 5 runs, 94 % after 10 in these series), each with a margin."""
    rng = np.random.default_rng(7 + n)
    hits = 0
    for _ in range(1000):
        earlier, new = _aa_series(rng, n, 0.03)
        hits += check_value("output_throughput", new * 0.85, earlier).outcome == "regression"
    assert hits / 1000 >= at_least


def test_the_band_needs_three_earlier_runs_and_positive_values() -> None:
    assert prediction_band([100.0, 101.0]) is None
    assert prediction_band([100.0, 0.0, 101.0]) is None
    band = prediction_band([100.0, 100.0, 100.0])
    assert band is not None and band.low == band.high == pytest.approx(100.0)
    # a band of identical runs has no width: a 0.1 % step is no finding, a 1 % one is
    assert check_value("output_throughput", 99.9, [100.0] * 3).outcome == "inside"
    assert check_value("output_throughput", 99.0, [100.0] * 3).outcome == "regression"
    assert check_value("output_throughput", 90.0, [100.0] * 2).outcome == "no band"


def _spec_json(folder: Any) -> dict[str, Any]:
    return json.loads((folder.path / "spec.json").read_text())


def test_the_series_key_ignores_what_does_not_change_the_measurement(tmp_path: Path) -> None:
    a = make_run(tmp_path, "a", server={"engine": "sglang", "mem_fraction_static": 0.85})
    spec = _spec_json(a)
    facts = run_facts()
    key = series_key(spec, facts)
    assert is_series_key(key) and key == series_key(spec, facts)  # stable
    same = {
        **spec,
        "run_id": "b",
        "created_at": "2027-01-01T00:00:00+00:00",
        "tags": ["exp:exp-1", "arm:x", "trial:2", "nightly"],
        "note": "after the upgrade",
        "intended_diff": ["server.engine_install"],
        "placement": {"executor": "ray", "accelerator_type": "H200"},
        "server": {
            **spec["server"],
            "port": 31000,
            "startup_timeout_s": 1200.0,
            "engine_install": "/opt/sglang-0.5.18",  # branch i25-install's field, if present
        },
        "plan": {**spec["plan"], "probe": None},
    }
    assert series_key(same, run_facts(engine_version="0.5.18", kv_cache_tokens=1)) == key
    # a spec.json written before a field existed reads as its default
    old = {**spec, "plan": {k: v for k, v in spec["plan"].items() if k != "client_workers"}}
    assert series_key(old, facts) == key
    # a knob, the load, or the GPU is another configuration
    knob = {**spec, "server": {**spec["server"], "mem_fraction_static": 0.92}}
    load = {**spec, "plan": {**spec["plan"], "points": [P4]}}
    other_gpu = run_facts(gpus=[{"gpu": 0, "name": "NVIDIA A100"}])
    assert len({key, series_key(knob, facts), series_key(load, facts)}) == 3
    assert series_key(spec, other_gpu) != key


def _series(tmp_path: Path, throughputs: list[float], versions: list[str]) -> list[str]:
    """Runs of one configuration, one hour apart, with these output throughputs at c=4."""
    ids = []
    for i, (tput, version) in enumerate(zip(throughputs, versions, strict=True)):
        run_id = f"2026120{1 + i // 10}-0{i % 10}0000-aaaa{i:02d}"
        make_run(
            tmp_path,
            run_id,
            points=[
                (P1, {"output_throughput": tput / 3, "median_ttft_ms": 50.0}, "d1"),
                (P4, {"output_throughput": tput, "median_ttft_ms": 80.0}, "d4"),
            ],
            facts=run_facts(engine_version=version),
            started_at=f"2026-12-01T{i:02d}:00:00+00:00",
        )
        ids.append(run_id)
    return ids


def test_a_regression_after_an_upgrade_is_alerted_in_words(tmp_path: Path) -> None:
    ids = _series(
        tmp_path, [1000.0, 1030.0, 970.0, 1010.0, 990.0, 840.0], ["0.5.17"] * 5 + ["0.5.18"]
    )
    make_run(tmp_path, "other", server={"engine": "sglang", "mem_fraction_static": 0.9})
    history = load_history(tmp_path, ids[-1])
    assert history is not None and history.focus == ids[-1]
    assert [r.run_id for r in history.runs] == ids  # oldest first, the other config left out
    assert [r.version for r in history.runs] == ["sglang 0.5.17"] * 5 + ["sglang 0.5.18"]
    assert history.headline_label == "c=4" and history.regression
    text = alert_text(history)
    assert text.startswith(f"Regression in {ids[-1]}: output throughput at c=4 fell ")
    # 840 is 16.0% below the mean of 1,000 and some % below the band's lower edge
    # the band is the 5 runs of the installation before (never a mix of versions), and
    # every point of the run is checked (c=4, the headline, first; the 99 % shared by 2)
    assert "fell 16.0% below the mean of the 5 earlier runs of 0.5.17, " in text
    assert "% below their band (" in text and "99.5% prediction interval; this run 840)" in text
    assert "; output throughput at c=1 fell 16.0%" in text
    ttft = next(c for c in history.checks if c.metric == "median_ttft_ms")
    assert ttft.outcome == "inside"  # identical latencies: inside a band of no width
    # the same series by its key checks its newest run; an earlier run is checked against
    # the runs before it
    by_key = load_history(tmp_path, history.key)
    assert by_key is not None and alert_text(by_key) == text
    third = load_history(tmp_path, ids[2])
    assert third is not None and alert_text(third).startswith("No band yet: 2 earlier run(s)")
    fifth = load_history(tmp_path, ids[4])
    assert fifth is not None and alert_text(fifth).startswith("No regression: ")
    assert series_of_run(tmp_path, "no-such-run") is None
    assert load_history(tmp_path, "no-such-run") is None


def test_the_cli_view_and_figure_say_the_same(tmp_path: Path) -> None:
    ids = _series(tmp_path, [1000.0, 1030.0, 970.0, 1010.0, 800.0], ["0.5.17"] * 4 + ["0.5.18"])
    history = load_history(tmp_path, ids[-1])
    assert history is not None
    lines = history_lines(history)
    assert lines[0] == alert_text(history)
    # what the band could catch, on the page, in the CLI and the JSON alike
    assert lines[1].startswith("With these 4 runs a drop of ") and "4 times in 5" in lines[1]
    assert f"link: /history?series={history.key}" in lines
    data = history_json(history)
    assert data["alert"] == alert_text(history) and data["regression"] is True
    json.dumps(data, allow_nan=False)  # strict JSON: the unbounded rate is "inf"
    fig = history_figure(history)
    names = {t.name for t in fig.data}
    assert {"sglang 0.5.17", "sglang 0.5.18", "checked run"} <= names
    assert any(str(t.name).startswith("band (99.5%, 4 earlier runs)") for t in fig.data)
    assert data["power"] == lines[1]


def test_a_run_with_records_has_its_own_interval(tmp_path: Path) -> None:
    records = request_records() * 10  # 30 successful requests: enough for the TTFT groups
    make_run(
        tmp_path,
        "r1",
        points=[(P4, {"output_throughput": 100.0, "median_ttft_ms": 60.0}, "d4")],
        records=records,
        started_at="2026-12-01T00:00:00+00:00",
    )
    history = load_history(tmp_path, "r1")
    assert history is not None
    ttft = next(v for v in history.values if v.metric == "median_ttft_ms")
    assert ttft.ci_low is not None and ttft.ci_high is not None
    assert ttft.ci_low <= ttft.value <= ttft.ci_high
    # no steady window in the summary: no throughput interval, said as None, never made up
    tput = next(v for v in history.values if v.metric == "output_throughput")
    assert tput.ci_low is None and tput.ci_high is None
    assert math.isfinite(ttft.value)


def test_the_drop_a_band_would_catch_is_caught_4_times_in_5() -> None:
    """caught_drop's promise, by seeded simulation: for bands of 5 and 10 earlier runs at
    3 % CV, the next run dropped by the figure the band states lands below it about 80 % of
    the time (the figure uses the band's own spread, so it varies with the band)."""
    rng = np.random.default_rng(35)
    for n in (5, 10):
        hits = 0
        for _ in range(2000):
            earlier, new = _aa_series(rng, n, 0.03)
            band = prediction_band(earlier)
            assert band is not None
            drop = caught_drop(band)
            hits += check_value("output_throughput", new * (1 - drop), earlier).outcome == (
                "regression"
            )
        assert 0.72 <= hits / 2000 <= 0.88, (n, hits)


def test_the_band_never_mixes_installations(tmp_path: Path) -> None:
    """Interleaved runs of two versions: the newest run's band comes from one installation
    (its own once it has 3 earlier runs, else the one before), never from both."""
    versions = ["0.5.14", "0.5.17"] * 4
    ids = _series(tmp_path, [1000.0 + 10 * i for i in range(8)], versions)
    history = load_history(tmp_path, ids[-1])  # 0.5.17 with 3 earlier 0.5.17 runs
    assert history is not None and history.band_from == "0.5.17"
    assert {c.n_earlier for c in history.checks} == {3}
    early = load_history(tmp_path, ids[3])  # 0.5.17 with 1 earlier: the 0.5.14 runs'
    assert early is not None and early.band_from == "0.5.14"
    assert "earlier runs of 0.5.14" in alert_text(early) or "No band yet" in alert_text(early)
    # every point of the checked run is judged, the headline point first
    assert [c.point_label for c in history.checks][:1] == ["c=4"]
    assert {c.point_label for c in history.checks} == {"c=1", "c=4"}


def test_the_version_demos_history_reads_the_change_as_its_experiment() -> None:
    """The shipped SGLang 0.5.14 → 0.5.17 demo: History quotes the experiment's own card
    (same rows, intervals and words as the Experiment page), its band comes from one
    installation only, and it says what drop that band could catch."""
    import sys

    from core.analysis.card import experiment_story
    from core.experiments.design import load_experiment
    from core.settings import DEMO_DIR, Settings
    from core.views.history import history_verdict

    settings = Settings(
        data_dir=DEMO_DIR, sglang_python=sys.executable, transformers_python=sys.executable
    )
    record = load_experiment(settings, "exp-20261202-033636-ec50")
    if record is None:
        pytest.skip("the version demo is not shipped")
    story = experiment_story(settings, record)
    history = load_history(settings.runs_dir, record.run_ids[-1])
    assert history is not None
    lines = history_verdict(history, settings)
    assert lines[0].startswith("The version change (install=sglang-0.5.17 vs install=sglang")
    for row in story.card:
        if row.metric in HISTORY_METRICS and row.concurrency is not None:
            assert f"{row.name} {row.where} {row.change_text()}, {row.word_text()}" in lines[0]
    c16 = next(r for r in story.card if r.metric == "output_throughput" and r.concurrency == 16)
    assert c16.verdict == "worse alone" and "-30.7%" in lines[0]
    assert history.band_from in {"sglang-0.5.14", "sglang-0.5.17"}
    assert "Regression in" not in " ".join(lines)  # neither page claims one
    assert lines[-1].startswith("With these ") and "4 times in 5" in lines[-1]


def test_a_shape_runs_series_is_named_by_its_shape_not_the_default_model() -> None:
    """A shape run's spec keeps the default model's name beside ``shape``: the series says
    the shape (core.shapes.model_label), as the Runs table does."""
    from core.settings import DEMO_DIR

    run = DEMO_DIR / "runs" / "20261206-025848-ce3e3a"  # the team change, graphs on, H200
    if not run.is_dir():
        pytest.skip("the team-change demo is not shipped")
    history = load_history(DEMO_DIR / "runs", run.name)
    assert history is not None
    assert history.config.startswith("sglang · qwen3-30b-a3b (dummy weights) · cuda:0")
    assert "smollm2" not in history.config
