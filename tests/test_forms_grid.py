"""The launch form's Grid / sweep mode: knob rows → a grid experiment, every problem beside
its row, the run count and estimate before anything is queued."""

from __future__ import annotations

from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from core.experiments.design import list_experiments
from core.launch.grid import grid_estimate, grid_from_form, parse_values
from core.settings import Settings
from tests.test_forms import CPU_HOST, GPU_HOST, form
from tests.test_forms import settings as settings  # the autouse fixture: model roots

REPO = Path(__file__).resolve().parent.parent


def test_values_are_typed_as_a_person_types_them() -> None:
    assert parse_values("false, true") == [False, True]
    assert parse_values("0.85,0.92") == [0.85, 0.92]
    assert parse_values("8, 32 ,128,") == [8, 32, 128]
    assert parse_values("fa3, triton, default") == ["fa3", "triton", None]


def test_a_two_by_two_over_the_form_configuration(settings: Settings) -> None:
    exp, errors = grid_from_form(
        form(concurrency="1,4", trials=2),
        [
            ("server.continuous_batching", "true, false"),
            ("server.dtype", "float32, bfloat16"),
            ("", ""),
        ],
        "auto",
        CPU_HOST,
        settings=settings,
    )
    assert errors == {} and exp is not None
    assert len(exp.arms) == 4 and exp.trials == 2
    assert [p.concurrency for p in exp.base.plan.points] == [1, 4]  # the form's plan
    base = next(a for a in exp.arms if a.label == exp.baseline_arm)
    assert base.changes == {"server.continuous_batching": True, "server.dtype": "float32"}
    assert grid_estimate(exp, [60.0, 80.0, 100.0]).startswith(
        "8 runs (4 arms, factorial × 2 trials): about 11 min"
    )
    assert "No finished run" in grid_estimate(exp, [])


def test_problems_are_reported_beside_their_rows(settings: Settings) -> None:
    _, errors = grid_from_form(
        form(),
        [("server.dtype", "float32"), ("server.dtype", "a, b"), ("", "")],
        "auto",
        CPU_HOST,
        settings=settings,
    )
    assert "two or more values" in errors["grid_values_0"]
    assert "already in row 1" in errors["grid_knob_1"]
    _, errors = grid_from_form(form(), [("", "")], "auto", CPU_HOST, settings=settings)
    assert "at least one knob" in errors["grid"]
    # the grid's own rules, in plain words beside the row or the design (not pydantic's footer)
    _, errors = grid_from_form(
        form(), [("server.dtype", "float32, float32")], "auto", CPU_HOST, settings=settings
    )
    assert errors == {"grid_values_0": "server.dtype: the values must be distinct"}
    _, errors = grid_from_form(
        form(), [("server.dtype", "float32, bfloat16")], "random", CPU_HOST, settings=settings
    )
    assert list(errors) == ["grid_design"] and "use one of" in errors["grid_design"]
    _, errors = grid_from_form(
        form(), [("server.dtype", "float32, fp7")], "auto", CPU_HOST, settings=settings
    )
    assert "fp7" in errors["grid_values_0"]
    # the engine's own rule: CUDA graphs need a CUDA device, so a CPU host refuses the arm
    _, errors = grid_from_form(
        form(), [("server.cuda_graphs", "default, true")], "auto", CPU_HOST, settings=settings
    )
    assert "CUDA" in errors["grid_values_0"]
    # and a bad field elsewhere in the form is reported in the same pass
    _, errors = grid_from_form(
        form(num_prompts=0),
        [("server.dtype", "float32, bfloat16")],
        "auto",
        CPU_HOST,
        settings=settings,
    )
    assert "num_prompts" in errors


def test_a_big_grid_goes_one_at_a_time_or_is_refused_as_a_factorial(settings: Settings) -> None:
    rows = [
        ("server.cb_max_memory_percent", "0.1, 0.2, 0.3, 0.4"),
        ("server.dtype", "float32, bfloat16, float16"),
        ("server.compile", "false, true"),
    ]
    exp, errors = grid_from_form(form(), rows, "auto", GPU_HOST, settings=settings)
    assert errors == {} and exp is not None and exp.grid is not None
    assert exp.grid.resolved_design == "one-at-a-time" and len(exp.arms) == 8
    _, errors = grid_from_form(form(), rows, "factorial", GPU_HOST, settings=settings)
    assert "24 arms" in errors["grid_design"]


def test_launch_page_checks_then_queues_the_grid(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    (settings.data_dir).mkdir(parents=True, exist_ok=True)
    (settings.data_dir / ".demo-installed").write_text("")
    monkeypatch.setenv("SERVELAB_WORKER", "off")
    st.cache_resource.clear()
    app = AppTest.from_file(str(REPO / "app.py"), default_timeout=120)
    app.run()
    app.switch_page("pages/launch.py").run()
    assert not app.exception, app.exception
    app.selectbox(key="grid_knob_0").set_value("server.dtype")
    app.text_input(key="grid_values_0").set_value("float32, bfloat16")
    app.text_input(key="trials").set_value("2")
    app.button(key="check_grid").click().run()
    assert not app.exception, app.exception
    assert list_experiments(settings) == []  # checking queues nothing
    assert any("4 runs (2 arms, factorial × 2 trials)" in c.value for c in app.caption)
    app.button(key="submit_grid").click().run()
    assert not app.exception, app.exception
    (record,) = list_experiments(settings)
    assert [a["changes"] for a in record.spec["arms"]] == [
        {"server.dtype": "float32"},
        {"server.dtype": "bfloat16"},
    ]
    assert len(record.runs) == 4
