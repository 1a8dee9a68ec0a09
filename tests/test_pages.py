"""Each page through Streamlit's AppTest, on a real data folder with real runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from core.run_folder import RunFolder

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory, tiny_tokenizer_dir: Path
             ) -> Iterator[Path]:
    """Two real runs against the fake SGLang that differ in two knobs (the seed trap)."""
    data = tmp_path_factory.mktemp("portal") / "data"
    data.mkdir()
    (data / ".demo-installed").write_text("")  # these tests count their own runs only
    fake = REPO / "tests" / "fakes" / "sglang_pkg"
    env = {**os.environ, "SERVELAB_DATA_DIR": str(data), "SERVELAB_SGLANG_PYTHON": sys.executable,
           "PYTHONPATH": os.pathsep.join([str(fake), str(REPO)])}
    for graphs, frac in ((False, 0.85), (True, 0.92)):
        plan = {"server": {"engine": "sglang", "model": str(tiny_tokenizer_dir),
                           "cuda_graphs": graphs, "mem_fraction_static": frac},
                "plan": {"points": [{"concurrency": 1, "num_prompts": 3, "output_len": 6},
                                    {"concurrency": 2, "num_prompts": 4, "output_len": 6}]},
                "intended_diff": ["server.cuda_graphs"]}
        path = data.parent / f"plan-{graphs}.json"
        path.write_text(json.dumps(plan))
        out = subprocess.run([sys.executable, "-m", "core", "run", "--plan", str(path),
                              "--quiet"], cwd=REPO, env=env, capture_output=True, text=True,
                             timeout=120)
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
    assert frame["out tok/s"].notna().all()


def test_launch_form_shows_errors_beside_fields_and_queues_nothing(app: AppTest,
                                                                   data_dir: Path) -> None:
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
    app.number_input(key="trials").set_value(1)  # the default is 3 trials (intervals)
    app.button(key="submit_launch").click().run()
    assert not app.exception, app.exception
    new = set(run_ids(data_dir)) - before
    assert len(new) == 2
    for run_id in new:
        assert RunFolder(data_dir / "runs" / run_id).status()["state"] == "queued"
    assert any("Queued 2 run(s)" in s.value for s in app.success)
    # clean up: the other tests expect only finished runs
    for run_id in new:
        RunFolder(data_dir / "runs" / run_id).update_status(state="cancelled")


def test_run_page_shows_command_facts_probe_and_points(app: AppTest, data_dir: Path) -> None:
    run_id = run_ids(data_dir)[0]
    app.query_params["run"] = run_id
    app.run()
    app.switch_page("pages/run.py").run()
    assert not app.exception, app.exception
    assert any("sglang.launch_server" in c.value for c in app.code)
    assert any("Paris" in s.value for s in app.success)
    assert any("c=2" in df.value.to_csv() for df in app.dataframe)


def test_compare_warns_when_more_than_the_intended_knob_differs(app: AppTest,
                                                                data_dir: Path) -> None:
    a, b = [r for r in run_ids(data_dir)
            if RunFolder(data_dir / "runs" / r).status()["state"] == "succeeded"][:2]
    app.query_params["runs"] = f"{a},{b}"
    app.run()
    app.switch_page("pages/compare.py").run()
    assert not app.exception, app.exception
    warnings = " ".join(w.value for w in app.warning)
    assert "server.mem_fraction_static" in warnings
    tables = " ".join(df.value.to_csv() for df in app.dataframe)
    assert "server.cuda_graphs" in tables and "rel_" in tables
