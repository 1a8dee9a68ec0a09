"""The server's view over time (core/analysis/timelines.py): on the shipped H200 runs'
stored data, and end to end through the real pipeline against the fake SGLang, with
/metrics and (metrics off) from its log's scheduler lines."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from core.analysis.runs import load_run
from core.analysis.server_view import server_view
from core.analysis.timelines import (
    SERIES,
    downsample,
    point_spans,
    run_timeline,
    timelines_table,
)
from core.run_folder import RunFolder
from core.settings import DEMO_DIR, Settings
from tests.test_pipeline import only_run, run_cli

SGLANG = "20261201-041412-a1c2da"  # H200, graphs off, mem 0.85, c=1, 16, 64
GRAPHS_ON = "20261201-041412-fd42b1"


def _demo(run_id: str):  # type: ignore[no-untyped-def]
    return load_run(RunFolder(DEMO_DIR / "runs" / run_id))


def test_the_h200_runs_series_line_up_with_its_points() -> None:
    view = _demo(SGLANG)
    t = run_timeline(view)
    assert t.source == "metrics" and t.has_server
    spans = point_spans(view)
    assert sorted(spans) == [0, 1, 2]
    # the server's running requests and the client's in flight agree on each point's load
    for point, c in ((0, 1), (1, 16), (2, 64)):
        running = t.at(point, "running_reqs")["value"].max()
        in_flight = t.at(point, "client_in_flight_reqs")["value"].max()
        assert running == in_flight == c
        # every server sample of a point lies within it, on the point's clock
        server = t.at(point, "kv_used_tokens")["t_point_s"]
        assert server.min() > -1.0 and server.max() <= spans[point][1] - spans[point][0] + 1e-6
    # KV usage is used / pool (the gauge is rounded to 0.00 by SGLang)
    kv = t.at(2, "kv_usage")["value"].max()
    assert kv == pytest.approx(8088 / 5498295)
    assert t.at(2, "decode_graph_share")["value"].max() == 0.0  # graphs off


def test_a_graphs_on_run_ran_its_decode_passes_in_graphs() -> None:
    t = run_timeline(_demo(GRAPHS_ON))
    share = t.at(2, "decode_graph_share")["value"]
    assert len(share) and (share == 1.0).all()
    assert server_view(_demo(GRAPHS_ON), 2).decode_graph_share == 1.0


def test_the_log_fallback_reads_the_same_peaks_from_the_real_log(tmp_path: Path) -> None:
    """The same H200 run with its /metrics rows removed: its log's lines, placed on the
    run's clock, give each point the peaks the metrics gave."""
    import shutil

    dst = tmp_path / SGLANG
    shutil.copytree(DEMO_DIR / "runs" / SGLANG, dst)
    samples = pd.read_parquet(dst / "samples.parquet")
    samples[samples["source"] != "metrics"].to_parquet(dst / "samples.parquet")
    view = load_run(RunFolder(dst))
    t = run_timeline(view)
    assert t.source == "log"
    for point, c in ((0, 1), (1, 16), (2, 64)):
        assert t.at(point, "running_reqs")["value"].max() == c  # no line of a neighbour
        sv = server_view(view, point)
        assert sv.source == "log" and sv.running_peak == c
    assert server_view(view, 2).kv_used_peak_tokens == 8088


def test_downsample_keeps_peaks_of_levels_and_means_of_rates() -> None:
    n = 10_000
    t = np.linspace(0.0, 100.0, n)
    level = np.zeros(n)
    level[4321] = 99.0  # one spike
    frame = pd.concat(
        [
            pd.DataFrame({"point": 0, "series": s, "t_s": t, "t_point_s": t, "value": v})
            for s, v in (("kv_used_tokens", level), ("gen_throughput_tok_s", np.full(n, 7.0)))
        ]
    )
    small = downsample(frame, 50)
    assert small.groupby("series").size().max() <= 50
    assert small[small["series"] == "kv_used_tokens"]["value"].max() == 99.0
    assert (small[small["series"] == "gen_throughput_tok_s"]["value"] == 7.0).all()
    assert SERIES["kv_used_tokens"][1] == "max"


def test_transformers_serve_has_client_series_only() -> None:
    t = run_timeline(_demo("20261130-045815-c6a73d"))
    assert t.source == "none" and not t.has_server
    assert set(t.frame["series"]) == {"client_in_flight_reqs", "client_output_tok_s"}
    table = timelines_table(["A"], [t])
    assert set(table["name"]) == {"A"} and set(table["server_source"]) == {"none"}


@pytest.mark.parametrize("metrics", [True, False], ids=["metrics", "log"])
def test_end_to_end_against_the_fake_sglang(
    fake_sglang: Path,
    settings: Settings,
    tiny_tokenizer_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    metrics: bool,
) -> None:
    """8 requests at once into a server that runs 4: the server says 4 running and some
    queued while the client has 8 in flight, from /metrics or (metrics off) its log."""
    monkeypatch.setenv("FAKE_SGLANG_ITL_MS", "10")
    monkeypatch.setenv("SGLANG_LOG_MS", "1")
    if not metrics:
        monkeypatch.setenv("FAKE_SGLANG_NO_METRICS", "1")
    out = run_cli(
        settings,
        "run",
        "--engine", "sglang",
        "--model", str(tiny_tokenizer_dir),
        "--extra-arg=--max-running-requests", "--extra-arg=4",
        "--extra-arg=--decode-log-interval", "--extra-arg=2",
        "--concurrency", "8",
        "--num-prompts", "32",
        "--input-len", "16",
        "--output-len", "48",
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    folder = only_run(settings)
    view = load_run(folder)
    assert isinstance(view.points[0]["started_run_s"], float)
    t = run_timeline(view)
    assert t.source == ("metrics" if metrics else "log")
    assert t.at(0, "client_in_flight_reqs")["value"].max() == 8
    assert t.at(0, "running_reqs")["value"].max() == 4
    assert t.at(0, "queued_reqs")["value"].max() > 0
    assert t.at(0, "kv_usage")["value"].max() > 0
    assert (t.at(0, "decode_graph_share")["value"] == 1.0).all()
    sv = server_view(view, 0)
    assert sv.source == t.source and sv.running_peak == 4 and (sv.queue_peak or 0) > 0


def test_a_chart_of_one_point_gets_that_points_client_series_and_every_servers() -> None:
    """The pages draw one point: its client series are the full timeline's, the others'
    are not computed, and the server's series (which points have a view) are all there."""
    view = _demo(SGLANG)
    full, one = run_timeline(view), run_timeline(view, points=(1,))
    client = {"client_in_flight_reqs", "client_output_tok_s"}
    assert set(one.frame[one.frame["series"].isin(client)]["point"]) == {1}
    pd.testing.assert_frame_equal(
        one.at(1).reset_index(drop=True), full.at(1).reset_index(drop=True)
    )
    server = run_timeline(view, points=())
    assert server.has_server and sorted(set(server.frame["point"])) == [0, 1, 2]
    assert not server.frame["series"].isin(client).any()


def test_a_finished_points_records_are_read_once_a_rewritten_file_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every page load asks for the timeline again: a finished point's records are read
    once per process, while a file that changed (a running point) is read again, never
    served stale."""
    import shutil

    import pyarrow.parquet as pq

    import core.analysis.timelines as timelines

    dst = tmp_path / SGLANG
    shutil.copytree(DEMO_DIR / "runs" / SGLANG, dst)
    records = dst / "points" / "002" / "records.parquet"
    reads: list[str] = []
    real_read = pq.read_table

    def counting_read(source: str, *args: object, **kwargs: object) -> object:
        reads.append(str(source))
        return real_read(source, *args, **kwargs)

    monkeypatch.setattr(timelines.pq, "read_table", counting_read)
    view = load_run(RunFolder(dst))
    first = run_timeline(view, points=(2,))
    second = run_timeline(view, points=(2,))
    assert reads.count(str(records)) == 1
    assert first.at(2, "client_in_flight_reqs")["value"].max() == 64
    pd.testing.assert_frame_equal(first.frame, second.frame)

    half = real_read(records).slice(0, 8)  # the point as it was early on: 8 requests
    pq.write_table(half, records)
    again = run_timeline(load_run(RunFolder(dst)), points=(2,))
    assert reads.count(str(records)) == 2
    assert again.at(2, "client_in_flight_reqs")["value"].max() <= 8
