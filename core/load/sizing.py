"""How big a point's client side is: how many prompts to prepare for a point sized by time,
and how many processes send it (``client_workers``) with how many of its slots each."""

from __future__ import annotations

import math
import os

from core.records import RequestRecord

__all__ = [
    "AUTO_CORE_SHARE",
    "BUDGET_MARGIN",
    "US_PER_CHUNK_PACED",
    "auto_workers",
    "fast_speed",
    "point_budget",
    "slot_shares",
    "workers_for",
]

# A point sized by time gets its prompts beforehand (making one costs 0.4 ms at 64 tokens,
# 8.5 ms at 1,024: too slow to make while streaming), as many as the fastest speed seen so far
# on this server would need, times this margin: the warm-up runs at the largest concurrency,
# and a lower one is faster per token.
BUDGET_MARGIN = 4.0
# A worker paced well below its core keeps its timestamps punctual: aim at this share of a
# core per worker when choosing W automatically, at the measured paced cost per chunk.
AUTO_CORE_SHARE = 0.5
US_PER_CHUNK_PACED = 25.0


def fast_speed(seen: list[RequestRecord]) -> tuple[float, float] | None:
    """(TTFT, seconds per chunk) at the fast end (10th percentile) of the requests seen."""
    ttfts = sorted(r.chunk_s[0] - r.send_s for r in seen if r.ok and r.chunk_s)
    per_token = sorted(
        (r.chunk_s[-1] - r.chunk_s[0]) / (len(r.chunk_s) - 1)
        for r in seen
        if r.ok and len(r.chunk_s) > 1
    )
    if not ttfts or not per_token:
        return None
    return ttfts[len(ttfts) // 10], per_token[len(per_token) // 10]


def point_budget(
    low: int,
    high: int,
    concurrency: int | None,
    request_rate: float,
    output_len: int,
    min_steady_s: float | None,
    seen: list[RequestRecord],
) -> int:
    """How many prompts to prepare for a point that sends between ``low`` and ``high``
    requests: ``low`` when its size is fixed, else enough to keep every slot busy for
    ``min_steady_s`` at the fastest speed in ``seen`` (``high`` when nothing was seen)."""
    if min_steady_s is None or high <= low:
        return low
    speed = fast_speed(seen)
    if speed is None:
        return high
    ttft_s, per_token_s = speed
    latency_s = max(1e-4, ttft_s + (output_len - 1) * per_token_s)
    slots = concurrency if concurrency is not None else (low if math.isinf(request_rate) else None)
    rate = request_rate if slots is None else min(request_rate, slots / latency_s)
    need = (slots or 0) + rate * min_steady_s * BUDGET_MARGIN
    return max(low, min(high, math.ceil(need)))


def slot_shares(slots: int, workers: int) -> list[int]:
    """``slots`` split over ``workers`` as evenly as possible (no worker gets none)."""
    workers = max(1, min(workers, slots))
    return [slots // workers + (1 if w < slots % workers else 0) for w in range(workers)]


def auto_workers(
    concurrency: int | None, n: int, output_chunks_per_s: float | None, cpus: int | None = None
) -> int:
    """W for ``client_workers = "auto"``: enough workers that each stays near
    ``AUTO_CORE_SHARE`` of a core at the offered chunk rate (estimated from the speed seen
    on this server; None = unknown: one worker per 64 slots), one core left to the rest of
    the host, never more workers than slots."""
    cpus = cpus or os.cpu_count() or 1
    slots = concurrency or n
    if output_chunks_per_s is None:
        want = math.ceil(slots / 64)
    else:
        want = math.ceil(output_chunks_per_s * US_PER_CHUNK_PACED * 1e-6 / AUTO_CORE_SHARE)
    return max(1, min(want, cpus - 1, slots))


def workers_for(
    setting: int | str, concurrency: int | None, n: int, seen: list[RequestRecord]
) -> int:
    """The processes for a point: ``setting`` (BenchmarkPlan.client_workers) as given, or for
    "auto" enough for the chunk rate the fastest speed in ``seen`` would offer."""
    if setting != "auto":
        return int(setting)
    speed = fast_speed(seen)
    rate = None if speed is None else (concurrency or n) / max(speed[1], 1e-6)
    return auto_workers(concurrency, n, rate)
