"""The server's view over time on Run, Compare and Experiment, through Streamlit's AppTest,
for every engine case: SGLang with /metrics, SGLang without --enable-metrics (its log's
scheduler lines), transformers serve (none: one line, no empty chart), an imported run."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from core.interop.importers import parse_text, plan_runs, store_runs
from core.portal.demo import install_demo
from core.settings import Settings
from tests.helpers import open_page, page_figures

REPO = Path(__file__).resolve().parent.parent
H200_EXP = "exp-20261201-041412-6b50"  # graphs x mem_fraction_static, 3 trials
SGLANG = "20261201-041412-a1c2da"  # graphs off, mem 0.85, sampled with --enable-metrics
TRANSFORMERS = "20261130-045815-c6a73d"  # transformers serve on the CPU
NO_METRICS = "20990301-000000-nometr"  # SGLANG's folder as if --enable-metrics were off


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    data = tmp_path_factory.mktemp("timelines") / "data"
    settings = Settings(
        data_dir=data, sglang_python=sys.executable, transformers_python=sys.executable
    )
    install_demo(settings)
    # The same real run without its /metrics rows: what a server without --enable-metrics
    # leaves (GPU rows only), so the view must come from its real log's scheduler lines.
    dst = data / "runs" / NO_METRICS
    shutil.copytree(data / "runs" / SGLANG, dst)
    samples = pd.read_parquet(dst / "samples.parquet")
    samples[samples["source"] != "metrics"].to_parquet(dst / "samples.parquet")
    spec = json.loads((dst / "spec.json").read_text())
    spec["run_id"] = NO_METRICS
    (dst / "spec.json").write_text(json.dumps(spec))
    text = (
        '{"backend": "sglang-oai-chat", "max_concurrency": 64, "random_input_len": 64, '
        '"random_output_len": 64, "request_rate": Infinity, "completed": 64, '
        '"output_throughput": 2500.0, "median_ttft_ms": 80.0, "duration": 2.0}\n'
    )
    imported = store_runs(plan_runs(parse_text(text, "h200-sweep.jsonl"), settings), settings)
    return {"dir": data, "imported": imported[0]}


@pytest.fixture
def app(data: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> AppTest:
    monkeypatch.setenv("SERVELAB_DATA_DIR", str(data["dir"]))
    monkeypatch.setenv("SERVELAB_WORKER", "off")
    st.cache_resource.clear()
    return AppTest.from_file(str(REPO / "app.py"), default_timeout=60)


def _timeline_figures(app: AppTest) -> list[dict[str, Any]]:
    figs = page_figures(app)
    return [f for f in figs if "server's view" in str(f["layout"].get("title", {}).get("text"))]


def _text(app: AppTest) -> str:
    return " ".join(str(x.value) for x in (*app.markdown, *app.caption))


def _series(fig: dict[str, Any]) -> set[str]:
    """The series drawn, by their words in each line's hover text (``label: series``)."""
    return {t["hovertemplate"].split("<br>")[0].rsplit(": ", 1)[1] for t in fig["data"]}


def test_run_page_with_metrics_draws_the_servers_view_beside_the_client(app: AppTest) -> None:
    page = open_page(app, "pages/run.py", run=SGLANG)
    assert "The server's view over time" in [h.value for h in page.subheader]
    (fig,) = _timeline_figures(page)
    assert "from metrics" in fig["layout"]["title"]["text"]
    assert {"running", "queued", "in flight (client)", "KV usage", "gen (server)"} <= _series(fig)
    # the headline point (c=64): the server ran 64 at its peak, and KV stayed near empty
    text = _text(page)
    assert "peak 64 running" in text and "KV peak 0.15% of 5.50 M tokens" in text
    assert "decode passes in CUDA graphs 0%" in text  # a graphs-off arm


def test_run_page_without_metrics_reads_the_log(app: AppTest) -> None:
    page = open_page(app, "pages/run.py", run=NO_METRICS)
    (fig,) = _timeline_figures(page)
    assert "from log" in fig["layout"]["title"]["text"]
    assert {"running", "KV usage", "gen (server)", "in flight (client)"} <= _series(fig)
    assert "(log): KV peak 0.15% of 5.50 M tokens" in _text(page)


@pytest.mark.parametrize("which", ["transformers", "imported"])
def test_run_page_of_an_engine_with_no_view_says_so_in_one_line(
    app: AppTest, data: dict[str, Any], which: str
) -> None:
    run_id = TRANSFORMERS if which == "transformers" else data["imported"]
    page = open_page(app, "pages/run.py", run=run_id)
    assert _timeline_figures(page) == []  # no empty chart
    lines = [c.value for c in page.caption if "no server-side view" in c.value]
    expected = (
        "transformers reports no server-side view"
        if which == "transformers"
        else ("imported from a file")
    )
    assert len(lines) == 1 and expected in lines[0]


def test_compare_overlays_both_arms_in_their_colours(app: AppTest) -> None:
    on = "20261201-041412-fd42b1"
    page = open_page(app, "pages/compare.py", runs=f"{SGLANG},{on},{TRANSFORMERS}")
    (fig,) = _timeline_figures(page)
    colours = {t["legendgroup"]: t["line"]["color"] for t in fig["data"]}
    assert len(colours) == 2 and len(set(colours.values())) == 2  # one colour per arm
    # the third run says why it has no lines, once
    assert sum("reports no server-side view" in c.value for c in page.caption) == 1


def test_experiment_draws_one_run_per_arm_in_its_colour(app: AppTest) -> None:
    page = open_page(app, "pages/experiment.py", experiment=H200_EXP)
    (fig,) = _timeline_figures(page)
    colours: dict[str, set[str]] = {}
    for t in fig["data"]:
        colours.setdefault(t["legendgroup"], set()).add(t["line"]["color"])
    assert len(colours) == 4 and all(len(c) == 1 for c in colours.values())
    assert len({next(iter(c)) for c in colours.values()}) == 4
    assert sum(t["showlegend"] for t in fig["data"]) == 4  # one legend entry per arm
    assert "at c=64" in fig["layout"]["title"]["text"]
    assert "One run per arm: its first trial" in _text(page)
    # graphs on ran every decode pass in graphs, graphs off none
    text = _text(page)
    assert text.count("decode passes in CUDA graphs 100%") == 2
    assert text.count("decode passes in CUDA graphs 0%") == 2


def _ledger_bars(app: AppTest) -> list[str]:
    figs = page_figures(app)
    (fig,) = [f for f in figs if "memory ledger" in str(f["layout"].get("title", {}).get("text"))]
    return sorted({y for t in fig["data"] for y in t["y"]})


def test_the_answer_comes_first_and_the_ledger_has_a_bar_per_arm(app: AppTest) -> None:
    """The seed pair (graphs off + 0.85 vs graphs on + 0.92) on Compare and the H200 2x2 on
    Experiment: the verdict, first, says the memory fraction was not tested by this
    workload; the ledger draws one bar per arm."""
    before, after = "20261201-000311-8d8413", "20261201-000511-eb5799"
    for page, arms in (
        (open_page(app, "pages/compare.py", runs=f"{before},{after}"), 2),
        (
            open_page(
                AppTest.from_file(str(REPO / "app.py"), default_timeout=60),
                "pages/experiment.py",
                experiment=H200_EXP,
            ),
            4,
        ),
    ):
        heads = [h.value for h in page.subheader]
        assert heads.index("Verdict") < heads.index("Summary")
        first = next(m.value for m in page.markdown if "mem_fraction_static" in m.value)
        assert "not tested by this workload" in first
        assert "The server's view over time" in heads and "Memory ledger" in heads
        assert len(_ledger_bars(page)) == arms


def test_run_page_ledger(app: AppTest) -> None:
    assert len(_ledger_bars(open_page(app, "pages/run.py", run=SGLANG))) == 1
