"""core.analysis.compare over run folders built by hand: config diffs and confounders, metric deltas
paired by load, prompt digests, memory headroom and per-request latencies."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from core.analysis.diff import config_diff, confounders, derived_differences, flatten_config
from core.analysis.memory import memory_headroom, peak_gpu_mib_by_point
from core.analysis.points import METRIC_DIRECTIONS, match_points, metric_deltas, prompt_check
from core.analysis.roles import arm_names, baseline_index, headline_point
from core.analysis.runs import latency_samples, load_run
from core.config import BenchmarkPlan, Point, RunSpec, ServerConfig
from core.experiments.design import control_of
from core.metrics import compute_point_metrics
from core.records import RequestRecord, records_to_table
from core.run.samplers import SAMPLE_SCHEMA
from core.run_folder import RunFolder, find_runs, is_run_id

P1 = {"concurrency": 1, "request_rate": "inf", "num_prompts": 4, "input_len": 32, "output_len": 16}
P4 = {**P1, "concurrency": 4, "num_prompts": 8}
P8 = {**P1, "concurrency": 8, "num_prompts": 8}


def _label(p: dict[str, Any]) -> str:
    return Point.model_validate(p).label


def _argv(port: int, *extra: str) -> list[str]:
    return [
        "/usr/bin/python3",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "/models/m",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--tp-size",
        "1",
        *extra,
        "--enable-metrics",
    ]


def _facts(**over: Any) -> dict[str, Any]:
    facts: dict[str, Any] = {
        "engine_version": "0.5.23",
        "kv_cache_tokens": 500_000,
        "weight_mem_gb": 15.2,
        "kv_cache_gb": 100.5,
        "graph_mem_gb": 1.25,
        "available_gpu_mem_gb": 12.0,
        "cuda_graph_batch_sizes": [1, 2, 4, 8],
        "cuda_graph_enabled": True,
        "mem_fraction_static": 0.85,
        "attention_backend": "fa3",
        "startup_s": 40.0,
        "ready_after_s": 41.0,
        "server_info_raw": {"huge": "ignored"},
        "gpus": [{"gpu": 0, "used_mib": 130_000.0, "total_mib": 143_771.0, "name": "NVIDIA H200"}],
    }
    facts.update(over)
    return facts


def _records(send_gap: float = 0.0, scale: float = 1.0) -> list[RequestRecord]:
    """Three successful requests (one with a single output token: no TPOT) and one
    failure (excluded from latencies)."""
    return [
        RequestRecord(
            index=0,
            send_s=0.0,
            prompt_tokens=32,
            output_tokens_requested=4,
            chunk_s=[0.05 * scale, 0.07 * scale, 0.10 * scale, 0.12 * scale],
            end_s=0.13 * scale,
            ok=True,
            output_tokens_server=4,
        ),
        RequestRecord(
            index=1,
            send_s=send_gap,
            prompt_tokens=32,
            output_tokens_requested=4,
            chunk_s=[send_gap + 0.08 * scale, send_gap + 0.11 * scale],
            end_s=send_gap + 0.2 * scale,
            ok=True,
            output_tokens_server=3,
        ),
        RequestRecord(
            index=2,
            send_s=0.01,
            prompt_tokens=32,
            output_tokens_requested=1,
            chunk_s=[0.04],
            end_s=0.05,
            ok=True,
            output_tokens_server=1,
        ),
        RequestRecord(
            index=3,
            send_s=0.02,
            prompt_tokens=32,
            output_tokens_requested=4,
            chunk_s=[0.5],
            end_s=None,
            ok=False,
            error="truncated stream",
        ),
    ]


def make_run(
    runs: Path,
    run_id: str,
    *,
    server: dict[str, Any] | None = None,
    points: list[tuple[dict[str, Any], dict[str, Any], str]] | None = None,
    facts: dict[str, Any] | None = None,
    argv: list[str] | None = None,
    intended: list[str] | None = None,
    records: list[RequestRecord] | None = None,
    samples: list[dict[str, Any]] | None = None,
) -> RunFolder:
    """A run folder as the pipeline leaves it. ``points``: (point, metrics, digest)."""
    points = points if points is not None else [(P1, {"output_throughput": 100.0}, "d1")]
    spec = RunSpec(
        server=ServerConfig(**(server or {"engine": "sglang"})),
        plan=BenchmarkPlan(points=tuple(Point.model_validate(p) for p, _, _ in points)),
    )
    folder = RunFolder.create(runs, run_id)
    spec_json: dict[str, Any] = {
        "run_id": run_id,
        "created_at": "2026-01-01T00:00:00+00:00",
        **spec.model_dump(mode="json"),
    }
    if intended is not None:
        spec_json["intended_diff"] = intended
    folder.write("spec.json", spec_json)
    folder.write("status.json", {"run_id": run_id, "state": "succeeded", "phase": "done"})
    folder.write("facts.json", facts if facts is not None else _facts())
    folder.write(
        "launch.json", {"argv": argv if argv is not None else _argv(30000), "engine": "sglang"}
    )
    folder.write("probe.json", {"prompt": "q", "answer": "Paris", "passed": True, "reason": "ok"})
    for i, (point, metrics, digest) in enumerate(points):
        folder.point_dir(i)
        folder.write(
            f"points/{i:03d}/summary.json",
            {
                "index": i,
                "label": _label(point),
                "point": point,
                "prompts_digest": digest,
                "token_source": "server",
                "metrics": metrics,
                "metrics_retokenized": metrics,
                "client": {},
            },
        )
        if records is not None:
            folder.write_table(f"points/{i:03d}/records.parquet", records_to_table(records))
    if samples is not None:
        folder.write_table("samples.parquet", pa.Table.from_pylist(samples, schema=SAMPLE_SCHEMA))
    return folder


# --- configuration ----------------------------------------------------------------------------


def test_seed_trap_names_the_unintended_memory_fraction(tmp_path: Path) -> None:
    a = make_run(
        tmp_path,
        "a",
        server={"engine": "sglang", "cuda_graphs": False, "mem_fraction_static": 0.85},
        argv=_argv(30000, "--mem-fraction-static", "0.85", "--disable-cuda-graph"),
        facts=_facts(
            mem_fraction_static=0.85, cuda_graph_enabled=False, cuda_graph_batch_sizes=None
        ),
        intended=["server.cuda_graphs"],
    )
    b = make_run(
        tmp_path,
        "b",
        server={"engine": "sglang", "cuda_graphs": True, "mem_fraction_static": 0.92},
        argv=_argv(30001, "--mem-fraction-static", "0.92"),
        facts=_facts(mem_fraction_static=0.92),
        intended=["server.cuda_graphs"],
    )
    views = [load_run(a), load_run(b)]

    assert confounders(views) == ["server.mem_fraction_static"]
    assert confounders(views, {"server.cuda_graphs"}) == ["server.mem_fraction_static"]
    assert confounders(views, {"cuda_graphs"}) == ["server.mem_fraction_static"]

    diff = config_diff(views)
    assert list(diff.columns) == ["field", "a", "b"]
    assert list(diff["field"][:2]) == ["server.cuda_graphs", "server.mem_fraction_static"]
    row = diff.set_index("field").loc["server.mem_fraction_static"]
    assert (row["a"], row["b"]) == (0.85, 0.92)
    derived = derived_differences(views)
    assert {
        "facts.mem_fraction_static",
        "facts.cuda_graph_enabled",
        "facts.cuda_graph_batch_sizes",
        "launch.argv",
    } == set(derived)


def test_clean_ab_has_no_confounders(tmp_path: Path) -> None:
    a = make_run(
        tmp_path,
        "a",
        server={"engine": "sglang", "cuda_graphs": False},
        intended=["server.cuda_graphs"],
    )
    b = make_run(
        tmp_path,
        "b",
        server={"engine": "sglang", "cuda_graphs": True},
        intended=["server.cuda_graphs"],
    )
    views = [load_run(a), load_run(b)]
    assert confounders(views) == []
    # Nothing declared: one differing field is the comparison itself.
    assert confounders(views, set()) == []
    assert list(config_diff(views)["field"]) == ["server.cuda_graphs"]


def test_without_intended_every_spec_difference_is_a_confounder(tmp_path: Path) -> None:
    a = make_run(
        tmp_path,
        "a",
        server={"engine": "sglang", "cuda_graphs": False, "mem_fraction_static": 0.85},
    )
    b = make_run(
        tmp_path, "b", server={"engine": "sglang", "cuda_graphs": True, "mem_fraction_static": 0.92}
    )
    views = [load_run(a), load_run(b)]
    assert confounders(views) == ["server.cuda_graphs", "server.mem_fraction_static"]


def test_port_only_argv_difference_is_no_difference(tmp_path: Path) -> None:
    a = make_run(tmp_path, "a", argv=_argv(30000))
    b = make_run(tmp_path, "b", argv=_argv(41234))
    c = make_run(tmp_path, "c", argv=[*_argv(30000)[:7], "--port=51234", *_argv(30000)[9:]])
    views = [load_run(a), load_run(b)]
    flat = flatten_config(views[0])
    assert "--port <port>" in flat["launch.argv"] and "30000" not in flat["launch.argv"]
    assert config_diff(views).empty
    assert derived_differences(views) == [] and confounders(views) == []
    assert "--port=<port>" in flatten_config(load_run(c))["launch.argv"]


def test_flatten_config_fields(tmp_path: Path) -> None:
    view = load_run(make_run(tmp_path, "a", points=[(P1, {}, "d"), (P4, {}, "d")]))
    flat = flatten_config(view)
    assert flat["server.engine"] == "sglang"
    assert flat["plan.points[0]"] == "c=1 rate=inf in=32 out=16 n=4"
    assert flat["plan.points[1]"] == "c=4 rate=inf in=32 out=16 n=8"
    assert flat["plan.probe.expect"] == "(?i)paris"
    assert flat["facts.gpu"] == "NVIDIA H200"
    assert flat["facts.cuda_graph_batch_sizes"] == "1,2,4,8"
    assert flat["facts.kv_cache_tokens"] == 500_000
    assert flat["facts.mem_fraction_static"] == 0.85
    assert "server_info_raw" not in view.facts


def test_plan_differences_are_confounders_and_prefix_intended_covers_subfields(
    tmp_path: Path,
) -> None:
    a = make_run(tmp_path, "a", points=[(P1, {}, "d")], intended=["plan.points"])
    b = make_run(tmp_path, "b", points=[(P4, {}, "d"), (P8, {}, "d")], intended=["plan.points"])
    views = [load_run(a), load_run(b)]
    diff = list(config_diff(views)["field"])
    assert {"plan.points.count", "plan.points[0]", "plan.points[1]"} <= set(diff)
    assert confounders(views) == []


# --- metric deltas ----------------------------------------------------------------------------


def _three_runs(tmp_path: Path) -> list[Any]:
    base = {"output_throughput": 100.0, "median_ttft_ms": 50.0, "error_rate": 0.0}
    faster = {"output_throughput": 120.0, "median_ttft_ms": 40.0, "error_rate": 0.0}
    slower = {"output_throughput": 90.0, "median_ttft_ms": 60.0, "error_rate": 0.25}
    return [
        load_run(make_run(tmp_path, rid, points=[(P1, m, "d1")]))
        for rid, m in (("a", base), ("b", faster), ("c", slower))
    ]


def test_deltas_and_verdicts_follow_each_metrics_direction(tmp_path: Path) -> None:
    views = _three_runs(tmp_path)
    df = metric_deltas(views, metrics=["output_throughput", "median_ttft_ms", "error_rate"])
    assert list(df.columns) == [
        "point",
        "metric",
        "direction",
        "a",
        "b",
        "c",
        "delta_b",
        "rel_b",
        "verdict_b",
        "delta_c",
        "rel_c",
        "verdict_c",
        "same_prompts",
    ]
    t = df.set_index("metric")
    assert t.loc["output_throughput", "direction"] == "higher"
    assert t.loc["median_ttft_ms", "direction"] == "lower"
    assert t.loc["output_throughput", "delta_b"] == pytest.approx(20.0)
    assert t.loc["output_throughput", "rel_b"] == pytest.approx(0.2)
    assert t.loc["output_throughput", "verdict_b"] == "better"
    assert t.loc["median_ttft_ms", "delta_b"] == pytest.approx(-10.0)
    assert t.loc["median_ttft_ms", "rel_b"] == pytest.approx(-0.2)
    assert t.loc["median_ttft_ms", "verdict_b"] == "better"
    assert t.loc["output_throughput", "verdict_c"] == "worse"
    assert t.loc["output_throughput", "rel_c"] == pytest.approx(-0.1)
    assert t.loc["median_ttft_ms", "verdict_c"] == "worse"
    assert t.loc["median_ttft_ms", "rel_c"] == pytest.approx(0.2)
    # A zero baseline has no relative change, but the direction still decides.
    assert math.isnan(t.loc["error_rate", "rel_c"])
    assert t.loc["error_rate", "verdict_c"] == "worse"
    assert t.loc["error_rate", "verdict_b"] == "no change"
    assert bool(df["same_prompts"].all())

    # Another baseline: b is now the reference, a is worse on both.
    t2 = metric_deltas(views, baseline=1, metrics=["output_throughput"]).set_index("metric")
    assert t2.loc["output_throughput", "delta_a"] == pytest.approx(-20.0)
    assert t2.loc["output_throughput", "verdict_a"] == "worse"


def test_changes_under_half_a_percent_are_no_change(tmp_path: Path) -> None:
    a = make_run(
        tmp_path, "a", points=[(P1, {"output_throughput": 100.0, "p99_itl_ms": 10.0}, "d")]
    )
    b = make_run(
        tmp_path, "b", points=[(P1, {"output_throughput": 100.4, "p99_itl_ms": 10.06}, "d")]
    )
    t = metric_deltas(
        [load_run(a), load_run(b)], metrics=["output_throughput", "p99_itl_ms"]
    ).set_index("metric")
    assert list(t["verdict_b"]) == ["no change", "worse"]


def test_default_metrics_have_directions(tmp_path: Path) -> None:
    views = _three_runs(tmp_path)
    df = metric_deltas(views)
    assert set(df["metric"]) <= set(METRIC_DIRECTIONS)
    assert METRIC_DIRECTIONS["p99_itl_ms"] == "lower"
    assert METRIC_DIRECTIONS["request_throughput"] == "higher"


def test_unmatched_points_give_nan_not_a_positional_pairing(tmp_path: Path) -> None:
    a = make_run(
        tmp_path,
        "a",
        points=[(P1, {"output_throughput": 10.0}, "d1"), (P4, {"output_throughput": 40.0}, "d4")],
    )
    # b measured c=8 second and c=1 last: by position, c=4 would meet c=8.
    b = make_run(
        tmp_path,
        "b",
        points=[(P8, {"output_throughput": 80.0}, "d8"), (P1, {"output_throughput": 11.0}, "d1")],
    )
    views = [load_run(a), load_run(b)]
    df = metric_deltas(views, metrics=["output_throughput"]).set_index("point")
    assert list(df.index) == [_label(P1), _label(P4), _label(P8)]
    assert df.loc[_label(P1), "b"] == 11.0
    assert df.loc[_label(P1), "delta_b"] == pytest.approx(1.0)
    assert df.loc[_label(P4), "a"] == 40.0 and math.isnan(df.loc[_label(P4), "b"])
    assert math.isnan(df.loc[_label(P4), "delta_b"])
    assert df.loc[_label(P4), "verdict_b"] is None
    assert math.isnan(df.loc[_label(P8), "a"]) and df.loc[_label(P8), "b"] == 80.0
    assert df.loc[_label(P4), "same_prompts"] is None
    matched = {mp.label: mp.indices for mp in match_points(views)}
    assert matched == {_label(P1): (0, 1), _label(P4): (1, None), _label(P8): (None, 0)}


def test_different_prompts_are_flagged(tmp_path: Path) -> None:
    a = make_run(
        tmp_path,
        "a",
        points=[
            (P1, {"output_throughput": 10.0}, "aaaa"),
            (P4, {"output_throughput": 40.0}, "bbbb"),
        ],
    )
    b = make_run(
        tmp_path,
        "b",
        points=[
            (P1, {"output_throughput": 10.0}, "aaaa"),
            (P4, {"output_throughput": 40.0}, "cccc"),
        ],
    )
    views = [load_run(a), load_run(b)]
    df = metric_deltas(views, metrics=["output_throughput"]).set_index("point")
    assert df.loc[_label(P1), "same_prompts"] is True
    assert df.loc[_label(P4), "same_prompts"] is False
    check = prompt_check(views).set_index("point")
    assert check.loc[_label(P4), "a"] == "bbbb" and check.loc[_label(P4), "b"] == "cccc"
    assert list(check["same_prompts"]) == [True, False]


# --- memory -----------------------------------------------------------------------------------


def test_memory_headroom_is_none_where_unknown(tmp_path: Path) -> None:
    transformers_facts = {"engine": "transformers", "engine_version": "5.24.0", "gpus": []}
    cpu = make_run(
        tmp_path,
        "cpu",
        facts=transformers_facts,
        samples=[
            {"t_s": 0.0, "point": 0, "source": "metrics", "name": "x", "labels": "", "value": 1.0}
        ],
    )
    gpu = make_run(
        tmp_path,
        "gpu",
        facts=_facts(graph_mem_gb=None),
        samples=[
            {
                "t_s": float(t),
                "point": 0,
                "source": "nvml",
                "name": "gpu_used_mib",
                "labels": f"gpu={g}",
                "value": 1000.0 * t + g,
            }
            for t in range(3)
            for g in range(2)
        ],
    )
    df = memory_headroom([load_run(cpu), load_run(gpu)]).set_index("run_id")
    for col in (
        "kv_cache_tokens",
        "weight_mem_gb",
        "kv_cache_gb",
        "graph_mem_gb",
        "available_gpu_mem_gb",
        "gpu_total_gb",
        "peak_gpu_used_mib",
    ):
        assert df.loc["cpu", col] is None, col
    assert df.loc["gpu", "graph_mem_gb"] is None
    assert df.loc["gpu", "kv_cache_tokens"] == 500_000
    assert df.loc["gpu", "weight_mem_gb"] == 15.2
    assert df.loc["gpu", "available_gpu_mem_gb"] == 12.0
    assert df.loc["gpu", "peak_gpu_used_mib"] == 2001.0
    assert df.loc["gpu", "gpu_total_gb"] == pytest.approx(143_771.0 / 1024)


def test_memory_headroom_without_samples_file(tmp_path: Path) -> None:
    df = memory_headroom([load_run(make_run(tmp_path, "a", facts={}))])
    assert df.loc[0, "peak_gpu_used_mib"] is None and df.loc[0, "weight_mem_gb"] is None


# --- per-request latencies --------------------------------------------------------------------


@pytest.mark.parametrize("family", ["ttft", "itl", "tpot", "e2e"])
def test_latency_samples_match_core_metrics(tmp_path: Path, family: str) -> None:
    records = _records(send_gap=0.03, scale=1.7)
    folder = make_run(tmp_path, "a", records=records)
    values = latency_samples(folder, 0, family)
    m = compute_point_metrics(records, "server")
    assert float(np.median(values)) == pytest.approx(m[f"median_{family}_ms"])
    assert float(np.mean(values)) == pytest.approx(m[f"mean_{family}_ms"])
    assert max(values) == pytest.approx(m[f"max_{family}_ms"])
    expected_n = {"ttft": 3, "e2e": 3, "tpot": 2, "itl": 4}[family]
    assert len(values) == expected_n
    # A summary key names its family.
    assert latency_samples(folder, 0, f"p99_{family}_ms") == values


def test_latency_samples_edge_cases(tmp_path: Path) -> None:
    folder = make_run(tmp_path, "a", records=_records())
    assert latency_samples(folder, 7, "ttft") == []
    assert latency_samples(folder, 0, "ttft") == pytest.approx([50.0, 80.0, 30.0])
    with pytest.raises(ValueError, match="unknown latency metric"):
        latency_samples(folder, 0, "output_throughput")


# --- who is who: run ids, names, the baseline, the headline point -------------------------------


def test_run_id_check_and_find_runs(tmp_path: Path) -> None:
    make_run(tmp_path, "20260101-000000-abcdef")
    assert is_run_id("20260101-000000-abcdef") and is_run_id("imp-93c3574437d9")
    for bad in ("../etc", "a/b", "", "-x", "a..b", "x" * 101):
        assert not is_run_id(bad), bad
    found, unknown = find_runs(
        tmp_path, ["20260101-000000-abcdef", "nope", "../etc", " ", "20260101-000000-abcdef"]
    )
    assert [f.run_id for f in found] == ["20260101-000000-abcdef"]
    assert unknown == ["nope", "../etc"]


def test_runs_are_named_by_what_differs_and_the_control_is_the_baseline(tmp_path: Path) -> None:
    on = make_run(
        tmp_path,
        "on",
        server={"engine": "sglang", "cuda_graphs": True},
        intended=["server.cuda_graphs"],
    )
    off = make_run(
        tmp_path,
        "off",
        server={"engine": "sglang", "cuda_graphs": False},
        intended=["server.cuda_graphs"],
    )
    views = [load_run(on), load_run(off)]
    assert arm_names(views) == ["cuda_graphs=on", "cuda_graphs=off"]
    assert baseline_index(views) == 1  # off is the control, whatever the order
    assert baseline_index(views[::-1]) == 0
    # numbers: the lower value; no intended_diff: the one differing knob
    hi = make_run(tmp_path, "hi", server={"engine": "sglang", "mem_fraction_static": 0.9})
    lo = make_run(tmp_path, "lo", server={"engine": "sglang", "mem_fraction_static": 0.7})
    dflt = make_run(tmp_path, "dflt", server={"engine": "sglang"})
    assert arm_names([load_run(hi), load_run(lo)]) == [
        "mem_fraction_static=0.9",
        "mem_fraction_static=0.7",
    ]
    assert baseline_index([load_run(hi), load_run(lo)]) == 1
    assert baseline_index([load_run(hi), load_run(dflt), load_run(lo)]) == 1  # default first
    # identical configurations keep the first, and each name says which run it is
    same = [load_run(make_run(tmp_path, f"run-{i}00000")) for i in range(2)]
    assert baseline_index(same) == 0
    assert arm_names(same) == ["run-000000", "run-100000"]
    assert control_of([None, False, 0]) == 0 and control_of(["fa3", "triton"]) == 0


def test_trials_of_one_arm_share_its_name_with_their_short_id(tmp_path: Path) -> None:
    views = []
    for i, arm in enumerate(("graphs-on", "graphs-off", "graphs-on")):
        folder = make_run(tmp_path, f"2026-{i}abcdef")
        spec = folder.read("spec.json")
        spec["tags"] = ["exp:exp-x", f"arm:{arm}", f"trial:{i}"]
        folder.write("spec.json", spec)
        views.append(load_run(folder))
    names = arm_names(views)
    assert names[1] == "graphs off" and names[0].startswith("graphs on · ")
    assert names[0] != names[2]


def test_headline_point_is_the_heaviest_load_all_runs_share(tmp_path: Path) -> None:
    a = make_run(tmp_path, "a", points=[(P8, {}, "d"), (P1, {}, "d"), (P4, {}, "d")])
    b = make_run(tmp_path, "b", points=[(P1, {}, "d"), (P4, {}, "d")])
    head = headline_point([load_run(a), load_run(b)])
    assert head is not None and head.key[0] == 4  # c=8 is not common, c=4 is the heaviest
    c = make_run(tmp_path, "c", points=[(P8, {}, "d")])
    assert headline_point([load_run(b), load_run(c)]) is None


def test_memory_headroom_falls_back_to_the_nvml_peak(tmp_path: Path) -> None:
    """No memory facts from the server (transformers): headroom = GPU total - NVML peak."""
    facts = {
        "engine_version": "5.17.0",
        "gpus": [{"gpu": 0, "total_mib": 143_771.0, "name": "NVIDIA H200"}],
    }
    run = make_run(
        tmp_path,
        "t",
        facts=facts,
        samples=[
            {
                "t_s": float(t),
                "point": 0,
                "source": "nvml",
                "name": "gpu_used_mib",
                "labels": "gpu=0",
                "value": 127_000.0 + 300 * t,
            }
            for t in range(3)
        ],
    )
    row = memory_headroom([load_run(run)]).iloc[0]
    assert row["peak_gpu_used_mib"] == 127_600.0
    assert row["headroom_gb"] == pytest.approx((143_771.0 - 127_600.0) / 1024)
    assert row["headroom_from"] == "NVML peak"
    assert peak_gpu_mib_by_point(run.path) == {0: 127_600.0}
    server = memory_headroom([load_run(make_run(tmp_path, "s"))]).iloc[0]
    assert server["headroom_gb"] == 12.0 and server["headroom_from"] == "server facts"
