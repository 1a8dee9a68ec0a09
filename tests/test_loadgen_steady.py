"""Steady-state points: a point sized by waves or by time, the full-concurrency window, the
warnings a short or mostly-ramp point gets, and a time-sized point on the fake server. Every
other timing here is synthetic (records with chosen times). The gate that stops sending:
tests/test_schedule.py; how many prompts to prepare: tests/test_sizing.py; the saturation
flag: tests/test_health.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.config import BenchmarkPlan, Point, parse_spec
from core.errors import ConfigError
from core.load.generator import LoadGenerator
from core.metrics import compute_point_metrics, point_warnings, steady_state
from core.records import RequestRecord
from tests.test_loadgen import fake_server, opts, prompts


def rec(i: int, send: float, end: float, chunks: int = 4, ok: bool = True) -> RequestRecord:
    """A request sent at ``send`` whose ``chunks`` chunks arrive evenly up to ``end``."""
    step = (end - send) / chunks
    return RequestRecord(
        index=i,
        send_s=send,
        prompt_tokens=10,
        output_tokens_requested=chunks,
        chunk_s=[send + step * (k + 1) for k in range(chunks)],
        end_s=end,
        ok=ok,
        output_tokens_server=chunks,
    )


def closed_loop(n: int, c: int, latency_s: float) -> list[RequestRecord]:
    """n requests, c slots, each request ``latency_s`` long, the next one sent 1 ms after a slot
    frees: slots are all busy from the c-th send to the first end after the last send."""
    out = []
    free = [0.0] * c
    for i in range(n):
        slot = min(range(c), key=lambda s: free[s])
        send = free[slot] + (0.001 if i >= c else 0.0)
        out.append(rec(i, send, send + latency_s))
        free[slot] = send + latency_s
    return out


# -- the plan --------------------------------------------------------------------------------


def test_old_plans_load_unchanged_and_keep_their_fixed_size() -> None:
    spec = parse_spec({"plan": {"points": [{"concurrency": 4, "num_prompts": 8}]}})
    assert spec.plan.min_waves is None and spec.plan.min_steady_s is None
    assert spec.plan.point_requests(spec.plan.points[0]) == (8, 8)


def test_min_waves_raises_the_floor_of_capped_points_only() -> None:
    plan = BenchmarkPlan(
        points=(
            Point(concurrency=64, num_prompts=64),
            Point(concurrency=None, num_prompts=10, request_rate=5.0),
        ),
        min_waves=4,
    )
    assert plan.point_requests(plan.points[0]) == (256, 256)
    assert plan.point_requests(plan.points[1]) == (10, 10)  # no slots, no waves


def test_min_steady_s_lets_a_point_run_on_up_to_max_point_requests() -> None:
    plan = BenchmarkPlan(
        points=(Point(concurrency=16, num_prompts=8),),
        min_waves=2,
        min_steady_s=10,
        max_point_requests=5000,
    )
    assert plan.point_requests(plan.points[0]) == (32, 5000)


@pytest.mark.parametrize(
    ("plan", "field", "words"),
    [
        ({"min_steady_s": 60, "point_timeout_s": 30}, "plan.min_steady_s", "point_timeout_s"),
        ({"min_waves": 0.5}, "plan.min_waves", "1"),
        (
            {"min_waves": 10, "max_point_requests": 100, "points": [{"concurrency": 64}]},
            "plan.min_waves",
            "max_point_requests",
        ),
        ({"max_point_requests": 0}, "plan.max_point_requests", "1"),
    ],
)
def test_bad_sizing_is_refused_naming_the_field_and_the_fix(
    plan: dict[str, object], field: str, words: str
) -> None:
    with pytest.raises(ConfigError) as err:
        parse_spec({"plan": plan})
    assert err.value.field == field
    assert words in str(err.value)


# -- the window ------------------------------------------------------------------------------


def test_window_of_lockstep_waves_is_the_whole_point_less_its_gaps() -> None:
    records = closed_loop(n=12, c=3, latency_s=1.0)  # waves sent at 0, 1.001, 2.002, 3.003
    m = steady_state(records, target=3)
    assert (m["steady_start_s"], m["steady_end_s"]) == (0.0, pytest.approx(4.003))
    # the three slots were free together for 1 ms between waves, three times
    assert m["steady_busy_share"] == pytest.approx(1 - 0.003 / 4.003)
    assert m["steady_output_throughput"] == pytest.approx(48 / 4.003)
    assert m["steady_request_throughput"] == pytest.approx(12 / 4.003)


def test_window_ends_when_a_slot_frees_with_nothing_left_to_send() -> None:
    """Slots of different speeds (0.5 s, 0.8 s, 1.3 s per request): ramp-up ends with the
    third send at 0; the drain starts at the first end after the last send."""
    free = [0.0, 0.0, 0.0]
    records = []
    for i in range(15):
        s = min(range(3), key=lambda k: free[k])
        send = free[s] + (0.001 if i >= 3 else 0.0)
        records.append(rec(i, send, send + (0.5, 0.8, 1.3)[s], chunks=10))
        free[s] = send + (0.5, 0.8, 1.3)[s]
    m = steady_state(records, target=3)
    last_send = max(r.send_s for r in records)
    assert m["steady_start_s"] == 0.0
    assert m["steady_end_s"] == min(
        r.end_s
        for r in records  # type: ignore[type-var]
        if r.end_s is not None and r.end_s > last_send
    )
    end = m["steady_end_s"]
    inside = sum(1 for r in records for t in r.chunk_s if t <= end)
    assert m["steady_output_throughput"] == pytest.approx(inside / end)
    # a partly inside request counts the share of its chunks that arrived inside
    assert 0 < m["steady_output_throughput"] * end < sum(len(r.chunk_s) for r in records)


def test_one_wave_has_no_steady_window_and_is_warned_about() -> None:
    records = [rec(i, 0.001 * i, 1.0 + 0.001 * i) for i in range(64)]  # 64 at c=64: one wave
    m = compute_point_metrics(records, "server", target_in_flight=64)
    assert m["steady_window_s"] == pytest.approx(1.0 - 0.063)
    assert m["steady_share"] == pytest.approx((1.0 - 0.063) / 1.063)
    warnings = point_warnings(m, concurrency=64)
    assert any("1.0 waves" in w for w in warnings)


def test_a_long_closed_loop_point_has_no_warning() -> None:
    m = compute_point_metrics(closed_loop(n=40, c=2, latency_s=0.5), "server", 2)
    assert m["steady_share"] > 0.9
    assert point_warnings(m, concurrency=2) == []
    assert m["steady_output_throughput"] == pytest.approx(m["output_throughput"], rel=0.1)


def test_a_point_shorter_than_min_steady_s_says_so() -> None:
    m = compute_point_metrics(closed_loop(n=40, c=2, latency_s=0.5), "server", 2)
    warnings = point_warnings(m, concurrency=2, min_steady_s=60.0)
    assert any("plan.min_steady_s 60 s" in w for w in warnings)


def test_slots_never_all_busy_is_a_warning_not_a_number() -> None:
    records = [rec(i, float(i), i + 0.5) for i in range(6)]  # one at a time, cap 4
    m = compute_point_metrics(records, "server", 4)
    assert m["steady_window_s"] is None and m["steady_output_throughput"] is None
    assert any("never busy at once" in w for w in point_warnings(m, concurrency=4))


def test_uncapped_poisson_points_have_no_window() -> None:
    m = compute_point_metrics(closed_loop(8, 2, 0.5), "server", None)
    assert m["steady_window_s"] is None and point_warnings(m, None) == []


# -- end to end on the fake server -----------------------------------------------------------


def test_a_time_sized_point_sends_a_prefix_and_stops(fake_sglang: Path, tmp_path: Path) -> None:
    """The server (fake: 50 ms TTFT, 10 ms per token, 5 tokens) finishes ~10 requests/s per
    slot; asked for 0.3 s of full concurrency out of 400 prepared prompts, the point stops
    long before using them all, and what it sent is the first k prompts in order."""
    with fake_server(tmp_path / "server.log") as base:
        o = opts(base, 2)
        o = type(o)(**{**o.__dict__, "min_requests": 4, "min_steady_s": 0.3})
        with LoadGenerator(base, 2, 30.0) as gen:
            records, _ = gen.run(o, prompts(400, out=5))
            assert gen.seen[-1] is records[-1]
    assert 4 <= len(records) < 400
    assert [r.index for r in records] == list(range(len(records)))
    assert all(r.ok for r in records)
