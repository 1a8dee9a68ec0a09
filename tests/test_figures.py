"""core.views.figures: trace counts, titles with units, and the empty cases say so."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
import pyarrow as pa
import pytest

from core.analysis.memory import memory_headroom
from core.analysis.runs import RunView, load_run
from core.run.samplers import SAMPLE_SCHEMA
from core.views.figures import (
    CDF_MAX_POINTS,
    cdf_figure,
    gpu_memory_figure,
    memory_headroom_figure,
    metric_vs_concurrency,
    no_gpu_samples_line,
    no_memory_line,
)
from tests.runs_by_hand import P1, P4, P8, make_run, run_facts


def _annotations(fig: go.Figure) -> list[str]:
    return [a.text for a in fig.layout.annotations]


def _views(tmp_path: Path) -> list[RunView]:
    a = make_run(
        tmp_path,
        "a",
        points=[
            (P1, {"median_ttft_ms": 10.0}, "d"),
            (P4, {"median_ttft_ms": 20.0}, "d"),
            (P8, {"median_ttft_ms": 40.0}, "d"),
        ],
    )
    b = make_run(
        tmp_path,
        "b",
        points=[(P1, {"median_ttft_ms": 8.0}, "d"), (P4, {"median_ttft_ms": None}, "d")],
    )
    return [load_run(a), load_run(b)]


def test_cdf_one_line_per_run() -> None:
    fig = cdf_figure({"a": [3.0, 1.0, 2.0], "b": [5.0]}, "TTFT")
    assert len(fig.data) == 2
    assert fig.layout.xaxis.title.text == "TTFT (ms)"
    assert fig.layout.template.layout.to_plotly_json() != {}
    a = fig.data[0]
    assert list(a.x) == [1.0, 2.0, 3.0]
    assert list(a.y) == pytest.approx([1 / 3, 2 / 3, 1.0])
    assert "no values" not in fig.layout.title.text


def test_cdf_names_an_empty_series() -> None:
    fig = cdf_figure({"a": [1.0], "b": []}, "ITL")
    assert len(fig.data) == 1
    assert "no values for b" in fig.layout.title.text
    fig = cdf_figure({"a": []}, "ITL")
    assert len(fig.data) == 0
    assert "no values to plot" in _annotations(fig)


def test_cdf_of_many_values_is_thinned_but_exact_at_the_ends() -> None:
    values = [float(i) for i in range(50_000)]
    fig = cdf_figure({"a": values}, "ITL (ms)")
    x = list(fig.data[0].x)
    assert len(x) <= CDF_MAX_POINTS
    assert x[0] == 0.0 and x[-1] == 49_999.0 and fig.data[0].y[-1] == 1.0
    assert fig.layout.xaxis.title.text == "ITL (ms)"


def test_metric_vs_concurrency(tmp_path: Path) -> None:
    fig = metric_vs_concurrency(_views(tmp_path), "median_ttft_ms")
    assert [t.name for t in fig.data] == ["a", "b"]
    assert list(fig.data[0].x) == [1, 4, 8] and list(fig.data[0].y) == [10.0, 20.0, 40.0]
    assert list(fig.data[1].y) == [8.0, None]  # missing stays a gap, never 0
    assert fig.layout.xaxis.type == "log"
    assert list(fig.layout.xaxis.tickvals) == [1, 2, 4, 8]
    assert fig.layout.xaxis.title.text.startswith("concurrency")
    assert fig.layout.yaxis.title.text == "Median TTFT (ms)"
    assert list(fig.data[0].customdata) == [
        "c=1 rate=inf in=32 out=16",
        "c=4 rate=inf in=32 out=16",
        "c=8 rate=inf in=32 out=16",
    ]
    assert "%{customdata}" in fig.data[0].hovertemplate


def test_metric_vs_concurrency_splits_different_loads(tmp_path: Path) -> None:
    long_in = {**P4, "input_len": 1024}
    a = make_run(
        tmp_path,
        "a",
        points=[
            (P1, {"output_throughput": 1.0}, "d"),
            (P4, {"output_throughput": 2.0}, "d"),
            (long_in, {"output_throughput": 3.0}, "d"),
        ],
    )
    fig = metric_vs_concurrency([load_run(a)], "output_throughput")
    assert len(fig.data) == 2
    assert fig.layout.yaxis.title.text == "Output throughput (tok/s)"


def test_metric_vs_concurrency_without_points(tmp_path: Path) -> None:
    failed = make_run(tmp_path, "failed")
    shutil.rmtree(failed.path / "points")  # failed before its first point
    unbounded = make_run(
        tmp_path,
        "unbounded",
        points=[({**P1, "concurrency": None}, {"output_throughput": 1.0}, "d")],
    )
    fig = metric_vs_concurrency([load_run(failed), load_run(unbounded)], "output_throughput")
    assert len(fig.data) == 0
    assert "no points with a concurrency to plot" in _annotations(fig)
    assert "1 unbounded-concurrency point(s) not shown" in fig.layout.title.text


def _gpu_samples() -> pa.Table:
    rows = []
    for t in range(6):
        point = -1 if t == 0 else (0 if t < 3 else 1)
        for g in range(2):
            rows.append(
                {
                    "t_s": float(t),
                    "point": point,
                    "source": "nvml",
                    "name": "gpu_used_mib",
                    "labels": f"gpu={g}",
                    "value": 1000.0 + t,
                }
            )
        rows.append(
            {
                "t_s": float(t),
                "point": point,
                "source": "metrics",
                "name": "sglang:num_running_reqs",
                "labels": "",
                "value": 3.0,
            }
        )
    return pa.Table.from_pylist(rows, schema=SAMPLE_SCHEMA)


def test_gpu_memory_one_line_per_gpu_with_point_shading() -> None:
    fig = gpu_memory_figure(_gpu_samples(), point_labels={0: "c=1", 1: "c=4"})
    assert [t.name for t in fig.data] == ["GPU 0", "GPU 1"]
    assert len(fig.data[0].x) == 6
    assert len(fig.layout.shapes) == 2
    assert {"c=1", "c=4"} <= set(_annotations(fig))
    assert fig.layout.yaxis.title.text == "used (MiB)"
    assert "(s)" in fig.layout.xaxis.title.text


@pytest.mark.parametrize(
    "samples",
    [
        None,
        pa.Table.from_pylist([], schema=SAMPLE_SCHEMA),
        pa.Table.from_pylist(
            [
                {
                    "t_s": 0.0,
                    "point": 0,
                    "source": "metrics",
                    "name": "x",
                    "labels": "",
                    "value": 1.0,
                }
            ],
            schema=SAMPLE_SCHEMA,
        ),
    ],
)
def test_gpu_memory_without_gpu_rows_says_cpu_host(samples: pa.Table | None) -> None:
    fig = gpu_memory_figure(samples)
    assert len(fig.data) == 0
    assert "no GPU samples (CPU host)" in _annotations(fig)


def test_memory_headroom_bars_omit_unknown_parts(tmp_path: Path) -> None:
    a = make_run(tmp_path, "a", facts=run_facts())
    b = make_run(tmp_path, "b", facts=run_facts(graph_mem_gb=None))
    df = memory_headroom([load_run(a), load_run(b)])
    fig = memory_headroom_figure(df)
    assert [t.name for t in fig.data] == [
        "weights",
        "KV cache",
        "CUDA graphs",
        "free after start-up",
    ]
    assert fig.layout.barmode == "stack"
    graphs = fig.data[2]
    assert list(graphs.x) == ["a", "b"] and list(graphs.y) == [1.25, None]
    assert any("CUDA graphs (b)" in t for t in _annotations(fig))
    assert fig.layout.yaxis.title.text == "GB"
    assert "GB" in fig.layout.title.text


def test_memory_headroom_bars_label_the_cuda_graph_sliver(tmp_path: Path) -> None:
    """The start-up bars hid the CUDA-graph segment, the cost being shown (issue 24 item 7)."""
    off = make_run(tmp_path, "off", facts=run_facts(graph_mem_gb=0.0, kv_cache_gb=118.0))
    on = make_run(tmp_path, "on", facts=run_facts(graph_mem_gb=0.4, kv_cache_gb=128.0))
    fig = memory_headroom_figure(memory_headroom([load_run(off), load_run(on)]))
    graphs = next(t for t in fig.data if t.name == "CUDA graphs")
    labels = {(a.x, a.text): a for a in fig.layout.annotations if a.showarrow}
    weights = next(t for t in fig.data if t.name == "weights").y[1]
    assert labels[("on", "CUDA graphs: 0.4 GB")].y == pytest.approx(weights + 128.0 + 0.2)
    assert ("off", "CUDA graphs: 0 GB") in labels
    assert graphs.marker.color == "#fdae6b"  # the ledger's colour for CUDA graphs


def test_memory_headroom_bars_drop_parts_no_run_reports(tmp_path: Path) -> None:
    a = make_run(tmp_path, "a", facts=run_facts(graph_mem_gb=None))
    fig = memory_headroom_figure(memory_headroom([load_run(a)]))
    assert [t.name for t in fig.data] == ["weights", "KV cache", "free after start-up"]


def test_memory_headroom_bars_empty(tmp_path: Path) -> None:
    a = make_run(tmp_path, "a", facts={"engine": "transformers", "gpus": []})
    for df in (memory_headroom([load_run(a)]), pd.DataFrame()):
        fig = memory_headroom_figure(df)
        assert len(fig.data) == 0
        assert any(t.startswith("no memory facts") for t in _annotations(fig))


def _cpu_run(tmp_path: Path, run_id: str) -> RunView:
    """A transformers serve run on a CPU host: no memory facts, samples without a GPU row."""
    facts = {"engine": "transformers", "engine_version": "5.24.0", "gpus": []}
    row = {"t_s": 0.0, "point": 0, "source": "metrics", "name": "x", "labels": "", "value": 1.0}
    server = {"engine": "transformers"}
    return load_run(make_run(tmp_path, run_id, server=server, facts=facts, samples=[row]))


def test_a_cpu_run_gets_one_memory_line_not_an_empty_table(tmp_path: Path) -> None:
    """On CPU the headroom table was all "—" under an empty chart (issue 24 item 7): one
    line says what this engine does not report instead."""
    views = [_cpu_run(tmp_path, "a"), _cpu_run(tmp_path, "b")]
    line = no_memory_line(memory_headroom(views), views)
    assert line is not None
    assert line.startswith("transformers reports no GPU memory") and "CUDA graphs" in line
    assert no_gpu_samples_line(views[0]) is not None
    gpu = load_run(make_run(tmp_path, "gpu", samples=_gpu_samples().to_pylist()))
    mixed = [views[0], gpu]  # one run that stated memory: the table and chart stay
    assert no_memory_line(memory_headroom(mixed), mixed) is None
    assert no_gpu_samples_line(gpu) is None


def test_figures_use_the_white_template(tmp_path: Path) -> None:
    figs = [
        cdf_figure({"a": [1.0]}, "TTFT"),
        metric_vs_concurrency(_views(tmp_path), "output_throughput"),
        gpu_memory_figure(None),
        memory_headroom_figure(pd.DataFrame()),
    ]
    for fig in figs:
        assert fig.layout.template.layout.plot_bgcolor == "white"
        assert fig.layout.title.text


def test_metric_labels_carry_units() -> None:
    from core.metrics import metric_label

    assert metric_label("p99_itl_ms") == "p99 ITL (ms)"
    assert metric_label("request_throughput") == "Request throughput (req/s)"
    assert metric_label("error_rate") == "Error rate (fraction)"
    assert not math.isnan(len(metric_label("something_new")))


def test_one_colour_per_arm_with_the_baseline_first() -> None:
    from core.views.figures import ARM_PALETTE, arm_colours

    page = arm_colours(["graphs on", "graphs off"], "graphs off")
    trials = arm_colours(["graphs off · a1", "graphs on · b2", "graphs on · c3"], "graphs off · a1")
    assert page["graphs off"] == ARM_PALETTE[0] == trials["graphs off · a1"]
    assert page["graphs on"] == trials["graphs on · b2"] == trials["graphs on · c3"]
    assert page["graphs on"] != page["graphs off"]
