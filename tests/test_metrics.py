"""Metric formulas on hand-computed records (bench_serving definitions)."""

from __future__ import annotations

import math

import pytest

from core.metrics import (
    CAVEAT_MEANING,
    as_number,
    compute_point_metrics,
    headline_index,
    point_caveats,
    point_error_rate,
    point_warnings,
    rate_value,
    summarize_ms,
)
from core.records import CANCELLED, RequestRecord, records_from_table, records_to_table
from core.run_folder import RunStatus


def rec(
    i: int,
    send: float,
    chunks: list[float],
    end: float,
    out_server: int | None,
    ok: bool = True,
    requested: int = 4,
    prompt: int = 10,
) -> RequestRecord:
    return RequestRecord(
        index=i,
        send_s=send,
        prompt_tokens=prompt,
        output_tokens_requested=requested,
        chunk_s=chunks,
        end_s=end,
        ok=ok,
        output_tokens_server=out_server,
        error=None if ok else "HTTP 500: boom",
    )


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
    records = [rec(0, 0.0, [0.1, 0.2], 0.2, 2), rec(1, 0.0, [], 0.5, None, ok=False)]
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


def test_requests_a_cancel_cut_short_are_counted_apart_not_as_errors() -> None:
    cut = [
        RequestRecord(
            index=i,
            send_s=0.2,
            prompt_tokens=10,
            output_tokens_requested=4,
            chunk_s=[0.3],
            end_s=0.5,
            error=CANCELLED,
        )
        for i in (2, 3)
    ]
    records = [rec(0, 0.0, [0.1, 0.2], 0.3, 2), rec(1, 0.0, [], 0.2, None, ok=False), *cut]
    m = compute_point_metrics(records)
    assert m["cancelled_requests"] == 2 and m["num_requests"] == 2
    assert m["completed"] == 1 and m["failed"] == 1 and m["error_rate"] == 0.5
    assert m["duration_s"] == pytest.approx(0.3)  # up to the last request that finished
    nothing = compute_point_metrics(cut)
    assert nothing["error_rate"] is None and nothing["completed"] == 0  # not "100% errors"


def test_point_caveats_name_the_cancel_the_saturated_client_and_the_ramp() -> None:
    summary = {
        "index": 1,
        "cancelled": True,
        "metrics": {"completed": 3, "failed": 0, "cancelled_requests": 5, "error_rate": 0.0},
        "client": {
            "client_saturated": True,
            "loop_lag_ms_p99": 7.1,
            "client_saturated_why": "event-loop lag p99 7.1 ms > 5 ms",
        },
        "warnings": [
            "only 1.5 waves of requests (96 at concurrency 64): most of the "
            "point was ramp-up and drain; size it by plan.min_waves"
        ],
    }
    assert [(c.kind, c.detail) for c in point_caveats(summary)] == [
        ("cut short by a cancel", "3 of 8 requests finished"),
        ("load generator saturated", "event-loop lag p99 7.1 ms > 5 ms"),
        ("not steady state", "only 1.5 waves of requests (96 at concurrency 64)"),
    ]
    assert point_error_rate(summary) == 0.0
    # a folder from before ``cancelled``: the run's reason names the point, whose cut
    # requests were counted as errors there: no error rate is shown for it
    old = {"index": 6, "metrics": {"completed": 0, "failed": 64, "error_rate": 1.0}}
    status = RunStatus(state="cancelled", reason="cancelled during point 6")
    assert point_error_rate(old, status) is None and point_error_rate(old) == 1.0
    assert [c.kind for c in point_caveats(old, status)] == ["cut short by a cancel"]
    assert point_caveats({**old, "index": 5}, status) == []


def test_tokens_that_stream_as_no_text_are_a_caveat_on_latency_not_throughput() -> None:
    """vLLM 0.26 on a dummy-weight shape with SmolLM2's tokenizer: ids above 49,151 stream
    as empty chunks, which bench_serving's rule (and ours) does not time, so TTFT and ITL
    time the visible tokens only; the server's token count still makes the throughput."""
    hidden = {"total_output_tokens_server": 16_384, "total_output_tokens_retokenized": 5_120}
    (caveat,) = point_caveats({"metrics": hidden})
    assert caveat.kind == "tokens without text" and caveat.kind in CAVEAT_MEANING
    assert "counted 16,384 output tokens, the text re-tokenizes to 5,120;" in caveat.detail
    assert "TPOT count the server's tokens" in CAVEAT_MEANING[caveat.kind]
    near = {"total_output_tokens_server": 16_384, "total_output_tokens_retokenized": 16_001}
    assert point_caveats({"metrics": near}) == []  # a real model: the counts agree closely
    assert point_caveats({"metrics": {"total_output_tokens_server": 16_384}}) == []


def test_a_lagging_loop_with_cpu_to_spare_is_late_stamps_not_a_short_load() -> None:
    """Lag alone, the client well under a core: every request went out, chunks were stamped
    late (tails inflated). The client at a core (or any worker of a sharded point): the
    offered load itself may have been short."""
    lag = {
        "client_saturated": True,
        "loop_lag_ms_p99": 5.2,
        "client_cpu_share": 0.04,
        "client_saturated_why": "event-loop lag p99 5.2 ms > 5 ms",
    }
    assert [(c.kind, c.detail) for c in point_caveats({"client": lag})] == [
        ("client timestamps late", "event-loop lag p99 5.2 ms > 5 ms at 4% of a core")
    ]
    busy = {
        **lag,
        "client_cpu_share": 0.95,
        "client_saturated_why": "client CPU 95% of a core >= 90%",
    }
    assert [c.kind for c in point_caveats({"client": busy})] == ["load generator saturated"]
    sharded = {
        **lag,
        "client_cpu_share": 1.3,  # cores, summed over the workers
        "workers": [{"client_cpu_share": 0.4}, {"client_cpu_share": 0.92}],
    }
    assert [c.kind for c in point_caveats({"client": sharded})] == ["load generator saturated"]
    spread = {**sharded, "workers": [{"client_cpu_share": 0.4}, {"client_cpu_share": 0.5}]}
    assert [c.detail for c in point_caveats({"client": spread})] == [
        "event-loop lag p99 5.2 ms > 5 ms at 50% of a core"
    ]


@pytest.mark.parametrize(
    ("value", "number"),
    [
        (3, 3.0),
        (0, 0.0),  # a measured 0 is a number, not "unknown"
        (2.5, 2.5),
        (True, None),  # True == 1 in Python; a flag is not a measurement
        (False, None),
        (math.nan, None),
        (math.inf, None),
        (-math.inf, None),
        ("3", None),
        (None, None),
        ([1], None),
    ],
)
def test_as_number_is_the_one_is_this_a_number_rule(value: object, number: float | None) -> None:
    assert as_number(value) == number


def test_rate_value_reads_a_stored_request_rate() -> None:
    assert rate_value("inf") == math.inf and rate_value("Infinity") == math.inf
    assert rate_value(4) == 4.0 and rate_value("2.5") == 2.5
    assert rate_value(None) is None and rate_value("fast") is None and rate_value(True) is None


def test_headline_index_is_the_heaviest_load_not_the_last_point() -> None:
    def p(conc: int | None, rate: object = "inf") -> dict[str, object]:
        return {"concurrency": conc, "request_rate": rate}

    assert headline_index([p(64), p(1)]) == 0  # the plan [c=64, c=1] headlines c=64
    assert headline_index([p(1), p(64)]) == 1
    assert headline_index([p(8, 2), p(8, 10), p(4)]) == 1  # then the higher rate
    assert headline_index([p(8), p(1), p(8)]) == 2  # a tie: the plan's last such point
    assert headline_index([p(64), p(None)]) == 1  # unbounded concurrency is the heaviest
    assert headline_index([]) is None


def test_a_stored_single_wave_point_gets_the_caveat_even_from_an_old_folder() -> None:
    """The CPU demo's points (4 prompts at c=4 ... 64 at c=64) were stored before their
    warnings: the waves rule reads them from the point's plan."""
    old = {"index": 2, "point": {"concurrency": 4}, "metrics": {"num_requests": 4}}
    assert [(c.kind, c.detail) for c in point_caveats(old)] == [
        ("not steady state", "one wave only, 4 requests at concurrency 4")
    ]
    few = {"index": 0, "point": {"concurrency": 8}, "metrics": {"num_requests": 2}}
    assert [c.detail for c in point_caveats(few)] == [
        "concurrency 8 never reached, only 2 requests"
    ]
    enough = {"index": 0, "point": {"concurrency": 1}, "metrics": {"num_requests": 4}}
    assert point_caveats(enough) == []
    # a folder that stored its warnings is read as stored (no second copy)
    new = {**old, "warnings": point_warnings({"num_requests": 4}, 4)}
    assert len(point_caveats(new)) == 1
