"""Imported runs next to a launched one (the fake SGLang), and every export: CSV and
Parquet tables, the HTML report opened from disk in Debian's chromium (Playwright) with its
charts drawn and no network, PNG charts through kaleido, and the portal's pages."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from core.analysis.diff import confounders, unknown_fields
from core.analysis.points import match_points, metric_deltas
from core.analysis.runs import load_run, no_records_note
from core.interop.export import select, verdict_lines
from core.interop.importers import parse_text, plan_runs, store_runs
from core.run_folder import RunFolder, write_json_atomic
from core.settings import Settings
from tests.helpers import CHROMIUM, page_tables

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "tests" / "fixtures" / "bench-outputs"
needs_chromium = pytest.mark.browser  # tests/helpers.require_chromium


def _bench_line(concurrency: int, ttft: float, out_tput: float) -> str:
    """One SGLang bench_serving --output-file line, bare Infinity included."""
    info = {
        "model_path": "/models/tiny",
        "tp_size": 1,
        "version": "0.5.9",
        "max_total_num_tokens": 123456,
        "mem_fraction_static": 0.85,
    }
    return (
        f'{{"backend": "sglang-oai-chat", "dataset_name": "random", "request_rate": '
        f'Infinity, "max_concurrency": {concurrency}, "random_input_len": 16, '
        f'"random_output_len": 12, "random_range_ratio": 1.0, "server_info": '
        f'{json.dumps(info)}, "duration": 1.0, "completed": 8, "total_input_tokens": 128, '
        f'"total_output_tokens": 96, "output_throughput": {out_tput}, "request_throughput":'
        f' 8.0, "total_throughput": 224.0, "mean_ttft_ms": {ttft}, "median_ttft_ms": '
        f'{ttft}, "p99_ttft_ms": {ttft * 1.5}, "median_itl_ms": 5.5, "p99_itl_ms": 9.0, '
        f'"median_tpot_ms": 5.6, "median_e2e_latency_ms": 90.0, "p99_e2e_latency_ms": '
        f"120.0}}"
    )


class Lab:
    def __init__(self, data: Path) -> None:
        self.data = data
        self.settings = Settings(
            data_dir=data, sglang_python=sys.executable, transformers_python=sys.executable
        )
        ids = sorted(p.name for p in self.settings.runs_dir.iterdir())
        self.imported = next(i for i in ids if i.startswith("imp-"))
        self.launched = next(i for i in ids if not i.startswith("imp-"))

    def cli(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "SERVELAB_DATA_DIR": str(self.data)}
        return subprocess.run(
            [sys.executable, "-m", "core", *args],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, tiny_tokenizer_dir: Path) -> Iterator[Lab]:
    """One run launched against the fake SGLang (c=1 and c=4, 16 in / 12 out) and one
    imported bench_serving JSONL measured at the same loads."""
    data = tmp_path_factory.mktemp("export") / "data"
    fake = REPO / "tests" / "fakes" / "sglang_pkg"
    env = {
        **os.environ,
        "SERVELAB_DATA_DIR": str(data),
        "SERVELAB_SGLANG_PYTHON": sys.executable,
        "PYTHONPATH": os.pathsep.join([str(fake), str(REPO)]),
        "FAKE_SGLANG_TTFT_MS": "20",
        # points of 0.6 s and more, scraped every 0.1 s: every point has server samples
        # however busy the host (the timelines and the report's server view need them)
        "FAKE_SGLANG_ITL_MS": "25",
    }
    plan = data.parent / "plan.json"
    plan.write_text('{"plan": {"metrics_interval_s": 0.1}}')
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "core",
            "run",
            "--plan",
            str(plan),
            "--engine",
            "sglang",
            "--model",
            str(tiny_tokenizer_dir),
            "--concurrency",
            "1,4",
            "--num-prompts",
            "8",
            "--input-len",
            "16",
            "--output-len",
            "12",
            "--quiet",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    settings = Settings(
        data_dir=data, sglang_python=sys.executable, transformers_python=sys.executable
    )
    text = _bench_line(1, 30.0, 100.0) + "\n" + _bench_line(4, 35.0, 380.0) + "\n"
    stored = store_runs(plan_runs(parse_text(text, "h200-sweep.jsonl"), settings), settings)
    assert len(stored) == 1
    yield Lab(data)


def test_an_imported_run_compares_against_a_launched_one(lab: Lab) -> None:
    views = [load_run(RunFolder(lab.settings.runs_dir / r)) for r in (lab.launched, lab.imported)]
    assert views[1].imported and not views[0].imported
    matched = match_points(views)
    assert [mp.complete for mp in matched] == [True, True]  # paired by load, both points
    deltas = metric_deltas(views)
    row = deltas[(deltas["metric"] == "median_ttft_ms") & deltas["point"].str.startswith("c=4")]
    assert row.iloc[0][lab.imported] == 35.0 and not math.isnan(row.iloc[0][lab.launched])
    assert row.iloc[0][f"verdict_{lab.imported}"] == "unconfirmed"  # one run each
    tput = deltas[
        (deltas["metric"] == "output_throughput") & deltas["point"].str.startswith("c=4")
    ].iloc[0]
    assert tput[lab.imported] == 380.0
    # what the import does not state is unknown, not a confounder
    unknown = unknown_fields(views)[lab.imported]
    assert "server.device" in unknown and "plan.seed" in unknown
    conf = confounders(views)
    assert not set(conf) & set(unknown)
    assert "plan.points[1]" not in conf  # same load; n= not stated by the import
    sel = select(lab.settings, [lab.launched, lab.imported])
    assert sel.names == ["ServeLab " + lab.launched[-6:], "imported h200-sweep.jsonl"]
    # regressions (if any) come first, a read-with-care line (a busy host's late client
    # timestamps) last: the point-by-point line is the one that names the load
    line = next(x for x in verdict_lines(sel) if "c=4" in x and not x.startswith("Read with"))
    assert "imported h200-sweep.jsonl" in line and "Median TTFT (ms)" in line
    assert "no per-request records" in no_records_note(views[1])


def test_csv_and_parquet_exports(lab: Lab, tmp_path: Path) -> None:
    for fmt in ("csv", "parquet"):
        out = lab.cli(
            "export",
            lab.launched,
            lab.imported,
            "--format",
            fmt,
            "--out",
            str(tmp_path / fmt),
            "--json",
        )
        assert out.returncode == 0, out.stderr
        files = {Path(f).name.split("-")[-1]: Path(f) for f in json.loads(out.stdout)["files"]}
        assert set(files) == {
            f"{n}.{fmt}"
            for n in (
                "summaries",
                "records",
                "config",
                "deltas",
                "config_diff",
                "summary_card",
                "timelines",
            )
        }
        read = pd.read_csv if fmt == "csv" else (lambda p: pq.read_table(p).to_pandas())
        summ = read(files[f"summaries.{fmt}"])
        assert sorted(set(summ["run_id"])) == sorted([lab.launched, lab.imported])
        imp = summ[summ["run_id"] == lab.imported]
        assert list(imp["origin"]) == ["import", "import"]
        assert list(imp["output_throughput"]) == [100.0, 380.0]
        assert list(imp["has_records"]) == [False, False]
        assert "point.num_prompts" in imp["unknown"].iloc[0]
        recs = read(files[f"records.{fmt}"])
        assert set(recs["run_id"]) == {lab.launched} and len(recs) == 16
        assert recs["ttft_ms"].notna().all()
        deltas = read(files[f"deltas.{fmt}"])
        assert f"verdict_{lab.imported}" in deltas.columns
        # the server's view beside the client's, per run and point (the import has none)
        lines = read(files[f"timelines.{fmt}"])
        assert set(lines["run_id"]) == {lab.launched}
        assert set(lines["server_source"]) == {"metrics"} and set(lines["point"]) == {0, 1}
        assert {"running_reqs", "kv_usage", "client_in_flight_reqs"} <= set(lines["series"])
        at_c4 = lines[(lines["point"] == 1) & (lines["series"] == "client_in_flight_reqs")]
        assert at_c4["value"].max() == 4


def test_experiment_export_carries_arm_and_trial(lab: Lab, tmp_path: Path) -> None:
    exp_id = "exp-handmade-1"
    folder = lab.data / "experiments" / exp_id
    folder.mkdir(parents=True)
    write_json_atomic(
        folder / "experiment.json",
        {
            "experiment_id": exp_id,
            "host": "test",
            "spec": {
                "name": "launched vs imported",
                "arms": [{"label": "ours", "changes": {}}, {"label": "theirs", "changes": {}}],
                "trials": 1,
                "order_seed": 1,
                "kind": "ab",
            },
            "runs": [
                {"run_id": lab.launched, "arm": "ours", "trial": 0},
                {"run_id": lab.imported, "arm": "theirs", "trial": 0},
            ],
        },
    )
    out = lab.cli("export", exp_id, "--format", "csv", "--out", str(tmp_path))
    assert out.returncode == 0, out.stderr
    summ = pd.read_csv(tmp_path / f"{exp_id}-summaries.csv")
    assert set(zip(summ["run_id"], summ["arm"], strict=True)) == {
        (lab.launched, "ours"),
        (lab.imported, "theirs"),
    }
    html = lab.cli("export", exp_id, "--format", "html", "--out", str(tmp_path))
    assert html.returncode == 0, html.stderr
    report = (tmp_path / f"{exp_id}.html").read_text()
    assert "launched vs imported" in report
    # trials counted from 1, as on the pages: names, provenance and the per-run table
    assert "ours · trial 1" in report and "ours / trial 1" in report
    assert not re.search(r"trial 0(?![.\d])", report)
    per_run = report.split("Per run and point")[1].split("</table>")[0]
    assert re.findall(r"<td>imp-\w+</td>\s*<td>theirs</td>\s*<td>(\d+)</td>", per_run) == ["1", "1"]


def _browser():  # type: ignore[no-untyped-def]
    from playwright.sync_api import sync_playwright

    from core.interop.export import CHROMIUM_ARGS

    pw = sync_playwright().start()
    browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
    return pw, browser


@needs_chromium
def test_html_report_opens_offline_with_its_charts_drawn(lab: Lab, tmp_path: Path) -> None:
    out = lab.cli(
        "export", lab.launched, lab.imported, "--format", "html", "--out", str(tmp_path), "--json"
    )
    assert out.returncode == 0, out.stderr
    (report,) = [Path(f) for f in json.loads(out.stdout)["files"]]
    text = report.read_text()
    # plotly.js inlined once (MBs), every chart drawn by it; the browser below checks that
    # nothing at all is fetched
    assert len(text) > 3_000_000 and text.count("Plotly.newPlot") >= 4
    pw, browser = _browser()
    try:
        page = browser.new_page(viewport={"width": 1300, "height": 900})
        requests: list[str] = []
        page.on("request", lambda r: requests.append(r.url))
        page.goto(report.as_uri())
        page.wait_for_selector(".main-svg", timeout=30_000)
        charts = page.locator("div.chart").count()
        drawn = page.evaluate(
            "() => [...document.querySelectorAll('div.chart')].filter("
            "c => c.querySelector('.main-svg .plot, .main-svg .barlayer, "
            ".main-svg .scatterlayer')).length"
        )
        assert charts >= 4 and drawn == charts
        assert page.locator(".main-svg").count() >= charts
        body = page.inner_text("body")
        assert "Verdict:" in body and lab.imported in body and lab.launched in body
        assert "no per-request records" in body and "Provenance" in body
        assert "sglang.launch_server" in body  # the launched run's command
        assert "h200-sweep.jsonl" in body  # the imported run's source
        # the server's view at the headline point; the import says in one line it has none
        assert page.locator("div.chart[data-chart='server_view'] .scatterlayer").count() >= 1
        assert "imported from a file: the tool's summaries only" in body
        assert [u for u in requests if not u.startswith(("file:", "data:", "about:"))] == []
        (REPO / "test-artifacts").mkdir(exist_ok=True)
        page.screenshot(path=str(REPO / "test-artifacts" / "export-report.png"), full_page=True)
    finally:
        browser.close()
        pw.stop()


@needs_chromium
def test_png_charts_through_kaleido_and_debian_chromium(lab: Lab, tmp_path: Path) -> None:
    out = lab.cli(
        "export", lab.launched, lab.imported, "--format", "png", "--out", str(tmp_path), "--json"
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["note"].startswith("rendered by kaleido")
    names = {Path(f).name for f in result["files"]}
    assert {"output_throughput_vs_concurrency.png", "ttft_cdf.png", "memory_headroom.png"} <= names
    for f in result["files"]:
        data = Path(f).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5_000


# --- the portal -----------------------------------------------------------------------------


@pytest.fixture
def app(monkeypatch: pytest.MonkeyPatch) -> AppTest:
    monkeypatch.setenv("SERVELAB_WORKER", "off")
    st.cache_resource.clear()
    return AppTest.from_file(str(REPO / "app.py"), default_timeout=60)


def test_run_page_says_an_imported_run_has_no_records(
    lab: Lab, app: AppTest, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SERVELAB_DATA_DIR", str(lab.data))
    app.query_params["run"] = lab.imported
    app.run()
    app.switch_page("pages/run.py").run()
    assert not app.exception, app.exception
    infos = " ".join(i.value for i in app.info)
    assert "Imported from **h200-sweep.jsonl**" in infos
    assert "no per-request records" in infos and "No GPU memory samples" in infos
    assert any("c=4" in df.value.to_csv() for df in app.dataframe)
    labels = [b.label for b in app.get("download_button")]
    assert "Report (HTML, opens offline)" in labels and "Tables as CSV (zip)" in labels


def test_compare_page_with_an_imported_run(
    lab: Lab, app: AppTest, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SERVELAB_DATA_DIR", str(lab.data))
    app.query_params["runs"] = f"{lab.launched},{lab.imported}"
    app.run()
    app.session_state["cmp_all_metrics"] = True  # open the full metrics table (drawn lazily)
    app.switch_page("pages/compare.py").run()
    assert not app.exception, app.exception
    infos = " ".join(i.value for i in app.info)
    assert f"**imported h200-sweep.jsonl** ({lab.imported}) does not state" in infos
    assert "no per-request records" in infos
    assert not any("different prompts" in w.value for w in app.warning)
    tables = " ".join(df.to_csv() for df in page_tables(app))
    assert "verdict_imported h200-sweep.jsonl" in tables  # named, not by id
    labels = [b.label for b in app.get("download_button")]
    assert "Tables as Parquet (zip)" in labels


def test_import_page_previews_then_imports_and_links(
    settings: Settings, app: AppTest, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SERVELAB_DATA_DIR", str(settings.data_dir))
    app.run()
    app.switch_page("pages/import_export.py").run()
    assert not app.exception, app.exception

    def run_ids() -> set[str]:  # the portal may seed demo runs on first start
        return (
            {p.name for p in settings.runs_dir.iterdir()} if settings.runs_dir.exists() else set()
        )

    before = run_ids()
    text = (BENCH / "07-sglang-v05-gptoss20b-input-output-header-lines.txt").read_text()
    app.text_area(key="imp_text").set_value(text)
    app.text_input(key="imp_in").set_value("256")
    app.button(key="imp_preview").click().run()
    assert not app.exception, app.exception
    assert run_ids() == before  # a preview stores nothing
    page_text = " ".join(m.value for m in app.markdown)
    assert "would be stored as" in page_text
    table = app.dataframe[0].value
    assert table["output_throughput"].iloc[0] == 282.29 and "in=256" in table["point"].iloc[0]
    app.button(key="imp_import").click().run()
    assert not app.exception, app.exception
    (stored,) = run_ids() - before
    assert any(stored in s.value for s in app.success)
    summary = RunFolder(settings.runs_dir / stored).point_summaries()[0]
    assert summary["point"]["input_len"] == 256 and summary["given"] == ["point.input_len"]
    app.text_input(key="imp_in").set_value("x")
    app.button(key="imp_preview").click().run()
    assert any("whole number" in e.value for e in app.error)


@needs_chromium
@pytest.mark.parametrize("renderer", ["kaleido", "playwright"])
def test_png_renderers_in_process(
    lab: Lab, tmp_path: Path, renderer: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In this process, so the autouse no_orphans check sees any browser left behind.
    ``playwright``: kaleido made to fail, the fallback screenshots the chart's HTML."""
    from core.interop import export, export_png

    if renderer == "playwright":

        def broken(*_a: object, **_k: object) -> list[Path]:
            raise RuntimeError("kaleido cannot start a browser here")

        monkeypatch.setattr(export_png, "_kaleido_pngs", broken)
    figs, _notes = export.figures(select(lab.settings, [lab.launched, lab.imported]))
    small = {k: figs[k] for k in ("output_throughput_vs_concurrency", "memory_headroom")}
    paths, used = export.write_pngs(small, tmp_path)
    assert used.startswith(renderer)
    assert [p.name for p in paths] == [
        "output_throughput_vs_concurrency.png",
        "memory_headroom.png",
    ]
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in paths)
