"""GPU memory on Compare and Run through Streamlit's AppTest for transformers serve on a
CPU host: one line saying what the engine does not report, never an all-"—" headroom
table under an empty chart (issue 24 item 7)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from tests.helpers import open_page, page_figures
from tests.runs_by_hand import make_run

REPO = Path(__file__).resolve().parent.parent
RUNS = ("20990401-000000-cpuoff", "20990401-000001-cpuonn")


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two transformers serve runs as a CPU host leaves them: no memory facts, samples
    with no GPU row."""
    data = tmp_path_factory.mktemp("memory") / "data"
    (data / "runs").mkdir(parents=True)
    facts = {"engine": "transformers", "engine_version": "5.24.0", "gpus": []}
    row = {"t_s": 0.0, "point": 0, "source": "metrics", "name": "x", "labels": "", "value": 1.0}
    for run_id, batching in zip(RUNS, (False, True), strict=True):
        server = {"engine": "transformers", "continuous_batching": batching}
        make_run(data / "runs", run_id, server=server, facts=facts, samples=[row])
    return data


@pytest.fixture
def app(data: Path, monkeypatch: pytest.MonkeyPatch) -> AppTest:
    monkeypatch.setenv("SERVELAB_DATA_DIR", str(data))
    monkeypatch.setenv("SERVELAB_WORKER", "off")
    st.cache_resource.clear()
    return AppTest.from_file(str(REPO / "app.py"), default_timeout=60)


def _charts(app: AppTest) -> str:
    return " ".join(json.dumps(f) for f in page_figures(app))


def test_compare_of_cpu_runs_says_in_one_line_there_is_no_memory(app: AppTest) -> None:
    page = open_page(app, "pages/compare.py", runs=",".join(RUNS))
    lines = [c.value for c in page.caption if "reports no GPU memory" in c.value]
    assert len(lines) == 1 and lines[0].startswith("transformers reports no GPU memory")
    assert "GPU memory at start-up" not in _charts(page)  # no empty chart
    assert not any("weight_mem_gb" in t.value.to_csv() for t in page.table)  # no "—" table


def test_run_page_of_a_cpu_run_draws_no_empty_gpu_chart(app: AppTest) -> None:
    page = open_page(app, "pages/run.py", run=RUNS[0])
    assert any(c.value.startswith("No GPU memory over time") for c in page.caption)
    assert "GPU memory used (MiB)" not in _charts(page)
