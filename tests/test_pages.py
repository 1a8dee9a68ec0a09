"""Each page through Streamlit's AppTest, on a real data folder with real runs."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from core.experiments.records import ExperimentRecord
from core.interop.importers import parse_text, plan_runs, store_runs
from core.portal.demo import install_demo
from core.run_folder import RunFolder
from core.settings import Settings
from tests.helpers import open_page, page_tables

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory, tiny_tokenizer_dir: Path) -> Iterator[Path]:
    """Two real runs against the fake SGLang that differ in two knobs (the seed trap)."""
    data = tmp_path_factory.mktemp("portal") / "data"
    data.mkdir()
    (data / ".demo-installed").write_text("")  # these tests count their own runs only
    fake = REPO / "tests" / "fakes" / "sglang_pkg"
    env = {
        **os.environ,
        "SERVELAB_DATA_DIR": str(data),
        "SERVELAB_SGLANG_PYTHON": sys.executable,
        "PYTHONPATH": os.pathsep.join([str(fake), str(REPO)]),
    }
    for graphs, frac in ((False, 0.85), (True, 0.92)):
        plan = {
            "server": {
                "engine": "sglang",
                "model": str(tiny_tokenizer_dir),
                "cuda_graphs": graphs,
                "mem_fraction_static": frac,
            },
            "plan": {
                "points": [
                    {"concurrency": 1, "num_prompts": 3, "output_len": 6},
                    {"concurrency": 2, "num_prompts": 4, "output_len": 6},
                ]
            },
            "intended_diff": ["server.cuda_graphs"],
        }
        path = data.parent / f"plan-{graphs}.json"
        path.write_text(json.dumps(plan))
        out = subprocess.run(
            [sys.executable, "-m", "core", "run", "--plan", str(path), "--quiet"],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, out.stdout + out.stderr
    yield data


@pytest.fixture
def app(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> AppTest:
    monkeypatch.setenv("SERVELAB_DATA_DIR", str(data_dir))
    monkeypatch.setenv("SERVELAB_WORKER", "off")  # page tests queue runs but start none
    st.cache_resource.clear()
    return AppTest.from_file(str(REPO / "app.py"), default_timeout=60)


def run_ids(data_dir: Path) -> list[str]:
    return sorted(p.name for p in (data_dir / "runs").iterdir())


def test_runs_page_lists_runs_with_metrics(app: AppTest, data_dir: Path) -> None:
    app.run()
    assert not app.exception
    frame = app.dataframe[0].value
    assert set(run_ids(data_dir)) <= set(frame["run"])
    assert (frame["status"] == "succeeded").sum() >= 2
    assert frame["Output throughput (tok/s)"].notna().all()
    # a portal whose worker is off says so and why queued runs wait (not "idle")
    (count,) = [c.value for c in app.caption if " run(s) · worker: " in c.value]
    assert "worker: off in this portal (SERVELAB_WORKER=off): queued runs wait" in count
    assert "idle" not in count
    # the headline metrics near the left: at 1440 px they were off-screen (issue 24 item 5)
    assert list(frame.columns)[:9] == [
        "run",
        "status",
        "history",
        "arm",
        "headline at",
        "Output throughput (tok/s)",
        "Median TTFT (ms)",
        "Median ITL (ms)",
        "errors",
    ]


def test_launch_form_shows_errors_beside_fields_and_queues_nothing(
    app: AppTest, data_dir: Path
) -> None:
    before = run_ids(data_dir)
    app.run()
    app.switch_page("pages/launch.py").run()
    app.text_input(key="concurrency").set_value("1,x")
    app.text_input(key="mem_fraction_static").set_value("lots")
    app.button(key="submit_launch").click().run()
    assert not app.exception
    errors = " ".join(e.value for e in app.error)
    assert "comma" in errors and "not a number" in errors and "Nothing was queued" in errors
    assert run_ids(data_dir) == before


def test_launch_form_queues_an_ab_pair_and_links_to_it(app: AppTest, data_dir: Path) -> None:
    before = set(run_ids(data_dir))
    app.run()
    app.switch_page("pages/launch.py").run()
    app.selectbox(key="preset").set_value("Continuous batching A/B")
    app.text_input(key="trials").set_value("1")  # the default is 3 trials (intervals)
    app.button(key="submit_launch").click().run()
    assert not app.exception, app.exception
    new = set(run_ids(data_dir)) - before
    assert len(new) == 2
    for run_id in new:
        assert RunFolder(data_dir / "runs" / run_id).status()["state"] == "queued"
    # one message, one count: the experiment and its runs
    queued = [s.value for s in app.success if s.value.startswith("Queued")]
    assert len(queued) == 1 and "Queued experiment exp-" in queued[0], queued
    assert ": 2 runs (2 arms × 1 trial)" in queued[0]
    # clean up: the other tests expect only finished runs
    for run_id in new:
        RunFolder(data_dir / "runs" / run_id).update_status(state="cancelled")


def test_run_page_shows_command_facts_probe_and_points(app: AppTest, data_dir: Path) -> None:
    run_id = run_ids(data_dir)[0]
    app.query_params["run"] = run_id
    app.run()
    app.switch_page("pages/run.py").run()
    assert not app.exception, app.exception
    # the launch command as one line of code to copy (pages/_details.code_line)
    assert any(m.value.startswith("`") and "sglang.launch_server" in m.value for m in app.markdown)
    assert any("Paris" in s.value for s in app.success)
    assert any("c=2" in df.value.to_csv() for df in app.dataframe)


def test_compare_warns_when_more_than_the_intended_knob_differs(
    app: AppTest, data_dir: Path
) -> None:
    a, b = [
        r
        for r in run_ids(data_dir)
        if RunFolder(data_dir / "runs" / r).status()["state"] == "succeeded"
    ][:2]
    app.query_params["runs"] = f"{a},{b}"
    app.run()
    app.session_state["cmp_all_metrics"] = True  # open the full metrics table (drawn lazily)
    app.switch_page("pages/compare.py").run()
    assert not app.exception, app.exception
    warnings = " ".join(w.value for w in app.warning)
    # the extra field named once, readably, beside the knob under test (issue 24 item 5)
    assert "(cuda_graphs): **mem_fraction_static** differs too" in warnings
    assert warnings.count("mem_fraction_static") == 1
    # the tiles name the metrics as the card does, with units
    labels = [m.label for m in app.metric]
    assert "Output throughput (tok/s)" in labels and "Median TTFT (ms)" in labels
    assert not any("_" in label for label in labels)
    tables = " ".join(df.to_csv() for df in page_tables(app))
    assert "server.cuda_graphs" in tables and "rel_" in tables


# --- every page in every state, on the shipped demo plus hand-made folders ----------------------

DEMO_EXP = "exp-20261130-045815-42d8"


def _copy_run(
    data: Path,
    src: str,
    run_id: str,
    state: str,
    results: bool,
    reason: str | None = None,
    tags: list[str] | None = None,
) -> None:
    """A run folder in ``state``: a copy of a demo run (with or without its results)."""
    source = data / "runs" / src
    dst = data / "runs" / run_id
    if results:
        shutil.copytree(source, dst)
    else:
        dst.mkdir(parents=True)
        shutil.copy(source / "spec.json", dst / "spec.json")
    spec = json.loads((dst / "spec.json").read_text())
    spec["run_id"] = run_id
    if tags is not None:
        spec["tags"] = tags
    (dst / "spec.json").write_text(json.dumps(spec))
    status = {
        "run_id": run_id,
        "state": state,
        "phase": "point 1" if state == "running" else state,
        "reason": reason,
    }
    if state == "running":
        status["progress"] = {
            "point": 1,
            "points_total": 7,
            "requests_done": 1,
            "requests_total": 4,
        }
    (dst / "status.json").write_text(json.dumps({k: v for k, v in status.items() if v is not None}))


def _experiment(data: Path, exp_id: str, runs: list[tuple[str, str, int]]) -> None:
    record = json.loads((data / "experiments" / DEMO_EXP / "experiment.json").read_text())
    record["experiment_id"] = exp_id
    record["runs"] = [{"run_id": r, "arm": arm, "trial": t} for r, arm, t in runs]
    (data / "experiments" / exp_id).mkdir(parents=True)
    (data / "experiments" / exp_id / "experiment.json").write_text(json.dumps(record))


@pytest.fixture(scope="module")
def states_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The H200 demo, and beside it a run in each state, a queued, a running and an
    all-failed experiment, and an imported run."""
    data = tmp_path_factory.mktemp("states") / "data"
    settings = Settings(
        data_dir=data, sglang_python=sys.executable, transformers_python=sys.executable
    )
    install_demo(settings)
    demo = sorted(p.name for p in (data / "runs").iterdir())
    off, on = demo[0], demo[1]  # graphs off, graphs on (trial 0)
    for state, results, reason in (
        ("queued", False, None),
        ("running", False, None),
        ("failed", False, "server exited with code 1 before ready (OOM)"),
        ("cancelled", True, "cancelled during point 6"),
        ("interrupted", False, "portal restarted: the run process was gone"),
    ):
        _copy_run(data, off, f"20990101-000000-{state[:6]}", state, results, reason)
    # experiments: queued (no run started), running (one done), all failed
    for exp, states in (
        ("exp-queued-1", ("queued", "queued")),
        ("exp-running-1", ("succeeded", "running")),
        ("exp-failed-1", ("failed", "failed")),
    ):
        runs = []
        for i, (state, src, arm) in enumerate(
            zip(states, (off, on), ("graphs off", "graphs on"), strict=True)
        ):
            rid = f"20990102-{exp[4:10]}-{i:06d}"
            _copy_run(
                data,
                src,
                rid,
                state,
                state == "succeeded",
                "engine flag --foo unknown" if state == "failed" else None,
                tags=[f"exp:{exp}", "arm:" + arm.replace(" ", "-"), "trial:0"],
            )
            runs.append((rid, arm, 0))
        _experiment(data, exp, runs)
    text = (
        '{"backend": "sglang-oai-chat", "max_concurrency": 64, "random_input_len": 64, '
        '"random_output_len": 64, "request_rate": Infinity, "completed": 64, '
        '"output_throughput": 2500.0, "median_ttft_ms": 80.0, "p99_ttft_ms": 120.0, '
        '"median_itl_ms": 5.0, "median_tpot_ms": 5.5, "duration": 2.0}\n'
    )
    store_runs(plan_runs(parse_text(text, "h200-sweep.jsonl"), settings), settings)
    return data


@pytest.fixture
def states_app(states_dir: Path, monkeypatch: pytest.MonkeyPatch) -> AppTest:
    monkeypatch.setenv("SERVELAB_DATA_DIR", str(states_dir))
    monkeypatch.setenv("SERVELAB_WORKER", "off")
    st.cache_resource.clear()
    return AppTest.from_file(str(REPO / "app.py"), default_timeout=60)


def _text(app: AppTest) -> str:
    parts = (
        [m.value for m in app.markdown]
        + [e.value for e in app.error]
        + [i.value for i in app.info]
        + [w.value for w in app.warning]
        + [c.value for c in app.caption]
        + [s.value for s in app.success]
    )
    return " ".join(str(p) for p in parts)


@pytest.mark.parametrize("state", ["queued", "running", "failed", "cancelled", "interrupted"])
def test_run_page_renders_every_state(states_app: AppTest, state: str) -> None:
    app = open_page(states_app, "pages/run.py", run=f"20990101-000000-{state[:6]}")
    assert any(state in h.value for h in app.subheader)
    if state != "running":  # an ended run's last phase is no news: the state alone
        assert state in [h.value for h in app.subheader]
    text = _text(app)
    assert "no server launched: )" not in text  # a queued run is not yet launched
    if state == "queued":
        assert "Not launched yet" in text
    if state == "cancelled":  # the point the cancel cut short is marked, not 100% errors
        points = next(d.value for d in app.dataframe if "Error rate" in d.value.columns)
        row = points[points["Point"].str.startswith("c=64")].iloc[0]
        assert row["Point"].endswith("(cancelled)") and pd.isna(row["Error rate"])


def test_run_page_steps_say_when_and_how_long(states_app: AppTest) -> None:
    app = open_page(states_app, "pages/run.py", run="20261130-045815-c6a73d")  # a demo run
    assert next(h.value for h in app.subheader) == "succeeded"  # not "succeeded · store"
    (steps,) = [t for t in page_tables(app) if "took" in t.columns]
    assert list(steps.columns) == ["outcome", "started (UTC)", "took", "detail"]
    assert steps.loc["wait_ready", "took"].endswith(" s")
    assert steps["started (UTC)"].iloc[0].startswith("2026-11-30 ")


def test_run_page_of_an_imported_run(states_app: AppTest, states_dir: Path) -> None:
    imported = next(p.name for p in (states_dir / "runs").iterdir() if p.name.startswith("imp-"))
    app = open_page(states_app, "pages/run.py", run=imported)
    assert "Imported from **h200-sweep.jsonl**" in _text(app)


def test_run_page_refuses_a_bad_id(states_app: AppTest) -> None:
    app = open_page(states_app, "pages/run.py", run="../../etc")
    assert "no such run" in _text(app)


@pytest.mark.parametrize(
    "exp_id, expected",
    [
        ("exp-queued-1", "No results yet: 2 run(s) queued or running"),
        ("exp-running-1", "1 of 2 run(s) still queued or running: the results below are partial"),
        ("exp-failed-1", "No run of this experiment succeeded"),
    ],
)
def test_experiment_page_without_results_says_why(
    states_app: AppTest, exp_id: str, expected: str
) -> None:
    app = open_page(states_app, "pages/experiment.py", experiment=exp_id)
    text = _text(app)
    assert expected in text, text
    if exp_id == "exp-failed-1":
        assert "engine flag --foo unknown" in text


def test_runs_page_with_every_state(states_app: AppTest) -> None:
    app = open_page(states_app, "pages/runs.py")
    frame = app.dataframe[0].value
    assert {"queued", "running", "failed", "cancelled", "interrupted", "succeeded"} <= set(
        frame["status"]
    )
    # the experiment (a link), the arm, the knob under test, the headline point, the demo
    demo = frame[frame["run"] == "20261130-045815-c6a73d"].iloc[0]
    assert demo["experiment"] == f"experiment?experiment={DEMO_EXP}"
    assert demo["arm"] == "graphs off" and demo["cuda_graphs"] == "off"
    assert demo["headline at"] == "c=64" and demo["model"].startswith("H200 demo")
    # a cancelled run's cut-short point is not "100% errors"
    cancelled = frame[frame["status"] == "cancelled"].iloc[0]
    assert pd.isna(cancelled["errors"])
    # the phase is where a live run is; an ended run has none to show
    phases = dict(zip(frame["status"], frame["phase"], strict=True))
    assert phases["running"] == "point 2/7" and pd.isna(demo["phase"])  # counted from 1
    # an empty cell reads "—", not "None"; a 2x2 arm in its one spelling (issue 24 item 5)
    assert app.dataframe[0].proto.placeholder == "—"
    assert "graphs=on mem=0.92" in set(frame["arm"])
    assert not any(str(a).startswith(("cg=", "cuda_graphs=")) for a in frame["arm"])


def test_runs_page_offers_cancel_only_for_live_runs(states_app: AppTest) -> None:
    app = open_page(states_app, "pages/runs.py")
    frame = app.dataframe[0].value
    done = [i for i, s in enumerate(frame["status"]) if s in ("succeeded", "failed")][:2]
    app.session_state["runs_table"] = {"selection": {"rows": done, "columns": []}}
    app.run()
    assert not [b for b in app.button if b.key == "cancel_selected"]
    live = [i for i, s in enumerate(frame["status"]) if s in ("queued", "running")]
    app.session_state["runs_table"] = {"selection": {"rows": [*done, *live], "columns": []}}
    app.run()
    (button,) = [b for b in app.button if b.key == "cancel_selected"]
    assert button.label == f"Cancel {len(live)} live run(s)"


def test_compare_page_with_a_failed_and_an_imported_run(
    states_app: AppTest, states_dir: Path
) -> None:
    imported = next(p.name for p in (states_dir / "runs").iterdir() if p.name.startswith("imp-"))
    app = open_page(states_app, "pages/compare.py", runs=f"20990101-000000-failed,{imported}")
    assert "Not every run succeeded" in _text(app)


# --- one story: same baseline, names and sign on Experiment, Compare and the HTML report ------


def test_demo_tells_one_story_on_experiment_compare_and_report(
    states_app: AppTest, states_dir: Path
) -> None:
    exp = open_page(states_app, "pages/experiment.py", experiment=DEMO_EXP)
    text = _text(exp)
    # the summary card lists the confirmatory TTFT regression at c=64, names its family,
    # and never lists the graph memory the knob is meant to cost
    regs = " ".join(e.value for e in exp.error)
    assert "median TTFT at c=64" in regs and "graphs on vs graphs off, worse" in regs
    assert "Holm over 3 comparisons" in regs
    assert "peak GPU memory" not in regs.split("Confirmatory")[0]
    assert "graphs on** vs **graphs off** (baseline)" in text
    # the host's noise as noise (power.noise_text), never a floor a verdict is judged by
    assert "This host's run-to-run noise ±" in text and "noise floor" not in text
    card = next(d for d in page_tables(exp) if "c=64" in d.columns)
    assert "Peak GPU memory (MiB)" in card.index and "c=64" in card.columns
    assert card.loc["Median TTFT (ms)", "c=64"].endswith("▼")
    assert card.loc["Peak GPU memory (MiB)", "c=64"].endswith("cost")
    assert card.loc["Output throughput (tok/s)", "c=64"].startswith("+246")  # paired by trial
    # the link to Compare opens the experiment's own comparison (all trials), same story
    link = next(p for p in exp.get("page_link") if "Compare the arms (all trials)" in p.label)
    query = dict(urllib.parse.parse_qsl(link.proto.query_string))
    assert query == {"experiment": DEMO_EXP}
    cmp = open_page(
        AppTest.from_file(str(REPO / "app.py"), default_timeout=60), "pages/compare.py", **query
    )
    assert "graphs on** vs **graphs off** (baseline)" in _text(cmp)
    assert "(all trials)" in cmp.title[0].value
    cmp_card = next(d for d in page_tables(cmp) if "c=64" in d.columns)
    assert cmp_card.equals(card)  # every cell, its interval and its mark
    # one run per arm (trial 0) is a single-trial view and its title says so
    record = json.loads((states_dir / "experiments" / DEMO_EXP / "experiment.json").read_text())
    trial0 = [r for r in record["runs"] if r["trial"] == 0 and not r.get("closing")]
    off_run = next(r["run_id"] for r in trial0 if r["arm"] == "graphs off")
    query = {"runs": ",".join(r["run_id"] for r in trial0)}
    single = open_page(
        AppTest.from_file(str(REPO / "app.py"), default_timeout=60), "pages/compare.py", **query
    )
    assert "one run per arm, no intervals" in single.title[0].value
    back = next(p for p in single.get("page_link") if "all trials" in p.label)
    assert dict(urllib.parse.parse_qsl(back.proto.query_string)) == {"experiment": DEMO_EXP}
    # ... which still takes the experiment's baseline by the rule alone
    assert "graphs on** vs **graphs off** (baseline)" in _text(single)
    query["baseline"] = off_run  # the CLI's pair export below names its baseline run
    # the HTML report: same baseline, names and the same regressions
    from core.interop.export import html_report, select, table_files

    settings = Settings(
        data_dir=states_dir, sglang_python=sys.executable, transformers_python=sys.executable
    )
    report = html_report(select(settings, [DEMO_EXP]))
    assert "Baseline: graphs off" in report and "graphs on vs graphs off" in report
    # Regressions: confirmatory contrasts only (c=64, the headline point), under Holm
    assert "median TTFT at c=64: +44.2%" in report and "Holm over 3 comparisons" in report
    assert "peak GPU memory" not in report.split("Regressions")[1].split("</p>")[0]
    # the tables: the same card, and a plain comparison of the two runs (CLI export) takes
    # the same baseline by the rule
    card = pd.read_csv(
        io.BytesIO(table_files(select(settings, [DEMO_EXP]), "csv")["summary_card.csv"])
    )
    row = card[(card["metric"] == "median_ttft_ms") & (card["concurrency"] == 64)].iloc[0]
    assert row["baseline"] == "graphs off" and row["verdict"] == "worse" and row["change"] > 0
    pair = select(settings, query["runs"].split(","))
    assert pair.names[pair.baseline] == "graphs off"
    tput = pd.read_csv(io.BytesIO(table_files(pair, "csv")["summary_card.csv"]))
    assert (tput[tput["metric"] == "output_throughput"]["change"] > 0).all()


GRID_EXP = "exp-20261201-041412-6b50"  # the 2x2 demo: cuda_graphs x mem_fraction_static


def _card_cells(app: AppTest, arms: list[str], arm: str, metric: str, point: str) -> str:
    """The summary card's cell of ``arm`` (one static table per arm, in the story's order)."""
    grids = [t for t in page_tables(app) if point in t.columns and metric in t.index]
    return str(grids[arms.index(arm)].loc[metric, point])


def test_the_2x2_gives_one_number_for_one_contrast_on_every_page_and_export(
    states_app: AppTest, states_dir: Path
) -> None:
    """Issue 24, one story: the cuda_graphs contrast at c=64 of the 2x2 demo (graphs on vs
    off at mem_fraction_static 0.85) reads the same estimate and interval on the Experiment
    page, on the Compare page its link opens, in the HTML report and in the CSV and Parquet
    tables: every one the experiment's estimate over all trials, with the same baseline, arm
    names and colours."""
    from core.interop.export import html_report, select, table_files
    from core.views.figures import arm_colours

    settings = Settings(
        data_dir=states_dir, sglang_python=sys.executable, transformers_python=sys.executable
    )
    sel = select(settings, [GRID_EXP])
    story = sel.story
    assert story is not None and story.baseline == "graphs=off mem=0.85"
    arm = "graphs=on mem=0.85"
    row = next(
        r
        for r in story.card
        if r.arm == arm and r.metric == "output_throughput" and r.concurrency == 64
    )
    said = row.cell_text()
    assert said.startswith("+227% [+220, +234]") and row.n == 3 and row.confirmed
    arms = list(dict.fromkeys(r.arm for r in story.card))
    metric = "Output throughput (tok/s)"

    exp = open_page(states_app, "pages/experiment.py", experiment=GRID_EXP)
    assert _card_cells(exp, arms, arm, metric, "c=64") == said
    assert any(b.label == "Report (HTML, opens offline)" for b in exp.get("download_button"))
    link = next(p for p in exp.get("page_link") if p.label == "Compare the arms (all trials)")
    cmp = open_page(
        AppTest.from_file(str(REPO / "app.py"), default_timeout=60),
        "pages/compare.py",
        **dict(urllib.parse.parse_qsl(link.proto.query_string)),
    )
    assert _card_cells(cmp, arms, arm, metric, "c=64") == said
    assert f"**{arm}** vs **graphs=off mem=0.85** (baseline)" in _text(cmp)
    assert any(b.label == "Tables as CSV (zip)" for b in cmp.get("download_button"))

    # the report: the same cell under the same arm's heading
    report = html_report(sel)
    section = report.split(f"<h3>{arm} vs graphs=off mem=0.85</h3>", 1)[1].split("<h3>", 1)[0]
    assert said in section
    # the tables: the same estimate and interval, CSV and Parquet alike
    for fmt in ("csv", "parquet"):
        data = io.BytesIO(table_files(sel, fmt)[f"summary_card.{fmt}"])  # type: ignore[arg-type]
        card = pd.read_csv(data) if fmt == "csv" else pd.read_parquet(data)
        got = card[
            (card["arm"] == arm)
            & (card["metric"] == "output_throughput")
            & (card["concurrency"] == 64)
        ].iloc[0]
        assert got["baseline"] == story.baseline
        assert (got["change"], got["change_low"], got["change_high"]) == pytest.approx(
            (row.change, row.low, row.high)
        )
        # no single-run deltas beside the experiment's estimate
        assert f"deltas.{fmt}" not in table_files(sel, fmt)  # type: ignore[arg-type]
    # one colour per arm, in the record's order with the baseline first, as on the page
    assert {a: sel.colours[a] for a in story.arms} == arm_colours(story.arms, story.baseline)
    assert {n.rsplit(" · ", 1)[0] for n in sel.names} == set(story.arms)


@pytest.mark.parametrize(
    ("exp_id", "said"),
    [
        ("exp-nope-1", "no run or experiment exp-nope-1"),
        ("20261130-045815-c6a73d", "is not an experiment"),  # a run id
        ("exp-queued-1", "nothing to compare"),
    ],
)
def test_compare_of_an_experiment_says_why_it_has_nothing(
    states_app: AppTest, exp_id: str, said: str
) -> None:
    app = open_page(states_app, "pages/compare.py", experiment=exp_id)
    assert said in _text(app)


def test_the_verdict_and_card_say_which_points_to_read_with_care(
    states_app: AppTest, states_dir: Path
) -> None:
    """The demo's c=64 points fired the client's lag flag with CPU to spare (the client
    shared 2 cores with transformers serve): the Experiment page's card and verdict, the
    HTML report and the CLI say its timestamps came late; a Compare with a run cancelled
    during a point names that point as cut short."""
    said = (
        "c=64: client timestamps late (worst: event-loop lag p99 34.3 ms at 31% of a "
        "core) in all 3 runs of graphs on, 2 of 3 runs of graphs off"
    )
    exp = open_page(states_app, "pages/experiment.py", experiment=DEMO_EXP)
    care = [w.value for w in exp.warning if "Read with care" in w.value]
    assert (
        care
        and said
        + (
            " — its latency tails (p99) may include that much client delay; "
            "medians and throughput do not"
        )
        in care[0]
    )
    # one line of the verdict, with the one-wave points (core.metrics.wave_warning) too
    (line,) = [m.value for m in exp.markdown if m.value.startswith("**Read with care:** ")]
    assert said in line and "not steady state at c=4 (worst: one wave only" in line
    assert line.count("not steady state") == 1  # named once, with each point's figures
    from core.interop.export import html_report, select
    from core.views.report import format_experiment

    settings = Settings(
        data_dir=states_dir, sglang_python=sys.executable, transformers_python=sys.executable
    )
    assert said in html_report(select(settings, [DEMO_EXP]))
    record = ExperimentRecord.model_validate_json(
        (states_dir / "experiments" / DEMO_EXP / "experiment.json").read_text()
    )
    assert f"; {said}." in format_experiment(settings, record)
    on = next(r.run_id for r in record.runs if r.arm == "graphs on")
    cmp = open_page(
        AppTest.from_file(str(REPO / "app.py"), default_timeout=60),
        "pages/compare.py",
        runs=f"20990101-000000-cancel,{on}",
    )
    assert "c=64: cut short by a cancel" in " ".join(w.value for w in cmp.warning)
    # the Run page of one of those runs says the same, with what it means for the numbers
    run = open_page(
        AppTest.from_file(str(REPO / "app.py"), default_timeout=60), "pages/run.py", run=on
    )
    told = " ".join(w.value for w in run.warning if "Read with care" in w.value)
    assert "c=64 rate=inf in=64 out=64: client timestamps late (event-loop lag p99" in told
    assert "its latency tails (p99) may include that much client delay" in told
    assert "saturated" not in told


def test_the_private_streamlit_switch_still_exists() -> None:
    """pages/_services.py turns Streamlit's legacy pages/ mode off through
    PagesManager.uses_pages_directory (no public switch exists: Streamlit's advice is to not
    name the folder pages/, which this project's layout fixes). If a release renames it,
    every page opened cold would run without app.py, i.e. without the sign-in gate: fail
    here, loudly, instead."""
    import inspect

    import streamlit.runtime.scriptrunner.script_runner as script_runner
    from streamlit.runtime.pages_manager import PagesManager

    assert hasattr(PagesManager, "uses_pages_directory"), (
        "Streamlit no longer has PagesManager.uses_pages_directory: update "
        "pages/_services.py bootstrap() and the streamlit range in requirements.txt"
    )
    # ... and it is still what selects the legacy mode when a script runs
    assert "PagesManager.uses_pages_directory" in inspect.getsource(script_runner), (
        "Streamlit's script runner no longer reads uses_pages_directory: check how it "
        "chooses the legacy pages/ mode and update pages/_services.py"
    )


def test_compare_tables_read_as_a_person_says_them(states_app: AppTest) -> None:
    """The configuration differences say on/off, not True/False; the memory table gives GB
    to 2 decimals and MiB/tokens whole, not 4-decimal floats (the exports keep raw values)."""
    app = open_page(
        states_app, "pages/compare.py", runs="20261130-045815-c6a73d,20261130-045815-c6b21c"
    )  # graphs off, on
    tables = page_tables(app)
    diff = next(t for t in tables if "server.cuda_graphs" in t.index)
    assert list(diff.loc["server.cuda_graphs"]) == ["off", "on"]
    # a row per fact in words, a column per run: no heading is snake_case or cut off
    mem = next(t for t in tables if "Peak GPU used (MiB)" in t.index)
    assert len(mem.columns) == 2 and not any("_" in str(i) for i in mem.index)
    assert all(re.fullmatch(r"[\d,]+", v) for v in mem.loc["Peak GPU used (MiB)"])
    assert all(re.fullmatch(r"\d+\.\d\d|—", v) for v in mem.loc["Weight mem (GB)"])


def test_compare_shows_a_tile_per_headline_metric_however_many(
    states_app: AppTest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fourth headline metric in core.metric_info's table is a fourth tile on Compare (the
    page made 4 columns for 3 metrics and raised on a 4th)."""
    from dataclasses import replace

    from core import metric_info, metrics

    table = dict(metric_info.METRICS)
    table["p99_ttft_ms"] = replace(table["p99_ttft_ms"], headline=True)
    monkeypatch.setattr(metric_info, "METRICS", table)
    monkeypatch.setattr(metrics, "VERDICT_METRICS", metric_info.verdict_metrics())
    assert len(metric_info.verdict_metrics()) == 4
    app = open_page(
        states_app, "pages/compare.py", runs="20261130-045815-c6a73d,20261130-045815-c6b21c"
    )
    labels = [m.label for m in app.metric]
    assert labels.count("p99 TTFT (ms)") == 1 and labels.count("Median ITL (ms)") == 1
    assert all(re.fullmatch(r"[+-]\d+\.\d%", str(m.delta)) for m in app.metric if m.delta)


def test_run_page_counts_points_from_one_and_reads_probe_stop_and_waves(
    states_app: AppTest,
) -> None:
    """The CPU demo run: its probe answered 'messagemessage…' (amber, with why, not a green
    pass), its points are "point 1/7".."point 7/7", its one-wave points are read with care."""
    app = open_page(states_app, "pages/run.py", run="20261130-045815-c6a73d")
    assert not any("messagemessage" in s.value for s in app.success)
    (probe,) = [w.value for w in app.warning if "Sanity probe" in w.value]
    assert probe.startswith("Sanity probe warning:") and "'message' repeated" in probe
    (steps,) = [t for t in page_tables(app) if "took" in t.columns]
    assert [i for i in steps.index if i.startswith("point")] == [
        f"point {n}/7" for n in range(1, 8)
    ]
    assert steps.loc["stop", "detail"] == "server exited on SIGTERM after 0.8 s (exit -15)"
    assert steps.loc["probe", "outcome"] == "warning"  # the step says what the box says
    assert "degenerate answer: 'message' repeated" in steps.loc["probe", "detail"]
    care = " ".join(w.value for w in app.warning if "Read with care" in w.value)
    assert "c=4 rate=inf in=64 out=64: not steady state (one wave only, 4 requests" in care
    assert "c=1 rate=inf" not in care  # 4 prompts at c=1: four waves
    # an H200 run: SGLang ended its own tree on SIGTERM (exit -9 after 6 s): not "ok · exit -9"
    h200 = open_page(
        AppTest.from_file(str(REPO / "app.py"), default_timeout=60),
        "pages/run.py",
        run="20261201-000311-8d8413",
    )
    (steps,) = [t for t in page_tables(h200) if "took" in t.columns]
    assert "by killing its own process tree (exit -9" in steps.loc["stop", "detail"]


def test_a_live_run_shows_elapsed_time_and_time_left(states_app: AppTest, states_dir: Path) -> None:
    folder = RunFolder(states_dir / "runs" / "20990101-000000-runnin")
    now = pd.Timestamp.now(tz="UTC")
    status = folder.status()
    status.update(
        started_at=(now - pd.Timedelta(seconds=90)).isoformat(),
        steps=[
            {
                "step": "point 0",
                "outcome": "ok",
                "started_at": (now - pd.Timedelta(seconds=30)).isoformat(),
            },
            {"step": "point 1", "outcome": "running", "started_at": now.isoformat()},
        ],
    )
    (folder.path / "status.json").write_text(json.dumps(status))
    app = open_page(states_app, "pages/run.py", run=folder.run_id)
    assert any(h.value == "running · point 2/7" for h in app.subheader)
    timing = [c.value for c in app.caption if c.value.startswith("elapsed ")]
    assert timing and " left (" in timing[0], [c.value for c in app.caption]


def test_experiment_counts_say_what_ended_and_time_what_is_left(
    states_app: AppTest, states_dir: Path
) -> None:
    now = pd.Timestamp.now(tz="UTC")
    for i, (state, ago_s, took_s) in enumerate((("succeeded", 400, 120.0), ("running", 60, None))):
        folder = RunFolder(states_dir / "runs" / f"20990102-runnin-{i:06d}")
        status = folder.status()
        assert status["state"] == state
        status["started_at"] = (now - pd.Timedelta(seconds=ago_s)).isoformat()
        if took_s is not None:
            status["duration_s"] = took_s
        status["reason"] = status.get("reason") or ""  # as a run process writes "no reason"
        (folder.path / "status.json").write_text(json.dumps(status))
    failed = open_page(states_app, "pages/experiment.py", experiment="exp-failed-1")
    assert any(e.label == "Runs (2/2 ended: 2 failed)" for e in failed.expander)
    assert not any("finished" in e.label for e in failed.expander)
    running = open_page(
        AppTest.from_file(str(REPO / "app.py"), default_timeout=60),
        "pages/experiment.py",
        experiment="exp-running-1",
    )
    assert any(e.label == "Runs (1/2 ended: 1 succeeded)" for e in running.expander)
    # the live run list: trials counted from 1 as in each run's title, no reason reads "—"
    runs = running.dataframe[0]
    assert list(runs.value["trial"]) == [1, 1] and runs.proto.placeholder == "—"
    assert runs.value["reason"].isna().all()
    timing = [c.value for c in running.caption if c.value.startswith("elapsed ")]
    assert timing and "median of its 1 succeeded run(s)" in timing[0], timing


def test_single_wave_points_are_read_with_care_on_compare_and_experiment(
    states_app: AppTest,
) -> None:
    exp = open_page(states_app, "pages/experiment.py", experiment=DEMO_EXP)
    # the metric picker names metrics as Compare does, not by their JSON key
    assert exp.selectbox(key="exp_metric").options[0] == "Output throughput (tok/s)"
    care = " ".join(w.value for w in exp.warning if "Read with care" in w.value)
    assert "c=4: not steady state (worst: one wave only, 4 requests at concurrency 4)" in care
    cmp = open_page(
        AppTest.from_file(str(REPO / "app.py"), default_timeout=60),
        "pages/compare.py",
        runs="20261130-045815-c6a73d,20261130-045815-c6b21c",
    )
    care = " ".join(w.value for w in cmp.warning if "Read with care" in w.value)
    assert "not steady state (worst: one wave only, 64 requests at concurrency 64)" in care


def test_a_run_page_is_titled_by_its_arm_and_trial_and_reads_its_numbers(
    states_app: AppTest,
) -> None:
    """Issue 24 item 5: Run pages were titled by a raw id with no way back to their
    experiment, and showed ``ready_after_s 127.46550430199999`` and 4-decimal floats."""
    app = open_page(states_app, "pages/run.py", run="20261201-041412-a1cfea")  # the 2x2's demo
    assert app.title[0].value == "graphs=on mem=0.92 · trial 1 of 3"
    assert any("20261201-041412-a1cfea" in c.value for c in app.caption)  # the id stays
    (back,) = [p for p in app.get("page_link") if "Back to the experiment" in p.proto.label]
    assert "exp-20261201-041412-6b50" in back.proto.label and "experiment" in back.proto.page
    (facts,) = [t.value for t in app.table if "value" in t.value.columns]
    assert facts.loc["Ready after (s)", "value"] == "66.8"
    assert facts.loc["KV pool (tokens)", "value"] == "5,952,378"
    assert not any("_" in str(k) for k in facts.index)  # words, not snake_case
    points = next(d for d in app.dataframe if "Output throughput (tok/s)" in d.value.columns)
    assert "Median TTFT (ms)" in points.value.columns
    # a run of no experiment keeps its id as the title
    app = open_page(states_app, "pages/run.py", run="20261201-000311-8d8413")
    assert app.title[0].value == "Run 20261201-000311-8d8413"


def test_a_code_line_keeps_backticks_inside_its_span() -> None:
    def script() -> None:
        from pages._details import code_line

        code_line("python -m sglang.launch_server --port 30000")
        code_line("echo `date`")

    at = AppTest.from_function(script)
    at.run()
    assert [m.value for m in at.markdown] == [
        "`python -m sglang.launch_server --port 30000`",
        "`` echo `date` ``",  # CommonMark: a longer fence, padded when the text ends in one
    ]
