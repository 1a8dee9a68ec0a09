"""core/load/sizing.py: how many prompts a point sized by time prepares (from the speed seen
on the server), and how many worker processes send a point with how many of its slots."""

from __future__ import annotations

import math

import pytest

from core.load.sizing import auto_workers, fast_speed, point_budget, slot_shares, workers_for
from tests.test_loadgen_steady import rec


def test_budget_follows_the_fastest_speed_seen() -> None:
    # seen: TTFT 0.1 s, 10 ms per token -> 64-token request ~0.73 s; c=16 -> ~22 req/s
    seen = [rec(i, 0.0, 0.1 + 0.63, chunks=64) for i in range(20)]
    for r in seen:
        r.chunk_s = [0.1 + 0.01 * k for k in range(64)]
    n = point_budget(32, 20_000, 16, math.inf, 64, 10.0, seen)
    assert n == math.ceil(16 + 16 / (0.1 + 63 * 0.01) * 10.0 * 4.0)
    assert point_budget(32, 20_000, 16, math.inf, 64, None, seen) == 32  # fixed size
    assert point_budget(32, 20_000, 16, math.inf, 64, 10.0, []) == 20_000  # nothing seen
    assert point_budget(32, 100, 16, math.inf, 64, 10.0, seen) == 100  # bounded


def test_slots_split_evenly_and_sum_to_the_cap() -> None:
    assert slot_shares(5, 2) == [3, 2]
    assert slot_shares(64, 8) == [8] * 8
    assert slot_shares(3, 8) == [1, 1, 1]  # never a worker without a slot
    assert all(sum(slot_shares(c, w)) == c for c in range(1, 70) for w in range(1, 10))


def test_auto_workers_follow_the_offered_chunk_rate_within_the_cores() -> None:
    # 25 us per chunk at half a core each: 20,000 chunks/s per worker
    assert auto_workers(64, 64, 100_000.0, cpus=16) == 5
    assert auto_workers(64, 64, 1_000_000.0, cpus=16) == 15  # one core left over
    assert auto_workers(4, 4, 1_000_000.0, cpus=16) == 4  # no more workers than slots
    assert auto_workers(256, 256, None, cpus=16) == 4  # nothing seen: one per 64 slots
    assert auto_workers(64, 64, 100_000.0, cpus=2) == 1


def test_auto_workers_from_the_speed_seen_and_a_count_as_given() -> None:
    seen = [rec(i, 0.0, 0.1 + 0.63, chunks=64) for i in range(20)]
    for r in seen:
        r.chunk_s = [0.1 + 0.01 * k for k in range(64)]  # 10 ms per chunk
    assert fast_speed(seen) == pytest.approx((0.1, 0.01))
    assert workers_for(3, 64, 64, seen) == 3
    assert workers_for("4", 64, 64, []) == 4
    # 64 slots at 10 ms per chunk: 6,400 chunks/s, one worker's half core
    assert workers_for("auto", 64, 64, seen) == auto_workers(64, 64, 6400.0)
    assert workers_for("auto", 256, 256, []) == auto_workers(256, 256, None)
