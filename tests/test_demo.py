"""The shipped H200 demo installs into an empty data folder and reads as a real result."""

from __future__ import annotations

from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from core.demo import DEMO_DIR, install_demo
from core.experiments import list_experiments
from core.report import format_experiment
from core.settings import Settings
from core.store import Catalog

REPO = Path(__file__).resolve().parent.parent


def test_demo_installs_once_and_is_indexed(settings: Settings) -> None:
    copied = install_demo(settings)
    assert len([c for c in copied if not c.startswith("exp-")]) == 6
    assert install_demo(settings) == []  # once only, never overwrites
    cat = Catalog(settings.catalog_path, settings.runs_dir)
    cat.sync()
    rows = cat.list_runs()
    assert {r["state"] for r in rows} == {"succeeded"}
    assert {r["cuda_graphs"] for r in rows} == {True, False}
    (record,) = list_experiments(settings)
    text = format_experiment(settings, record)
    # the real H200 result: graphs on is far faster at every concurrency
    assert "runs: succeeded=6" in text and "confounders: none." in text
    assert "(95% CI +" in text


def test_experiment_page_shows_the_demo_verdict(settings: Settings,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    assert DEMO_DIR.is_dir()
    monkeypatch.setenv("SERVELAB_DATA_DIR", str(settings.data_dir))
    monkeypatch.setenv("SERVELAB_WORKER", "off")
    st.cache_resource.clear()
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=60)
    at.run()
    (record,) = list_experiments(settings)
    at.query_params["experiment"] = record["experiment_id"]
    at.switch_page("pages/experiment.py").run()
    assert not at.exception, at.exception
    text = " ".join(m.value for m in at.markdown)
    assert "output throughput at concurrency 1 (95% CI +" in text
    assert any("Runs (6/6 finished)" in e.label for e in at.expander)
