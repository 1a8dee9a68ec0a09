"""core.analysis.points: metric deltas paired by load (never by position), their verdicts
by each metric's direction, and prompt digests."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from core.analysis.points import (
    METRIC_DIRECTIONS,
    different_prompts,
    match_points,
    metric_deltas,
    point_rows,
    prompt_check,
)
from core.analysis.runs import load_run
from tests.runs_by_hand import (
    P1,
    P4,
    P8,
    make_run,
    point_label,
    request_records,
)


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
    assert t.loc["median_ttft_ms", "delta_b"] == pytest.approx(-10.0)
    assert t.loc["median_ttft_ms", "rel_b"] == pytest.approx(-0.2)
    assert t.loc["output_throughput", "rel_c"] == pytest.approx(-0.1)
    assert t.loc["median_ttft_ms", "rel_c"] == pytest.approx(0.2)
    # one run each: no interval, so every difference reads unconfirmed (never better or
    # worse, however large: core.analysis.words)
    verdicts = {t.loc[m, f"verdict_{r}"] for m in t.index for r in "bc"}
    assert verdicts == {"unconfirmed"}
    assert math.isnan(t.loc["error_rate", "rel_c"])  # a zero baseline: no relative change
    assert bool(df["same_prompts"].all())

    # Another baseline: b is now the reference, a is worse on both.
    t2 = metric_deltas(views, baseline=1, metrics=["output_throughput"]).set_index("metric")
    assert t2.loc["output_throughput", "delta_a"] == pytest.approx(-20.0)
    assert t2.loc["output_throughput", "verdict_a"] == "unconfirmed"


def test_single_run_changes_of_any_size_are_unconfirmed(tmp_path: Path) -> None:
    a = make_run(
        tmp_path, "a", points=[(P1, {"output_throughput": 100.0, "p99_itl_ms": 10.0}, "d")]
    )
    b = make_run(
        tmp_path, "b", points=[(P1, {"output_throughput": 100.4, "p99_itl_ms": 10.06}, "d")]
    )
    t = metric_deltas(
        [load_run(a), load_run(b)], metrics=["output_throughput", "p99_itl_ms"]
    ).set_index("metric")
    assert list(t["verdict_b"]) == ["unconfirmed", "unconfirmed"]


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
    assert list(df.index) == [point_label(P1), point_label(P4), point_label(P8)]
    assert df.loc[point_label(P1), "b"] == 11.0
    assert df.loc[point_label(P1), "delta_b"] == pytest.approx(1.0)
    assert df.loc[point_label(P4), "a"] == 40.0 and math.isnan(df.loc[point_label(P4), "b"])
    assert math.isnan(df.loc[point_label(P4), "delta_b"])
    assert df.loc[point_label(P4), "verdict_b"] is None
    assert math.isnan(df.loc[point_label(P8), "a"]) and df.loc[point_label(P8), "b"] == 80.0
    assert df.loc[point_label(P4), "same_prompts"] is None
    matched = {mp.label: mp.indices for mp in match_points(views)}
    assert matched == {
        point_label(P1): (0, 1),
        point_label(P4): (1, None),
        point_label(P8): (None, 0),
    }


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
    assert df.loc[point_label(P1), "same_prompts"] is True
    assert df.loc[point_label(P4), "same_prompts"] is False
    check = prompt_check(views).set_index("point")
    assert check.loc[point_label(P4), "a"] == "bbbb" and check.loc[point_label(P4), "b"] == "cccc"
    assert list(check["same_prompts"]) == [True, False]


def test_different_prompts_reads_the_workload_digest_then_fixed_size_prompt_digests() -> None:
    def s(workload: str | None, prompts: str, low: int = 8, high: int = 8) -> dict[str, Any]:
        return {
            "workload": {} if workload is None else {"digest": workload},
            "prompts_digest": prompts,
            "requests_planned": {"at_least": low, "at_most": high},
        }

    assert different_prompts([s("w1", "p"), s("w2", "p")])
    assert different_prompts([s("w1", "p1"), s("w1", "p2")])
    assert not different_prompts([s("w1", "p1"), s("w1", "p1")])
    # sized by time: each run sends a prefix of the same sequence, their digests differ
    assert not different_prompts([s("w1", "p1", 8, 100), s("w1", "p2", 8, 100)])
    assert not different_prompts([s(None, "p1"), None])  # an old folder or a missing point


def test_point_rows_give_length_distributions_and_the_servers_prefix_cache_hits(
    tmp_path: Path,
) -> None:
    """Lengths from records.parquet (a folder older than summary lengths) and the
    prefix-cache hit rate from the /metrics counters' deltas within the point."""
    samples = [
        {"t_s": t, "point": 0, "source": "metrics", "name": n, "labels": "", "value": v}
        for t, cached, prompt in ((0.0, 100.0, 1000.0), (1.0, 400.0, 2000.0))
        for n, v in (("sglang:cached_tokens_total", cached), ("sglang:prompt_tokens_total", prompt))
    ]
    folder = make_run(tmp_path, "r1", records=request_records(), samples=samples)
    (row,) = point_rows(load_run(folder))
    assert row["input_tokens_p50"] == 32 and row["input_tokens_max"] == 32
    # the three successful requests' server counts: 4, 3, 1
    assert row["output_tokens_max"] == 4 and row["output_tokens_p50"] == 3
    assert row["prefix_cache_hit_rate"] == pytest.approx(300 / 1000)
    assert row["kv_fill"] is None and row["kv_fill_computed"] is None
