"""The Launch page through Streamlit's AppTest: one-pass validation beside each field,
nothing queued while anything is wrong, the estimate before queuing."""

from __future__ import annotations

from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AppTest:
    data = tmp_path / "data"
    data.mkdir()
    (data / ".demo-installed").write_text("")  # an empty data folder: no demo runs
    (tmp_path / "models").mkdir()
    monkeypatch.setenv("SERVELAB_DATA_DIR", str(data))
    monkeypatch.setenv("SERVELAB_MODEL_ROOTS", str(tmp_path / "models"))
    monkeypatch.setenv("SERVELAB_WORKER", "off")  # queue runs but start none
    st.cache_resource.clear()
    app = AppTest.from_file(str(REPO / "app.py"), default_timeout=120)
    app.run()
    app.switch_page("pages/launch.py").run()
    assert not app.exception, app.exception
    if any("transformers (unavailable" in o for o in app.selectbox(key="engine").options):
        pytest.skip("transformers serve is not installed here")
    return app


def _empty(folder: Path) -> bool:
    return not folder.exists() or not any(folder.iterdir())


def test_unknown_flag_negative_number_and_bad_model_path_three_errors_nothing_queued(
    app: AppTest, tmp_path: Path
) -> None:
    app.text_input(key="extra_args").set_value("--foo")
    app.text_input(key="num_prompts").set_value("-3")
    app.text_input(key="model").set_value("/etc/servelab-model")
    app.button(key="submit_launch").click().run()
    assert not app.exception, app.exception
    errors = [e.value for e in app.error]  # in page order
    field_errors = errors[:-1]
    assert len(field_errors) == 3, errors
    assert "outside the allowed model folders" in field_errors[0]  # beside Model (column 1)
    assert "--foo is not an option of transformers" in field_errors[1]  # beside the flags
    assert "at least 1 (you gave -3)" in field_errors[2]  # beside Prompts per point
    assert "3 fields need attention" in errors[-1] and "Nothing was queued" in errors[-1]
    assert not any("Input should" in e for e in errors)
    assert _empty(tmp_path / "data" / "runs") and _empty(tmp_path / "data" / "experiments")


def test_check_shows_the_estimate_and_queues_nothing_then_queue_runs_three_trials(
    app: AppTest, tmp_path: Path
) -> None:
    assert app.selectbox(key="preset").value == "Continuous batching A/B"
    assert app.text_input(key="trials").value == "3"
    assert any(c.value.startswith("Estimate: 6 runs (2 arms × 3 trials)") for c in app.caption)
    # next to it, what 3 trials can resolve here: an empty data folder has shown no noise
    assert any(
        "Resolvable effect: unknown" in c.value and "A/A noise check" in c.value
        for c in app.caption
    )
    app.button(key="check_launch").click().run()
    assert not app.exception, app.exception
    assert not app.error, [e.value for e in app.error]
    assert any("nothing queued yet" in s.value for s in app.success)
    runs = tmp_path / "data" / "runs"
    assert _empty(runs)
    app.button(key="submit_launch").click().run()
    assert not app.exception, app.exception
    assert len(list(runs.iterdir())) == 6


def test_the_form_states_what_the_trials_resolve_from_this_hosts_aa(
    app: AppTest, tmp_path: Path
) -> None:
    from core.experiments.design import parse_experiment, save_experiment
    from core.launch.forms import FORM_DEFAULTS
    from core.launch.host import detect_host
    from core.run.machine import cpu_model
    from core.settings import load_settings
    from tests.runs_by_hand import P1, make_run, run_facts

    settings = load_settings()
    # an A/A of the form's engine and model on this very machine (its noise is keyed so)
    server = {"engine": FORM_DEFAULTS["engine"], "model": FORM_DEFAULTS["model"]}
    here = run_facts(
        gpus=[{"name": g.partition(": ")[2]} for g in detect_host(settings).gpus],
        cpu_model=cpu_model(),
        engine=server["engine"],
        engine_version=None,
    )
    exp = parse_experiment(
        {
            "name": "aa",
            "kind": "aa",
            "base": {"server": server},
            "arms": [{"label": "A1"}, {"label": "A2"}],
        }
    )
    runs = []
    for arm, values in {"A1": [100.0, 104.0, 97.0], "A2": [102.0, 99.0, 99.0]}.items():
        for trial, v in enumerate(values):
            make_run(
                settings.runs_dir,
                f"aa-{arm}-{trial}",
                points=[(P1, {"output_throughput": v}, "d")],
                facts=here,
            )
            runs.append((arm, trial, f"aa-{arm}-{trial}"))
    save_experiment(settings, exp, runs, "exp-aa")
    app.text_input(key="trials").set_value("5").run()
    assert not app.exception, app.exception
    (power,) = [c.value for c in app.caption if "Resolvable effect" in c.value]
    assert "from A/A exp-aa" in power
    assert "with 5 trials: about +" in power and "← this plan" in power


def test_workload_fields_preview_and_kv_fill_beside_their_fields(
    app: AppTest, tmp_path: Path, tiny_tokenizer_dir: Path
) -> None:
    """The preview shows what the first point will send (core's preview: requests, the
    prefix-reuse share, a length histogram); a bad workload value or kv_fill on an engine
    without a KV pool gets its message beside its field, and nothing is queued."""
    import shutil

    model = tmp_path / "models" / "tiny"
    shutil.copytree(tiny_tokenizer_dir, model)
    app.text_input(key="model").set_value(str(model))
    app.selectbox(key="workload_kind").set_value("shared_prefix")
    app.text_input(key="groups").set_value("2")
    app.text_input(key="prompts_per_group").set_value("3")
    app.text_input(key="system_prompt_len").set_value("40")
    app.text_input(key="question_len").set_value("8")
    app.button(key="preview_workload").click().run()
    assert not app.exception, app.exception
    assert not app.error, [e.value for e in app.error]
    assert app.subheader[-1].value == "Workload preview"
    rows = app.dataframe[-1].value
    assert len(rows) == 6 and set(rows["input_tokens"]) == {48}
    # 4 of the 6 requests repeat their group's 40-token system prompt (at least)
    shared = int(rows["shared_prefix_tokens"].sum())
    assert shared >= 4 * 40
    assert app.metric[0].value == f"{shared / (6 * 48):.1%}"
    assert _empty(tmp_path / "data" / "runs")

    app.selectbox(key="workload_kind").set_value("uniform")
    app.text_input(key="range_ratio").set_value("half")
    app.text_input(key="kv_fill").set_value("1.2")
    app.button(key="submit_launch").click().run()
    assert not app.exception, app.exception
    errors = [e.value for e in app.error]
    assert any("'half' is not a number" in e for e in errors), errors
    app.text_input(key="range_ratio").set_value("0.5")
    app.button(key="submit_launch").click().run()
    errors = [e.value for e in app.error]
    assert any("kv_fill sizes the load from the server's KV pool" in e for e in errors), errors
    assert any("Nothing was queued" in e for e in errors)
    assert _empty(tmp_path / "data" / "runs") and _empty(tmp_path / "data" / "experiments")


def test_a_point_that_cannot_measure_its_load_is_warned_before_queueing_not_refused(
    app: AppTest, tmp_path: Path
) -> None:
    """1 prompt at concurrency 4: the check says so beside the prompts field (amber, not an
    error) with the run's own words, gives a rough estimate on this first launch, and the
    queue confirmation counts the runs once."""
    app.selectbox(key="preset").set_value("Single run")
    app.text_input(key="concurrency").set_value("4")
    app.text_input(key="num_prompts").set_value("1")
    app.button(key="check_launch").click().run()
    assert not app.exception, app.exception
    assert not app.error, [e.value for e in app.error]
    warned = [w.value for w in app.warning]
    assert any("c=4: concurrency 4 never reached, only 1 request" in w for w in warned), warned
    (told,) = [w for w in warned if "nothing queued yet" in w]
    assert "cannot measure what they claim" in told and not app.success
    assert "Rough estimate from the plan: about" in told and "ASSUMING" in told
    assert _empty(tmp_path / "data" / "runs")
    app.button(key="submit_launch").click().run()  # a warning never blocks
    assert not app.exception, app.exception
    assert len(list((tmp_path / "data" / "runs").iterdir())) == 1
    queued = [s.value for s in app.success if s.value.startswith("Queued")]
    assert len(queued) == 1 and queued[0].startswith("Queued 1 run."), queued


def test_an_experiment_is_confirmed_once_with_its_count(app: AppTest) -> None:
    app.text_input(key="trials").set_value("3")
    app.button(key="submit_launch").click().run()
    assert not app.exception, app.exception
    queued = [s.value for s in app.success if s.value.startswith("Queued")]
    assert len(queued) == 1, queued  # not "6 run(s)" and then "Queued 2 run(s)"
    assert "Queued experiment exp-" in queued[0] and ": 6 runs (2 arms × 3 trials)" in queued[0]


def _launch_form(app: AppTest) -> object:
    blocks = [b for b in app.main.children.values() if hasattr(b.proto, "form")]
    return next(b for b in blocks if b.proto.form.form_id == "launch")


def test_enter_submits_nothing_and_a_grid_problem_is_shown_open_beside_its_field(
    app: AppTest, tmp_path: Path
) -> None:
    """Issue 24 item 3: Enter ran the hidden Grid / sweep check, whose message sat in a
    closed section; "Press Enter to submit form" was drawn over narrow number fields."""
    form = _launch_form(app)
    assert form.proto.form.enter_to_submit is False  # type: ignore[attr-defined]
    (grid,) = [e for e in app.expander if e.label.startswith("Grid / sweep")]
    assert grid.proto.expanded is False  # nothing chosen yet: closed
    app.button(key="check_grid").click().run()  # no knob chosen
    assert not app.exception, app.exception
    (grid,) = [e for e in app.expander if e.label.startswith("Grid / sweep")]
    assert grid.proto.expanded is True  # open: its message is beside the field
    assert any("at least one knob" in e.value for e in grid.error)
    summary = app.error[-1].value
    assert summary.startswith("Nothing was queued: 1 field needs attention")
    assert "Grid / sweep, Knobs: pick at least one knob" in summary
    assert _empty(tmp_path / "data" / "runs")
