"""Explain a difference: the factorial over exactly the knobs two runs differ in, from the
CLI and from the Compare page's button; and a 2x2 run end to end through the CLI on the fake
SGLang, whose attribution names the knob that made the difference."""

from __future__ import annotations

import io
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from core import cli
from core.analysis.attribution import attribute, decompose, design_of, verdict_sentence
from core.analysis.runs import load_run
from core.analysis.trials import experiment_runs
from core.config import RunSpec
from core.errors import ConfigError
from core.experiments.design import KnobGrid, grid_experiment, list_experiments, save_experiment
from core.interop.export_html import html_report
from core.interop.export_tables import table_files
from core.interop.selection import select
from core.launch.explain import explain_plan, explanation_experiment
from core.portal.demo import install_demo
from core.run.gpu import nvml_available
from core.run_folder import RunFolder, RunStatus
from core.settings import DEMO_DIR, Settings
from tests.runs_by_hand import make_run, run_facts

REPO = Path(__file__).resolve().parent.parent
GRAPHS, MEM = "server.cuda_graphs", "server.mem_fraction_static"


def _pair(
    runs: Path, gpu_b: str = "NVIDIA H200", model: str = "/models/qwen", **b: object
) -> tuple[RunFolder, RunFolder]:
    common = {"engine": "sglang", "model": model, "attention_backend": "fa3"}
    a = make_run(
        runs,
        "20990101-000000-aaaa",
        server={**common, "cuda_graphs": False, "mem_fraction_static": 0.85},
    )
    gpus = [{"index": 0, "name": gpu_b, "total_mib": 143771}]
    other = make_run(
        runs,
        "20990101-000000-bbbb",
        facts=run_facts(gpus=gpus),
        server={**common, "cuda_graphs": True, "mem_fraction_static": 0.92, **b},
    )
    return a, other


def _cells(spec: dict[str, object]) -> set[tuple[object, ...]]:
    return {tuple(arm["changes"][k] for k in (GRAPHS, MEM)) for arm in spec["arms"]}  # type: ignore[index, union-attr]


def test_the_grid_is_exactly_the_differing_knobs_with_everything_else_from_a(
    tmp_path: Path,
) -> None:
    a, b = _pair(tmp_path, gpu_b="NVIDIA A100")
    exp, plan = explanation_experiment(load_run(a), load_run(b), trials=2)
    assert plan.knobs == {GRAPHS: (False, True), MEM: (0.85, 0.92)}
    assert "facts.gpu" in plan.not_explainable  # the host differs: no knob explains it
    assert len(exp.arms) == 4 and exp.trials == 2 and exp.kind == "explain"
    spec = exp.model_dump(mode="json")
    assert _cells(spec) == {(False, 0.85), (False, 0.92), (True, 0.85), (True, 0.92)}
    base_arm = next(arm for arm in exp.arms if arm.label == exp.baseline_arm)
    assert base_arm.changes == {GRAPHS: False, MEM: 0.85}
    assert exp.grid is not None and exp.grid.after_config == {GRAPHS: True, MEM: 0.92}
    assert exp.base.server.model == "/models/qwen" and exp.base.server.attention_backend == "fa3"
    one, _ = explanation_experiment(load_run(a), load_run(b), design="one-at-a-time")
    assert len(one.arms) == 4  # baseline, each knob alone, and B's configuration


def test_nothing_or_too_much_to_explain_is_refused_naming_the_run(tmp_path: Path) -> None:
    a = make_run(tmp_path, "20990101-000000-aaaa", server={"engine": "sglang"})
    same = make_run(
        tmp_path,
        "20990101-000000-cccc",
        server={"engine": "sglang"},
        facts=run_facts(gpus=[{"index": 0, "name": "NVIDIA A100"}]),
    )
    with pytest.raises(ConfigError) as info:
        explanation_experiment(load_run(a), load_run(same))
    assert info.value.field == "RUN_B" and "facts.gpu" in info.value.message
    many = make_run(
        tmp_path,
        "20990101-000000-dddd",
        server={
            "engine": "sglang",
            "cuda_graphs": True,
            "mem_fraction_static": 0.9,
            "tp_size": 2,
            "cuda_graph_max_bs": 8,
            "dtype": "float16",
        },
    )
    with pytest.raises(ConfigError) as info:
        explanation_experiment(load_run(a), load_run(many))
    assert "5 knobs differ" in info.value.message
    assert not explain_plan(load_run(a), load_run(same)).explainable


def test_cli_explain_queues_the_factorial(
    tmp_path: Path,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    fake_sglang: Path,  # SGLang installed here: the runs can run (device auto: no GPU asked)
) -> None:
    monkeypatch.setenv("SERVELAB_DATA_DIR", str(settings.data_dir))
    model = settings.models_dir / "qwen"  # a local run's model must be here (the gate)
    model.mkdir(parents=True)
    a, b = _pair(settings.runs_dir, model=str(model))
    assert cli.main(["explain", a.run_id, b.run_id, "--trials", "2"]) == 0
    out = capsys.readouterr().out
    # what it takes, said before it is queued
    assert "8 runs (4 arms, factorial × 2 trials). No finished run of this engine" in out
    assert "queued: factorial over server.cuda_graphs False→True" in out
    (record,) = list_experiments(settings)
    assert _cells(record.spec) == {(False, 0.85), (False, 0.92), (True, 0.85), (True, 0.92)}
    assert len(record.runs) == 8
    for r in record.runs:
        assert RunFolder(settings.runs_dir / r.run_id).status()["state"] == "queued"
    assert cli.main(["explain", a.run_id, "20990101-000000-nope"]) == 2
    assert "RUN_B" in capsys.readouterr().err


def _compare_page(settings: Settings, monkeypatch: pytest.MonkeyPatch, *runs: RunFolder) -> AppTest:
    """The Compare page of ``runs`` (the first the baseline), rendered with the worker off
    (queue, start nothing)."""
    (settings.data_dir / ".demo-installed").write_text("")
    monkeypatch.setenv("SERVELAB_DATA_DIR", str(settings.data_dir))
    monkeypatch.setenv("SERVELAB_WORKER", "off")
    st.cache_resource.clear()
    app = AppTest.from_file(str(REPO / "app.py"), default_timeout=60)
    app.query_params["runs"] = ",".join(r.run_id for r in runs)
    app.run()
    app.switch_page("pages/compare.py").run()
    assert not app.exception, app.exception
    return app


def test_compare_page_button_queues_exactly_that_grid(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, fake_sglang: Path
) -> None:
    model = settings.models_dir / "qwen"  # a local run's model must be here (the gate)
    model.mkdir(parents=True)
    a, b = _pair(settings.runs_dir, model=str(model))
    app = _compare_page(settings, monkeypatch, a, b)
    key = f"explain-{a.run_id}-{b.run_id}"
    app.button(key=key).click().run()
    assert not app.exception, app.exception
    (record,) = list_experiments(settings)
    assert _cells(record.spec) == {(False, 0.85), (False, 0.92), (True, 0.85), (True, 0.92)}
    assert len(record.runs) == 12  # 4 arms x 3 trials
    assert any(record.experiment_id in s.value for s in app.success)


def test_typed_trials_out_of_range_or_not_whole_are_refused_naming_the_field(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, fake_sglang: Path
) -> None:
    """The Trials field is read like the Launch form's whole numbers: 80 or 1e9 is refused
    beside it (not clamped to 50, not read as another number) and nothing can be queued."""
    model = settings.models_dir / "qwen"
    model.mkdir(parents=True)
    a, b = _pair(settings.runs_dir, model=str(model))
    app = _compare_page(settings, monkeypatch, a, b)
    key = f"explain-{a.run_id}-{b.run_id}"
    for typed, shown in (
        ("80", "Trials: give between 1 and 50 trials, not 80"),
        ("0", "Trials: give between 1 and 50 trials, not 0"),
        ("1e9", "Trials: '1e9' is not a whole number: type digits only, e.g. 3"),
        ("2.5", "Trials: '2.5' is not a whole number: type digits only, e.g. 3"),
    ):
        app.text_input(key=f"{key}-trials").set_value(typed).run()
        assert not app.exception, app.exception
        assert shown in [e.value for e in app.error], typed
        assert not [x for x in app.button if x.key == key], typed  # nothing to press
    app.text_input(key=f"{key}-trials").set_value(" 2 ").run()
    app.button(key=key).click().run()
    (record,) = list_experiments(settings)
    assert len(record.runs) == 8  # 4 arms x 2 trials, as typed


DEMO_BEFORE, DEMO_AFTER = "20261201-000311-8d8413", "20261201-000511-eb5799"  # cuda:0 SGLang
DEMO_2X2 = "exp-20261201-041412-6b50"  # graphs × memory fraction on the same engine and model


def test_explain_on_a_host_without_sglang_refuses_queues_nothing_and_links_the_2x2(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The demo's one-restart pair asks for SGLang on cuda:0; this host has no SGLang (and,
    without NVML, no GPU): the block says so and what to do, the button is off, nothing is
    queued, and the 2x2 that already varies exactly these two knobs is one click away."""
    install_demo(settings)
    before = {p.name for p in (settings.data_dir / "experiments").iterdir()}
    monkeypatch.setenv("SERVELAB_DATA_DIR", str(settings.data_dir))
    monkeypatch.setenv("SERVELAB_WORKER", "off")
    st.cache_resource.clear()
    app = AppTest.from_file(str(REPO / "app.py"), default_timeout=60)
    app.query_params["runs"] = f"{DEMO_BEFORE},{DEMO_AFTER}"
    app.run()
    app.switch_page("pages/compare.py").run()
    assert not app.exception, app.exception
    errors = " ".join(e.value for e in app.error)
    assert "Cannot run on this host: `server.engine`: SGLang is not installed" in errors
    assert "Ray executor with a GPU node" in errors
    if not nvml_available():
        assert "`server.device`: server.device cuda:0 needs a GPU and this host has none" in (
            errors
        )
    estimate = " ".join(c.value for c in app.caption if c.value.startswith("Estimate:"))
    assert "12 runs (4 arms, factorial × 3 trials)" in estimate
    # the demo's 2x2 ran on this engine and model: its median run gives the GPU-minutes
    assert "GPU-minutes** (1 GPU per run)" in estimate
    button = app.button(key=f"explain-{DEMO_BEFORE}-{DEMO_AFTER}")
    assert button.disabled
    assert {p.name for p in (settings.data_dir / "experiments").iterdir()} == before
    assert not any(
        RunFolder(p).status_or_empty().state == "queued" for p in settings.runs_dir.iterdir()
    )
    link = next(
        p
        for p in app.get("page_link")
        if p.label == "Open the experiment that already answers this"
    )
    assert link.proto.page == "experiment"
    assert f"experiment={DEMO_2X2}" in link.proto.query_string


def test_cli_explain_refuses_what_this_host_cannot_run(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    install_demo(settings)
    monkeypatch.setenv("SERVELAB_DATA_DIR", str(settings.data_dir))
    assert cli.main(["explain", DEMO_BEFORE, DEMO_AFTER]) == 2
    out, err = capsys.readouterr()
    assert f"Experiment {DEMO_2X2} already varies exactly these knobs" in out
    assert "server.engine" in err and "SGLang is not installed" in err
    assert len(list_experiments(settings)) == len(list((DEMO_DIR / "experiments").iterdir()))


def test_compare_page_offers_no_button_for_a_one_knob_difference(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Beside the baseline, a run one knob away gets no "Explain this difference" (a plain
    A/B answers it) while a run two knobs away, on the same page, does."""
    server = {"engine": "sglang", "cuda_graphs": False, "mem_fraction_static": 0.85}
    a = make_run(settings.runs_dir, "20990101-000000-aaaa", server=server)
    one = make_run(
        settings.runs_dir, "20990101-000000-bbbb", server={**server, "cuda_graphs": True}
    )
    two = make_run(
        settings.runs_dir,
        "20990101-000000-cccc",
        server={**server, "cuda_graphs": True, "mem_fraction_static": 0.92},
    )
    app = _compare_page(settings, monkeypatch, a, one, two)
    keys = {str(x.key) for x in app.button if str(x.key).startswith("explain-")}
    assert keys == {f"explain-{a.run_id}-{two.run_id}"}


EXP_ID = "exp-20990101-000000-abcd"


def _finished_grid(settings: Settings) -> str:
    """A finished 2x2 x 3 trials (synthetic folders): graphs +9 %, memory fraction -21 %."""
    exp = grid_experiment(
        "explain",
        RunSpec.model_validate({"server": {"engine": "sglang", "model": "/m"}}),
        KnobGrid(knobs={GRAPHS: [False, True], MEM: [0.85, 0.92]}),
        trials=3,
        order_seed=3,
    )
    point = {
        "concurrency": 4,
        "request_rate": "inf",
        "input_len": 32,
        "output_len": 32,
        "num_prompts": 8,
    }
    runs = []
    for trial in range(3):
        for i, arm in enumerate(exp.arms):
            ch = arm.changes
            tput = 200 * math.exp(
                math.log(1.09) * ch[GRAPHS]
                + math.log(0.79) * (ch[MEM] == 0.92)
                + 0.004 * ((trial + i) % 3)
            )
            rid = f"20990101-00000{trial}-{i:04d}"
            make_run(
                settings.runs_dir,
                rid,
                server={
                    "engine": "sglang",
                    "cuda_graphs": ch[GRAPHS],
                    "mem_fraction_static": ch[MEM],
                },
                points=[(point, {"output_throughput": tput, "median_ttft_ms": 50.0}, "d")],
                intended=[GRAPHS, MEM],
            )  # as expand() declares the grid's knobs
            runs.append((arm.label, trial, rid))
    save_experiment(settings, exp, runs, EXP_ID)
    return EXP_ID


def test_experiment_page_shows_the_attribution_of_a_grid(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    exp_id = _finished_grid(settings)
    (settings.data_dir / ".demo-installed").write_text("")
    monkeypatch.setenv("SERVELAB_DATA_DIR", str(settings.data_dir))
    monkeypatch.setenv("SERVELAB_WORKER", "off")
    st.cache_resource.clear()
    app = AppTest.from_file(str(REPO / "app.py"), default_timeout=60)
    app.query_params["experiment"] = exp_id
    app.run()
    app.switch_page("pages/experiment.py").run()
    assert not app.exception, app.exception
    text = " ".join(m.value for m in app.markdown)
    assert "Of the " in text and "output throughput at concurrency 4" in text
    assert "cuda_graphs off→on +9" in text
    assert "mem_fraction_static 0.85→0.92 -21" in text
    assert "the parts add up" in text
    assert any("Attribution" in h.value for h in app.subheader)


def test_exports_carry_the_effects_table_and_the_verdict(settings: Settings) -> None:
    exp_id = _finished_grid(settings)
    sel = select(settings, [exp_id])
    files = table_files(sel, "csv")
    effects = pd.read_csv(io.BytesIO(files["effects.csv"]))
    graphs = effects[
        (effects["kind"] == "main")
        & effects["term"].str.startswith("cuda_graphs")
        & (effects["metric"] == "output_throughput")
    ]
    assert graphs["rel"].round(2).tolist() == [0.09]
    assert {"main", "interaction", "total"} <= set(effects["kind"])
    assert "effects.parquet" in table_files(sel, "parquet")
    html = html_report(sel)
    assert "Attribution (log-ratio effects" in html and "the parts add up" in html


def test_imported_runs_explain_on_what_both_state() -> None:
    """bench_serving output + server log, before and after: a field one import does not
    state is unknown, not a knob; A's stated settings are the base, defaults the rest."""
    from core.analysis.runs import RunView

    def imported(run_id: str, **server: object) -> RunView:
        return RunView(
            run_id,
            {
                "origin": "import",
                "import": {"source_file": "x.jsonl"},
                "server": {"engine": "sglang", "model": "/models/qwen", "tp_size": None, **server},
                "plan": {"points": [{"concurrency": 64, "input_len": 1024}]},
            },
            RunStatus(state="succeeded"),
            {},
            None,
            {},
            [],
        )

    a = imported("imp-aaaa", cuda_graphs=False, mem_fraction_static=0.85, attention_backend="fa3")
    b = imported("imp-bbbb", cuda_graphs=True, mem_fraction_static=0.92, attention_backend=None)
    exp, plan = explanation_experiment(a, b)
    assert plan.knobs == {GRAPHS: (False, True), MEM: (0.85, 0.92)}
    assert exp.base.server.attention_backend == "fa3" and exp.base.server.tp_size == 1
    assert exp.base.plan.points[0].concurrency == 64
    assert exp.base.plan.points[0].input_len == 1024


@pytest.mark.timeout(600)
def test_a_2x2_through_the_cli_attributes_the_difference_to_the_knob_that_made_it(
    fake_sglang: Path,
    settings: Settings,
    tiny_tokenizer_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The motivating question, end to end: CUDA graphs x memory fraction, 3 trials, 12 real
    run processes and servers (the fake SGLang, whose decode is 3x slower without graphs and
    whose KV pool this workload barely touches). The attribution's parts add up to the
    measured total, the graphs get the difference with an interval clear of zero, and the
    memory fraction is said to be untested by this workload, not "within noise"."""
    monkeypatch.setenv("FAKE_SGLANG_ITL_MS", "5")
    monkeypatch.setenv("FAKE_SGLANG_NO_GRAPH_ITL_MS", "15")
    plan = {
        "name": "graphs x memory fraction",
        "trials": 3,
        "base": {
            "server": {"engine": "sglang", "model": str(tiny_tokenizer_dir)},
            "plan": {
                "points": [{"concurrency": 2, "num_prompts": 4, "input_len": 16, "output_len": 16}],
                "probe": None,
                "warmup_requests": 0,
            },
        },
        "grid": {"knobs": {GRAPHS: [False, True], MEM: [0.85, 0.92]}},
    }
    path = tmp_path / "grid.json"
    path.write_text(json.dumps(plan))
    env = {
        **os.environ,
        "SERVELAB_DATA_DIR": str(settings.data_dir),
        "SERVELAB_SGLANG_PYTHON": sys.executable,
    }
    out = subprocess.run(
        [sys.executable, "-m", "core", "experiment", str(path)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    (record,) = list_experiments(settings)
    runs = experiment_runs(settings, record)
    assert [r.view.status.state for r in runs] == ["succeeded"] * 12, [
        (r.arm, r.view.status.reason) for r in runs
    ]
    design = design_of(record.spec)
    assert design is not None and design.factorial and design.changed == (GRAPHS, MEM)
    attr = attribute(runs, design)
    assert not attr.failed
    *pieces, total = decompose(attr, "output_throughput")
    assert [p.kind for p in pieces] == ["main", "main", "interaction"]
    assert sum(p.log for p in pieces) == pytest.approx(total.log, abs=1e-9)
    # balanced: the model's total is the arms' measured (geometric-mean) ratio
    assert attr.measured[(2, "output_throughput")] == pytest.approx(total.log, abs=1e-9)
    graphs, memory, _ = pieces
    assert graphs.name.startswith("cuda_graphs") and memory.name.startswith("mem_fraction")
    # 3x slower decode without graphs: the graphs' part is large and its interval clear of 0
    assert graphs.covers_zero is False and graphs.log_low is not None and graphs.log_low > 0.3
    assert abs(memory.log) < graphs.log / 5
    sentence = verdict_sentence(attr)
    printed = sentence.split("add up: ")[1].rstrip(".").split(" = ")
    assert sum(float(x) for x in printed[0].split()) == pytest.approx(float(printed[1]), abs=2e-3)
    assert "Of the" in out.stdout  # the CLI prints the attribution too
    assert "not tested by this workload" in out.stdout
    print(f"\n{sentence}")
