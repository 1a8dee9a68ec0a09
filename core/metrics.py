"""Benchmark metrics from raw request records, with SGLang ``bench_serving``'s definitions.

Definitions (``sglang/benchmark/serving.py`` ``calculate_metrics``, backend
``sglang-oai-chat``; see docs/METRICS.md for where ServeLab differs):

* only successful requests feed the latency families and token totals;
* TTFT = first non-empty content chunk - send; E2E = last SSE line - send;
* ITL = the gaps between successive non-empty chunks, flattened over requests;
* TPOT_i = (E2E_i - TTFT_i) / (output_len_i - 1), only where output_len_i > 1;
* output_len = the server's ``usage.completion_tokens`` (falling back to the requested
  length when the server sent none), or the re-tokenized count;
* throughputs divide by the point's duration: first dispatch to last completion;
* statistics: mean, median, std (population), p90/p95/p99 (linear), max, in ms;
* concurrency = sum(E2E) / duration.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from core.records import RequestRecord

__all__ = [
    "DEFINITION",
    "LATENCY_FAMILIES",
    "STAT_NAMES",
    "TokenSource",
    "compute_point_metrics",
    "latency_values",
    "summarize_ms",
]

DEFINITION = "sglang bench_serving (sglang-oai-chat)"
LATENCY_FAMILIES = ("ttft", "itl", "tpot", "e2e")
STAT_NAMES = ("mean", "median", "std", "p90", "p95", "p99", "max")

TokenSource = Literal["server", "retokenized"]


@dataclass(frozen=True)
class _Family:
    name: str
    values_s: list[float]


def summarize_ms(values_s: list[float]) -> dict[str, float | None]:
    """mean/median/std/p90/p95/p99/max in ms; None for an empty list (bench_serving
    prints 0 there, which reads as a real measurement)."""
    if not values_s:
        return dict.fromkeys(STAT_NAMES)
    arr = np.asarray(values_s, dtype=np.float64) * 1000.0
    return {
        "mean": float(np.mean(arr)),
        "median": float(np.median(arr)),
        "std": float(np.std(arr)),
        "p90": float(np.percentile(arr, 90)),
        "p95": float(np.percentile(arr, 95)),
        "p99": float(np.percentile(arr, 99)),
        "max": float(np.max(arr)),
    }


def _per_second_peaks(ok: list[RequestRecord], t0: float, duration_s: float) -> tuple[int, int]:
    """Peak chunks (tokens) in any 1-s bucket, and peak requests in flight in any bucket."""
    if not ok or duration_s <= 0:
        return 0, 0
    n_buckets = max(1, math.ceil(duration_s))
    tokens = np.zeros(n_buckets + 1, dtype=np.int64)
    in_flight = np.zeros(n_buckets + 1, dtype=np.int64)
    for r in ok:
        for t in r.chunk_s:
            tokens[min(int(t - t0), n_buckets)] += 1
        start = int(r.send_s - t0)
        end = int((r.end_s or r.send_s) - t0)
        in_flight[max(start, 0) : min(end, n_buckets) + 1] += 1
    return int(tokens.max()), int(in_flight.max())


def latency_values(records: list[RequestRecord],
                   source: TokenSource = "server") -> dict[str, list[float]]:
    """Per-request latency values in seconds, by family (ttft, itl, tpot, e2e), over the
    successful requests: the data behind every latency statistic and CDF."""
    out: dict[str, list[float]] = {fam: [] for fam in LATENCY_FAMILIES}
    for r in records:
        latency, ttft = r.latency_s, r.ttft_s
        if not r.ok or latency is None or ttft is None:
            continue
        out["ttft"].append(ttft)
        out["e2e"].append(latency)
        out["itl"].extend(b - a for a, b in zip(r.chunk_s, r.chunk_s[1:], strict=False))
        out_len = r.output_tokens(source)
        if out_len > 1:
            out["tpot"].append((latency - ttft) / (out_len - 1))
    return out


def compute_point_metrics(
    records: list[RequestRecord], source: TokenSource = "server"
) -> dict[str, Any]:
    """All headline metrics of one benchmark point. Keys follow bench_serving's JSONL
    names (``output_throughput``, ``median_ttft_ms`` ...) plus ``max_*_ms``,
    ``error_rate`` and the output-length check."""
    total = len(records)
    ok = [r for r in records if r.ok and r.end_s is not None]
    failed = total - len(ok)
    if records:
        t0 = min(r.send_s for r in records)
        t_end = max((r.end_s if r.end_s is not None else r.send_s) for r in records)
        duration_s = max(t_end - t0, 0.0)
    else:
        t0, duration_s = 0.0, 0.0

    total_input = sum(r.prompt_tokens for r in ok)
    total_output = sum(r.output_tokens(source) for r in ok)
    total_output_server = sum(r.output_tokens("server") for r in ok)
    total_output_retok = sum(r.output_tokens("retokenized") for r in ok)

    values = latency_values(ok, source)
    ttfts, itls, tpots, e2es = (values[f] for f in LATENCY_FAMILIES)

    def per_s(x: float) -> float | None:
        return x / duration_s if duration_s > 0 else None

    m: dict[str, Any] = {
        "definition": DEFINITION,
        "token_source": source,
        "num_requests": total,
        "completed": len(ok),
        "failed": failed,
        "error_rate": failed / total if total else None,
        "duration_s": duration_s,
        "total_input_tokens": total_input,
        "total_output_tokens": total_output,
        "total_output_tokens_server": total_output_server,
        "total_output_tokens_retokenized": total_output_retok,
        "request_throughput": per_s(len(ok)),
        "input_throughput": per_s(total_input),
        "output_throughput": per_s(total_output),
        "total_throughput": per_s(total_input + total_output),
        "concurrency": per_s(sum(e2es)),
    }
    for fam in (_Family("ttft", ttfts), _Family("itl", itls), _Family("tpot", tpots),
                _Family("e2e", e2es)):
        for stat, value in summarize_ms(fam.values_s).items():
            m[f"{stat}_{fam.name}_ms"] = value
    peak_tokens, peak_requests = _per_second_peaks(ok, t0, duration_s)
    m["max_output_tokens_per_s"] = peak_tokens
    m["max_concurrent_requests"] = peak_requests

    # Achieved vs requested output length: a server that stops early (EOS honoured,
    # ignore_eos unsupported) makes every per-token figure incomparable.
    requested = sum(r.output_tokens_requested for r in ok)
    short = [r for r in ok if r.output_tokens(source) < r.output_tokens_requested]
    m["output_tokens_requested"] = requested
    m["output_len_ratio"] = total_output / requested if requested else None
    m["requests_short_of_output_len"] = len(short)
    m["errors_sample"] = sorted({r.error for r in records if r.error})[:5]
    return m
