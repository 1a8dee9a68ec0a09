"""The History page through Streamlit's AppTest: the alert in words at the top, the shared
link, the chart and table; linked from the Runs and Run pages. On a copy of the H200 demo
(its kv-pressure mem=0.92 arm ran in two experiments: one series of 7 runs) plus a
hand-made series whose last run, after an upgrade, lost 16 % of its throughput."""

from __future__ import annotations

import shutil
import urllib.parse
from pathlib import Path

import pandas as pd
import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from core.analysis.history import alert_text, load_history, series_of_run
from core.settings import DEMO_DIR
from tests.helpers import open_page, page_figures
from tests.runs_by_hand import P1, P4, make_run, run_facts

REPO = Path(__file__).resolve().parent.parent
DEMO_RUN = "20261202-002720-c5b868"  # the last of 7 demo runs of kv-pressure mem=0.92
UPGRADED = "20990301-050000-upgr05"
VERSION_AB_RUN = "20261202-033636-e068e1"  # the last run of exp-20261202-033636-ec50


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = tmp_path_factory.mktemp("history") / "data"
    shutil.copytree(DEMO_DIR / "runs", data / "runs")
    (data / ".demo-installed").write_text("")
    for i, (tput, version) in enumerate(
        zip([1000.0, 1030.0, 970.0, 1010.0, 990.0, 840.0], ["0.5.17"] * 5 + ["0.5.18"], strict=True)
    ):
        make_run(
            data / "runs",
            f"20990301-0{i}0000-upgr0{i}",
            points=[
                (P1, {"output_throughput": tput / 3, "median_ttft_ms": 50.0}, "d1"),
                (P4, {"output_throughput": tput, "median_ttft_ms": 80.0}, "d4"),
            ],
            facts=run_facts(engine_version=version),
            started_at=f"2099-03-01T0{i}:00:00+00:00",
        )
    return data


@pytest.fixture
def app(data: Path, monkeypatch: pytest.MonkeyPatch) -> AppTest:
    monkeypatch.setenv("SERVELAB_DATA_DIR", str(data))
    monkeypatch.setenv("SERVELAB_WORKER", "off")
    st.cache_resource.clear()
    return AppTest.from_file(str(REPO / "app.py"), default_timeout=60)


def test_a_regression_is_said_at_the_top_with_the_series_link(app: AppTest, data: Path) -> None:
    key = series_of_run(data / "runs", UPGRADED)
    assert key is not None
    page = open_page(app, "pages/history.py", series=key)
    history = load_history(data / "runs", key)
    assert history is not None
    assert [e.value for e in page.error] == [alert_text(history)]  # the CLI's words
    assert page.error[0].value.startswith(f"Regression in {UPGRADED}: output throughput at c=4")
    assert f"`/history?series={key}`" in [m.value for m in page.markdown]
    assert "2 version(s): sglang 0.5.17, sglang 0.5.18" in " ".join(c.value for c in page.caption)
    assert len(page_figures(page)) == 1
    table = page.dataframe[0].value
    assert len(table) == 6 and table.iloc[-1]["checked"] == "◀ checked"
    assert list(table["version"]) == ["sglang 0.5.17"] * 5 + ["sglang 0.5.18"]
    # another point is shown, its band too; the alert stays the headline point's
    page.selectbox(key="history_point").select("c=1").run()
    assert not page.exception and page.error[0].value == alert_text(history)


def test_the_demo_series_of_a_run_has_no_regression(app: AppTest) -> None:
    page = open_page(app, "pages/history.py", run=DEMO_RUN)
    assert not page.error
    assert page.success[0].value.startswith("No regression: output throughput, median TTFT")
    assert "band of the 6 earlier runs" in page.success[0].value
    assert "7 run(s) of this configuration" in " ".join(c.value for c in page.caption)


def test_the_run_page_links_to_its_history(app: AppTest) -> None:
    page = open_page(app, "pages/run.py", run=DEMO_RUN)
    link = next(p for p in page.get("page_link") if "History of this configuration" in p.label)
    assert link.label == "History of this configuration (7 runs)"
    assert dict(urllib.parse.parse_qsl(link.proto.query_string)) == {"run": DEMO_RUN}


def test_the_runs_page_has_a_history_column(app: AppTest) -> None:
    page = open_page(app, "pages/runs.py")
    table = page.dataframe[0].value
    row = table[table["run"] == DEMO_RUN].iloc[0]
    assert row["history"] == f"history?run={DEMO_RUN}"
    cancelled = table[table["status"] == "cancelled"].iloc[0]
    assert pd.isna(cancelled["history"])  # a run without results is in no history


def test_the_demo_version_ab_is_a_two_version_history(data: Path) -> None:
    """The H200 demo's SGLang 0.5.14 vs 0.5.17 experiment: its arms differ only in the
    engine installation, so its 6 runs are one series with two versions."""
    history = load_history(data / "runs", VERSION_AB_RUN)
    assert history is not None and len(history.runs) == 6
    assert {r.version for r in history.runs} == {"sglang 0.5.14", "sglang 0.5.17"}


@pytest.mark.parametrize("params", [{}, {"series": "ser-000000000000"}, {"run": "../etc"}])
def test_no_series_says_how_to_open_one(app: AppTest, params: dict[str, str]) -> None:
    page = open_page(app, "pages/history.py", **params)
    if params:  # a link that names nothing here says so
        assert "No series selected" in page.warning[0].value
    # and a picker instead of a dead end (the sidebar's link has no query string)
    assert [s for s in page.selectbox if s.label.startswith("Pick a run")]
