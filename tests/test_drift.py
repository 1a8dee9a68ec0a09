"""core.analysis.drift on synthetic data (seeded): a drift of known size is found with
about its size, within a point and across trials; a drift-free series is flagged no more
than the nominal 5 %; a closing baseline run bounds the drift and never enters the
estimator; the story's "Read with care" line names a drift planted in run folders."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from bench import sim_noise
from core.analysis.card import experiment_story
from core.analysis.drift import (
    DRIFT_ALPHA,
    SLICES,
    closing_shift,
    common_trend,
    drift_findings,
    holm,
    slice_trend,
    steady_slices,
)
from core.analysis.trials import closing_runs, experiment_runs
from core.experiments.design import (
    CLOSING_TAG,
    expand,
    list_experiments,
    parse_experiment,
    save_experiment,
)
from core.experiments.records import ExperimentRecord
from core.records import RequestRecord
from core.settings import Settings
from tests.runs_by_hand import P1, make_run

REPO = Path(__file__).resolve().parent.parent
SIMULATIONS = 400
# the nominal rate plus two binomial standard errors over SIMULATIONS
MAX_FALSE_RATE = DRIFT_ALPHA + 2 * math.sqrt(DRIFT_ALPHA * (1 - DRIFT_ALPHA) / SIMULATIONS)


def _chunks(rng: np.random.Generator, drift: float, n: int = 4000) -> np.ndarray:
    """Chunk arrival times over a 10 s window whose rate goes linearly from 1 to
    1 + drift (thinning a uniform sample)."""
    t = rng.uniform(0.0, 10.0, n)
    rate = 1 + drift * t / 10.0
    return np.sort(t[rng.uniform(0, max(1.0, 1 + drift), n) < rate])


def _slices(chunks: np.ndarray) -> list[float]:
    return steady_slices(chunks, np.full(len(chunks), 2.0), 0.0, 10.0)


def test_a_drift_within_the_point_is_found_with_about_its_size() -> None:
    rng = np.random.default_rng(231)
    slices = _slices(_chunks(rng, -0.25))
    assert len(slices) == SLICES
    trend = slice_trend(slices)
    # the first and last slices are centred at 5 % and 95 % of the window
    expected = (1 - 0.25 * 0.95) / (1 - 0.25 * 0.05) - 1
    assert trend is not None and trend.significant
    assert trend.change == pytest.approx(expected, abs=0.06)


def test_a_drift_free_point_is_flagged_at_most_at_the_nominal_rate() -> None:
    rng = np.random.default_rng(232)
    flagged = 0
    for _ in range(SIMULATIONS):
        trend = slice_trend(_slices(_chunks(rng, 0.0)))
        flagged += trend is not None and trend.significant
    assert flagged / SIMULATIONS <= MAX_FALSE_RATE


def test_a_stalled_slice_does_not_make_a_trend() -> None:
    """A slice with no chunk (0 tok/s, seen on the H200) is one rank among ten."""
    trend = slice_trend([100.0, 98, 103, 0, 101, 99, 102, 100, 97, 101])
    assert trend is not None and not trend.significant and abs(trend.change) < 0.05
    assert steady_slices(np.arange(50.0), np.ones(50), 0.0, 50.0) == []  # too few chunks


def _trials(
    rng: np.random.Generator, drift: float, effect: float = 0.10, trials: int = 6
) -> list[tuple[str, float, float]]:
    """Two arms interleaved (order shuffled per trial), one run per 2 minutes; every run's
    value is multiplied by the host's drift (log-linear from 1 to 1 + drift), B's by 1 +
    effect, and by noise of 3 %."""
    order = [arm for _ in range(trials) for arm in rng.permutation(["A", "B"])]
    span = 2.0 * (len(order) - 1)
    out = []
    for i, arm in enumerate(order):
        t = 2.0 * i
        host = math.exp(math.log1p(drift) * t / span)
        value = 1000 * host * (1 + effect if arm == "B" else 1) * math.exp(rng.normal(0, 0.03))
        out.append((str(arm), t, value))
    return out


def test_a_drift_across_trials_is_the_hosts_not_the_knobs() -> None:
    trend = common_trend(_trials(np.random.default_rng(233), -0.22))
    assert trend is not None and trend.significant and trend.n == 12
    assert trend.change == pytest.approx(-0.22, abs=0.06)


def test_drift_free_trials_are_flagged_at_most_at_the_nominal_rate() -> None:
    """B is 10 % faster in every trial: an arm effect, never a common trend."""
    rng = np.random.default_rng(234)
    flagged = 0
    for _ in range(SIMULATIONS):
        trend = common_trend(_trials(rng, 0.0))
        flagged += trend is not None and trend.significant
    assert flagged / SIMULATIONS <= MAX_FALSE_RATE


T0 = datetime(2026, 12, 1, 4, 0, tzinfo=UTC)


def _experiment(
    settings: Settings,
    values: list[tuple[str, int, float]],
    *,
    closing: float | None = None,
) -> ExperimentRecord:
    """An A/B experiment from run folders, in the order given, one run per 2 minutes;
    ``closing``: the baseline arm A once more at the end, with that throughput."""
    exp = parse_experiment(
        {
            "name": "drifting",
            "trials": 4,
            "baseline": "A",
            "closing_baseline": closing is not None,
            "arms": [
                {"label": "A", "changes": {"server.cuda_graphs": False}},
                {"label": "B", "changes": {"server.cuda_graphs": True}},
            ],
        }
    )
    rows = [*values, *([("A", 4, closing)] if closing is not None else [])]
    runs = []
    for i, (arm, trial, v) in enumerate(rows):
        rid = f"run-{i:02d}-{arm}"
        when = (T0 + timedelta(minutes=2 * i)).isoformat()
        make_run(
            settings.runs_dir, rid, points=[(P1, {"output_throughput": v}, "d")], started_at=when
        )
        runs.append((arm, trial, rid))
    save_experiment(settings, exp, runs, "exp-drifting")
    (record,) = list_experiments(settings)
    return record


# Interleaved A B / B A ...; every run 25 % slower at the end than at the start (log-linear
# in time), B 20 % above A, and a little noise so the test has residuals.
ORDER = [("A", 0), ("B", 0), ("B", 1), ("A", 1), ("A", 2), ("B", 2), ("B", 3), ("A", 3)]
JITTER = [1.004, 0.997, 1.002, 0.998, 1.003, 0.996, 1.001, 0.999]


def _drifting(drift: float) -> list[tuple[str, int, float]]:
    return [
        (arm, trial, 100 * (1.2 if arm == "B" else 1) * (1 + drift) ** (i / 7) * JITTER[i])
        for i, (arm, trial) in enumerate(ORDER)
    ]


def test_the_read_with_care_line_names_a_planted_drift_with_its_size(
    settings: Settings,
) -> None:
    record = _experiment(settings, _drifting(-0.25))
    story = experiment_story(settings, record)
    care = story.verdict[-1]
    assert care.startswith("Read with care: ")
    assert "throughput of every arm fell 25.1% from the first to the last trial" in care
    assert any("host drifted" in c.sentence() for c in story.caveats)  # the page's words
    # the paired estimator still reads B's 20 % (the blocks absorb the common trend)
    (row,) = [r for r in story.card if r.metric == "output_throughput"]
    assert row.change == pytest.approx(0.2, abs=0.03)


def test_no_drift_no_line(settings: Settings) -> None:
    """The same experiment without the drift: the verdict is its one sentence on B's 20 %,
    with no "Read with care" line after it, and no drift caveat."""
    story = experiment_story(settings, _experiment(settings, _drifting(0.0)))
    # its one sentence on B's 20 % (beside it only the family's line), no "Read with care"
    assert not any(v.startswith("Read with care") for v in story.verdict), story.verdict
    (verdict,) = [v for v in story.verdict if not v.startswith("Confirmatory:")]
    assert verdict.startswith("drifting: +19.8% output throughput at concurrency 1"), verdict
    assert not any("drift" in c.sentence() for c in story.caveats)


def test_the_closing_baseline_run_bounds_drift_and_is_no_trial(settings: Settings) -> None:
    values = _drifting(0.0)
    record = _experiment(settings, values, closing=85.0)
    assert [r.closing for r in record.runs] == [False] * 8 + [True]
    (last,) = closing_runs(settings, record)
    assert last.arm == "A" and last.trial == 4
    assert all(not r.view.run_id.startswith("run-08") for r in experiment_runs(settings, record))
    story = experiment_story(settings, record)
    assert (
        "the baseline arm re-run after the last trial fell 15.1% against its 4 trials "
        "(beyond their own spread, p=" in story.verdict[-1]
    )
    # the estimator is the same as without the closing run: it never saw it
    plain = ExperimentRecord.model_validate(
        {**record.as_json(), "runs": [r.model_dump() for r in record.runs if not r.closing]}
    )
    card = [r for r in story.card if r.metric == "output_throughput"]
    plain_card = [
        r for r in experiment_story(settings, plain).card if r.metric == "output_throughput"
    ]
    assert [(r.change, r.low, r.high, r.n_base) for r in card] == [
        (r.change, r.low, r.high, r.n_base) for r in plain_card
    ]
    assert card[0].n_base == 4


def test_expand_runs_the_closing_baseline_last_tagged_as_no_trial() -> None:
    exp = parse_experiment(
        {
            "name": "x",
            "trials": 3,
            "closing_baseline": True,
            "arms": [
                {"label": "on", "changes": {"server.cuda_graphs": True}},
                {"label": "off", "changes": {"server.cuda_graphs": False}},
            ],
        }
    )
    runs = expand(exp, "exp-x")
    assert len(runs) == 7
    arm, trial, spec = runs[-1]
    assert (arm, trial) == ("off", 3)  # the baseline (the control: graphs off), after trial 2
    assert CLOSING_TAG in spec.tags and "trial:3" in spec.tags and "trial:0" not in spec.tags
    assert spec.server.cuda_graphs is False
    assert len(expand(exp.model_copy(update={"closing_baseline": False}), "exp-x")) == 6


def test_a_grid_plan_keeps_its_closing_baseline() -> None:
    exp = parse_experiment(
        {
            "name": "g",
            "trials": 3,
            "closing_baseline": True,
            "grid": {"knobs": {"server.cuda_graphs": [False, True]}},
        }
    )
    assert exp.closing_baseline and expand(exp, "exp-g")[-1][:2] == (exp.baseline_arm, 3)


def test_a_point_that_drifted_within_its_steady_window_is_named(settings: Settings) -> None:
    """Records whose chunks come 30 % less often at the end of the window than at its
    start (one token each), in every run: the line names the point and the runs."""
    rng = np.random.default_rng(235)
    records = []
    for i, t in enumerate(_chunks(rng, -0.3, n=20000)):
        records.append(
            RequestRecord(
                index=i,
                send_s=max(t - 0.01, 0.0),
                prompt_tokens=32,
                output_tokens_requested=1,
                chunk_s=[float(t)],
                end_s=float(t),
                ok=True,
                output_tokens_server=1,
            )
        )
    steady = {"output_throughput": 100.0, "steady_start_s": 0.0, "steady_end_s": 10.0}
    runs = []
    for i, (arm, trial) in enumerate(ORDER[:6]):
        rid = f"run-{i:02d}-{arm}"
        make_run(settings.runs_dir, rid, points=[(P1, steady, "d")], records=records)
        runs.append((arm, trial, rid))
    exp = parse_experiment({"name": "w", "trials": 3, "arms": [{"label": "A"}, {"label": "B"}]})
    save_experiment(settings, exp, runs, "exp-within")
    (record,) = list_experiments(settings)
    care = experiment_story(settings, record).verdict[-1]
    assert "output throughput trended within the steady window (worst: -2" in care
    assert "all 3 runs of A, all 3 runs of B" in care


def test_every_point_tested_keeps_the_family_at_the_nominal_rate() -> None:
    """Seven drift-free points per experiment (the CPU demo's plan): per point 5 % would
    flag a third of clean experiments; after Holm at most 5 % of them."""
    assert holm([0.01, 0.04, None, 0.03, 0.005]) == pytest.approx([0.03, 0.06, None, 0.06, 0.02])
    rng = np.random.default_rng(236)
    flagged = 0
    for _ in range(SIMULATIONS):
        p = [common_trend(_trials(rng, 0.0, trials=3)) for _ in range(7)]
        flagged += any(x is not None and x < DRIFT_ALPHA for x in holm([t.p_value for t in p if t]))
    assert flagged / SIMULATIONS <= MAX_FALSE_RATE


def test_the_experiment_page_and_show_say_the_drift(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page renders the story: its "Read with care" box and verdict carry the drift,
    and ``experiment --show`` prints the same line."""
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    from core.views.report import format_experiment

    record = _experiment(settings, _drifting(-0.25))
    (settings.data_dir / ".demo-installed").write_text("")  # no demo runs beside it
    monkeypatch.setenv("SERVELAB_DATA_DIR", str(settings.data_dir))
    monkeypatch.setenv("SERVELAB_WORKER", "off")
    st.cache_resource.clear()
    app = AppTest.from_file(str(REPO / "app.py"), default_timeout=120)
    app.query_params["experiment"] = record.experiment_id
    app.run()
    app.switch_page("pages/experiment.py").run()
    assert not app.exception, app.exception
    said = "throughput of every arm fell 25.1% from the first to the last trial"
    assert any(said in w.value and "host drifted" in w.value for w in app.warning)
    assert any(said in m.value for m in app.markdown)
    assert said in format_experiment(settings, record)


def test_correlated_drift_free_trials_read_drift_at_most_about_5_percent() -> None:
    """Seeded experiments through drift_findings (bench/sim_noise.py): runs of a trial
    correlated 0.5 (the host's state), CV 10 %, 5 trials and a closing baseline. "Drift"
    (either test) in at most 5 % (bound checked with the binomial room of 300 draws);
    a −20 % linear drift at CV 3 % is read in most of them."""
    rng = np.random.default_rng(31)
    free = sum(
        bool(drift_findings(*sim_noise.experiment(rng, 5, 0.10, 0.0), "A", within=False))
        for _ in range(300)
    )
    assert free / 300 <= 0.075
    drifting = sum(
        any(
            d.kind == "across trials"
            for d in drift_findings(*sim_noise.experiment(rng, 5, 0.03, -0.2), "A", within=False)
        )
        for _ in range(100)
    )
    assert drifting >= 90


def test_a_closing_run_inside_its_trials_spread_is_no_drift() -> None:
    """5 % below the baseline's mean is no drift when the baseline's own trials spread
    ±10 %; the same 5 % from trials that agree within 0.5 % is."""
    assert closing_shift([100.0, 110.0, 90.0, 105.0], 95.0).p_value > 0.05  # type: ignore[operator]
    tight = closing_shift([100.0, 100.5, 99.5, 100.2], 95.0)
    assert tight is not None and tight.p_value is not None and tight.p_value < 0.01
    assert tight.change == pytest.approx(95.0 / 100.05 - 1, abs=1e-3)
