"""core.metric_info: the one table of metric metadata every list of metrics reads."""

from __future__ import annotations

from core import metric_info, metrics
from core.analysis import attribution, card, history, points, stats
from core.metric_info import (
    METRICS,
    direction_of,
    higher_is_better,
    info,
    metric_label,
    metric_text,
    metrics_for,
    verdict_metrics,
)


def test_labels_units_and_words_from_one_table() -> None:
    assert metric_label("output_throughput") == "Output throughput (tok/s)"
    assert metric_label("median_ttft_ms") == "Median TTFT (ms)"
    assert metric_label("p99_itl_ms") == "p99 ITL (ms)"  # a percentile keeps its name
    assert metric_label("some_new_thing") == "Some new thing"  # shown, never refused
    assert metrics.metric_label is metric_info.metric_label  # core.metrics delegates


def test_directions() -> None:
    assert direction_of("output_throughput") == "higher"
    assert direction_of("p95_e2e_ms") == "lower"  # every latency statistic
    assert direction_of("peak_gpu_mib") == "lower" and higher_is_better("kv_cache_tokens")
    assert direction_of("concurrency") is None and higher_is_better("concurrency")
    assert points.METRIC_DIRECTIONS["median_itl_ms"] == "lower"
    assert attribution.higher_is_better is higher_is_better


def test_every_list_of_metrics_is_a_read_of_the_table() -> None:
    assert verdict_metrics() == ("output_throughput", "median_ttft_ms", "median_itl_ms")
    assert metrics.VERDICT_METRICS == verdict_metrics() == history.HISTORY_METRICS
    assert metrics_for("experiment") == stats.EXPERIMENT_METRICS
    assert metrics_for("card") == card.CARD_METRICS
    assert metrics_for("attribution") == attribution.ATTRIBUTION_METRICS
    assert metrics_for("deltas") == points.HEADLINE_METRICS
    every = {m for view in ("deltas", "experiment", "card", "attribution", "history")
             for m in metrics_for(view)}  # fmt: skip
    assert every <= set(METRICS)


def test_a_metric_reads_by_its_format() -> None:
    assert metric_text("kv_cache_tokens", 123456.0) == "123,456"
    assert metric_text("headroom_gb", 3.14159) == "3.14"
    assert metric_text("median_ttft_ms", 12.345) == "12.3"
    assert info("median_ttft_ms").headline and not info("p99_ttft_ms").headline
