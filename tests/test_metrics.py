"""Metric formulas on hand-computed records (bench_serving definitions)."""

from __future__ import annotations

import pytest

from core.metrics import compute_point_metrics, summarize_ms
from core.records import RequestRecord, records_from_table, records_to_table


def rec(i: int, send: float, chunks: list[float], end: float, out_server: int | None,
        ok: bool = True, requested: int = 4, prompt: int = 10) -> RequestRecord:
    return RequestRecord(index=i, send_s=send, prompt_tokens=prompt,
                         output_tokens_requested=requested, chunk_s=chunks, end_s=end, ok=ok,
                         output_tokens_server=out_server,
                         error=None if ok else "HTTP 500: boom")


def test_two_requests_by_hand() -> None:
    records = [
        # TTFT 0.10, ITLs 0.05 0.05 0.10, E2E 0.31, 4 tokens -> TPOT (0.31-0.10)/3 = 0.07
        rec(0, 0.0, [0.10, 0.15, 0.20, 0.30], 0.31, 4),
        # TTFT 0.30, ITL 0.20, E2E 0.60 (starts at 0.1), 2 tokens -> TPOT 0.30
        rec(1, 0.1, [0.40, 0.60], 0.70, 2),
    ]
    m = compute_point_metrics(records)
    assert m["duration_s"] == pytest.approx(0.70)
    assert m["completed"] == 2 and m["failed"] == 0 and m["error_rate"] == 0
    assert m["total_output_tokens"] == 6
    assert m["output_throughput"] == pytest.approx(6 / 0.70)
    assert m["input_throughput"] == pytest.approx(20 / 0.70)
    assert m["total_throughput"] == pytest.approx(26 / 0.70)
    assert m["request_throughput"] == pytest.approx(2 / 0.70)
    assert m["mean_ttft_ms"] == pytest.approx(200.0)
    assert m["median_ttft_ms"] == pytest.approx(200.0)
    assert m["p99_ttft_ms"] == pytest.approx(100 + 0.99 * 200)
    # ITL is the flat list [50, 50, 100, 200]
    assert m["mean_itl_ms"] == pytest.approx(100.0)
    assert m["median_itl_ms"] == pytest.approx(75.0)
    assert m["max_itl_ms"] == pytest.approx(200.0)
    assert m["mean_tpot_ms"] == pytest.approx((70 + 300) / 2)
    assert m["mean_e2e_ms"] == pytest.approx((310 + 600) / 2)
    # concurrency = sum(E2E) / duration
    assert m["concurrency"] == pytest.approx((0.31 + 0.60) / 0.70)
    assert m["max_concurrent_requests"] == 2
    assert m["output_len_ratio"] == pytest.approx(6 / 8)
    assert m["requests_short_of_output_len"] == 1


def test_failures_count_in_denominator_not_in_latency() -> None:
    records = [rec(0, 0.0, [0.1, 0.2], 0.2, 2),
               rec(1, 0.0, [], 0.5, None, ok=False)]
    m = compute_point_metrics(records)
    assert m["num_requests"] == 2 and m["completed"] == 1 and m["error_rate"] == 0.5
    assert m["duration_s"] == pytest.approx(0.5)  # the failed request still took time
    assert m["mean_ttft_ms"] == pytest.approx(100.0)
    assert m["errors_sample"] == ["HTTP 500: boom"]


def test_token_source_server_vs_retokenized_vs_requested() -> None:
    r = rec(0, 0.0, [0.1, 0.2, 0.3], 0.3, None, requested=8)
    r.output_tokens_retokenized = 3
    # No usage from the server: bench_serving's oai-chat backend counts the requested length.
    assert compute_point_metrics([r], "server")["total_output_tokens"] == 8
    assert compute_point_metrics([r], "retokenized")["total_output_tokens"] == 3
    r.output_tokens_server = 5
    m = compute_point_metrics([r], "server")
    assert m["total_output_tokens"] == 5
    assert m["mean_tpot_ms"] == pytest.approx(200 / 4)


def test_empty_point_has_no_invented_numbers() -> None:
    m = compute_point_metrics([])
    assert m["output_throughput"] is None and m["median_ttft_ms"] is None
    assert summarize_ms([])["p99"] is None


def test_records_parquet_round_trip() -> None:
    records = [rec(0, 0.0, [0.1, 0.2], 0.25, 2), rec(1, 0.0, [], 0.3, None, ok=False)]
    back = records_from_table(records_to_table(records))
    assert back == records
