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

ServeLab adds the steady-state figures (``steady_*``, docs/METRICS.md): throughput over the
window in which every slot of the point was busy, ramp-up and drain excluded.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from core.metric_info import (
    LATENCY_FAMILIES,
    STAT_NAMES,
    metric_label,
    metric_name,
    metric_unit,
    verdict_metrics,
)
from core.numbers import as_number, share_text
from core.records import CANCELLED, RequestRecord

if TYPE_CHECKING:
    from core.run_folder import RunStatus

__all__ = [
    "CAVEAT_KINDS",
    "DEFINITION",
    "LATENCY_FAMILIES",
    "STAT_NAMES",
    "VERDICT_METRICS",
    "Caveat",
    "TokenSource",
    "as_number",
    "compute_point_metrics",
    "headline_index",
    "latency_arrays",
    "latency_values",
    "length_distribution",
    "metric_label",
    "metric_name",
    "metric_unit",
    "point_cancelled",
    "point_caveats",
    "point_error_rate",
    "point_warnings",
    "rate_value",
    "record_lengths",
    "steady_state",
    "summarize_ms",
    "wave_warning",
]

DEFINITION = "sglang bench_serving (sglang-oai-chat)"

TokenSource = Literal["server", "retokenized"]


def rate_value(value: Any) -> float | None:
    """A request rate as stored: a number, or "inf"/"Infinity" (JSON has no infinity);
    None when absent or unreadable (a bool is not a rate)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


# THE headline metrics (core.metric_info: the one table of metric metadata): what a verdict
# names at the headline point and what an adaptive experiment's stop rule must decide.
VERDICT_METRICS = verdict_metrics()


def headline_index(points: Sequence[Mapping[str, Any]]) -> int | None:
    """THE headline point, as a position in ``points`` (load settings in plan order: a
    plan's points, or each point summary's ``point``): the heaviest load, i.e. the highest
    concurrency (unbounded counts as the highest), then the highest request rate; the
    last such point on a tie. None when there is no point. A plan ``[c=64, c=1]``
    headlines c=64: on the Runs page and the catalog (``result.json``) as on Compare."""
    if not points:
        return None

    def weight(i: int) -> tuple[float, float, int]:
        p = points[i]
        conc, rate = as_number(p.get("concurrency")), rate_value(p.get("request_rate"))
        return (math.inf if conc is None else conc, math.inf if rate is None else rate, i)

    return max(range(len(points)), key=weight)


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


def latency_values(
    records: list[RequestRecord], source: TokenSource = "server"
) -> dict[str, list[float]]:
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


def _column(table: pa.Table, name: str, fill: Any, dtype: Any) -> np.ndarray:
    if name not in table.column_names:
        return np.full(table.num_rows, fill, dtype=dtype)
    return np.asarray(pc.fill_null(table[name], fill).to_numpy(zero_copy_only=False), dtype=dtype)


def latency_arrays(table: pa.Table, source: TokenSource = "server") -> dict[str, np.ndarray]:
    """``latency_values`` computed column-wise from a records table (``records.parquet``):
    the same values in the same order, in seconds, without a Python object per request or
    per chunk (15 runs x 1,000 requests x 256 chunks: 0.9 s -> 0.05 s)."""
    n = table.num_rows
    chunks = table["chunk_s"]
    lengths = np.asarray(
        pc.fill_null(pc.list_value_length(chunks), 0).to_numpy(zero_copy_only=False), dtype=np.int64
    )
    flat = np.asarray(pc.list_flatten(chunks).to_numpy(zero_copy_only=False), dtype=np.float64)
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)
    send = _column(table, "send_s", np.nan, np.float64)
    end = _column(table, "end_s", np.nan, np.float64)
    ok = _column(table, "ok", False, bool) & ~np.isnan(end) & (lengths > 0)
    first = np.full(n, np.nan)
    first[lengths > 0] = flat[starts[lengths > 0]]
    ttft, e2e = first - send, end - send
    row_of = np.repeat(np.arange(n), lengths)
    inside = (row_of[1:] == row_of[:-1]) & ok[row_of[1:]]
    itl = np.diff(flat)[inside]
    if source == "retokenized":
        out_len = _column(table, "output_tokens_retokenized", 0, np.int64)
    else:
        requested = _column(table, "output_tokens_requested", 0, np.int64)
        if "output_tokens_server" in table.column_names:
            server = table["output_tokens_server"]
            missing = np.asarray(pc.is_null(server).to_numpy(zero_copy_only=False), dtype=bool)
            out_len = np.where(
                missing, requested, _column(table, "output_tokens_server", 0, np.int64)
            )
        else:
            out_len = requested
    tp = ok & (out_len > 1)
    tpot = (e2e[tp] - ttft[tp]) / (out_len[tp] - 1)
    return {"ttft": ttft[ok], "itl": itl, "tpot": tpot, "e2e": e2e[ok]}


# A point whose slots were all busy for less than this share of it, or that sent fewer
# waves than this, measured mostly ramp-up and drain (issue 14: one wave at c=64 on the H200
# gave less throughput than c=16).
MIN_STEADY_SHARE = 0.5
MIN_WAVES = 2.0


def steady_state(
    records: list[RequestRecord], target: int | None, source: TokenSource = "server"
) -> dict[str, Any]:
    """Throughput over the full-concurrency window: from the moment ``target`` requests are
    first in flight at once (the end of the ramp-up) to the last moment they still are (the
    start of the drain). Output tokens count where their chunks arrived: a request's tokens
    are spread over its chunks, and those inside the window count. ``target`` None (no slots
    to fill: uncapped Poisson arrivals) gives nulls."""
    out: dict[str, Any] = dict.fromkeys(
        (
            "steady_start_s",
            "steady_end_s",
            "steady_window_s",
            "steady_share",
            "steady_busy_share",
            "steady_output_throughput",
            "steady_request_throughput",
            "steady_total_throughput",
        )
    )
    out["steady_target_in_flight"] = target
    events = sorted(
        [(r.send_s, 1) for r in records] + [(r.end_s, -1) for r in records if r.end_s is not None],
        key=lambda e: (e[0], e[1]),
    )  # an end before a send at the same instant
    if not target or not events:
        return out
    start = end = None
    busy_s = 0.0
    level, since = 0, 0.0
    for t, step in events:
        if level >= target:
            busy_s += t - since
        level += step
        since = t
        if level >= target and start is None:
            start = t
        if level < target <= level - step:
            end = t  # the last time it drops below the target wins
    if start is None or end is None or end <= start:
        return out
    window_s = end - start
    first = min(r.send_s for r in records)
    last = max((r.end_s if r.end_s is not None else r.send_s) for r in records)
    tokens_out = tokens_in = 0.0
    done = 0
    for r in records:
        if not (r.ok and r.end_s is not None and r.chunk_s):
            continue
        inside = sum(1 for t in r.chunk_s if start <= t <= end)
        tokens_out += r.output_tokens(source) * inside / len(r.chunk_s)
        if start <= r.end_s <= end:
            done += 1
            tokens_in += r.prompt_tokens
    out.update(
        steady_start_s=start,
        steady_end_s=end,
        steady_window_s=window_s,
        steady_share=window_s / (last - first) if last > first else None,
        steady_busy_share=min(1.0, busy_s / window_s),
        steady_output_throughput=tokens_out / window_s,
        steady_request_throughput=done / window_s,
        steady_total_throughput=(tokens_out + tokens_in) / window_s,
    )
    return out


def wave_warning(num_requests: int, concurrency: int | None) -> str | None:
    """THE waves rule: why a point of ``num_requests`` at ``concurrency`` cannot measure
    that load in steady state (None when it can). The run's warning (``point_warnings``),
    the caveat of a stored point (``point_caveats``) and the Launch form's check before
    anything is queued (core/launch/forms.py) all say it from here. The first words, up
    to ": ", are the finding; the rest is what to do."""
    if not concurrency or not num_requests:
        return None
    waves = num_requests / concurrency
    if waves >= MIN_WAVES:
        return None
    advice = "size it by plan.min_waves or plan.min_steady_s"
    if num_requests < concurrency:
        few = f"{num_requests} request{'s' if num_requests != 1 else ''}"
        return (
            f"concurrency {concurrency} never reached, only {few}: the "
            f"point measures at most concurrency {num_requests}, in one partial wave; "
            f"send at least {math.ceil(MIN_WAVES * concurrency)} prompts or {advice}"
        )
    if waves <= 1:
        return (
            f"one wave only, {num_requests} request{'s' if num_requests != 1 else ''} at "
            f"concurrency {concurrency}: "
            f"1.0 waves, all ramp-up and drain, no steady state; {advice}"
        )
    return (
        f"only {waves:.1f} waves of requests ({num_requests} at concurrency "
        f"{concurrency}): most of the point was ramp-up and drain; {advice}"
    )


def point_warnings(
    metrics: dict[str, Any], concurrency: int | None, min_steady_s: float | None = None
) -> list[str]:
    """Why a point's throughput may not be steady state, in words (empty when it is):
    for the CLI, the Run page and the verdict."""
    out = []
    window = metrics.get("steady_window_s")
    share = metrics.get("steady_share")
    if waves := wave_warning(metrics.get("num_requests") or 0, concurrency):
        out.append(waves)
    if metrics.get("steady_target_in_flight") and window is None:
        out.append(
            f"all {metrics['steady_target_in_flight']} slots were never busy at once: "
            "no steady-state window"
        )
    elif share is not None and share < MIN_STEADY_SHARE:
        out.append(
            f"all slots were busy for {window:.2f} s, {share_text(share)} of the point: mostly "
            "ramp-up and drain; steady_output_throughput is the steady figure"
        )
    if min_steady_s is not None and (window or 0.0) < min_steady_s:
        out.append(
            f"all slots were busy for {window or 0.0:.2f} s, less than "
            f"plan.min_steady_s {min_steady_s:g} s (the point ran out of prepared "
            "requests or time); raise plan.max_point_requests or point_timeout_s"
        )
    return out


@dataclass(frozen=True)
class Caveat:
    """One reason a stored point's numbers are suspect: ``kind`` in a few words, ``detail``
    with this run's figures, ``severity`` to pick the worst of several runs."""

    kind: str
    detail: str
    severity: float = 0.0


# The order the caveats are told in: what invalidates the point first.
CAVEAT_KINDS = (
    "cut short by a cancel",
    "load generator saturated",
    "client timestamps late",
    "not steady state",
    "requests sent late",
    "tokens without text",
)
# What each kind means for the numbers, as the Run page and the CLI say it.
CAVEAT_MEANING = {
    "cut short by a cancel": "its figures cover only the requests that finished",
    "load generator saturated": "the client, not the server, may have limited these numbers",
    "client timestamps late": "its latency tails (p99) may include that much client delay; "
    "medians and throughput do not",
    "not steady state": "mostly ramp-up and drain, not the load the point names",
    "requests sent late": "the client sent after the arrival times it was given: the load "
    "offered was lighter and later than the schedule (trace or Poisson) asks",
    "tokens without text": "TTFT and ITL time the chunks that carried text (bench_serving's "
    "rule); output throughput and TPOT count the server's tokens and stand",
}
# Below this share of the server's output tokens found again in the generated text, most
# tokens streamed as no text: a dummy-weight shape's ids beyond its tokenizer's vocabulary
# (vLLM 0.26 on the Llama-3.1-8B shape, 2026-12-06). A real model stays near 1.
MIN_TEXT_TOKEN_SHARE = 0.5
# At or above this share of one core the one-threaded client is the bottleneck even when its
# loop lag stays low (core.load.health flags it): the offered load itself may have been short.
# Below it, a lag flag means the loop woke late (another thread or process had the CPU or
# the GIL): every request was sent, but chunks were stamped up to the lag late, which
# inflates latency tails, not medians or throughput (docs/BENCHMARKS.md §2, 2026-12-01).
CLIENT_CPU_BOUND_SHARE = 0.9
# A scheduled request (Poisson or a trace's timestamps) handed to the HTTP client later than
# this after it was due and a slot was free: the client, not the schedule, set the arrival
# (p99 over the point's sends; few sends make it their maximum). Waiting for a busy slot
# under the point's own cap is not lateness (core.load.health flags it: client_sent_late).
SEND_LATE_WARN_MS = 10.0


def point_cancelled(summary: Mapping[str, Any], status: RunStatus | None = None) -> bool:
    """The point was cut short by a cancel: its summary says so (``cancelled``), or, in a
    folder written before it did, the run ended "cancelled during point N" at this point."""
    if "cancelled" in summary:
        return bool(summary["cancelled"])
    if status is None or status.state != "cancelled":
        return False
    m = re.search(r"cancelled during point (\d+)", status.reason or "")
    return m is not None and int(m[1]) == summary.get("index")


def point_error_rate(summary: Mapping[str, Any], status: RunStatus | None = None) -> float | None:
    """The point's error rate as pages and exports show it: None where a cancel cut the
    point short in a folder older than ``cancelled_requests`` (its cut requests sit among
    the errors there, so the rate would read as the server's failures)."""
    m = summary.get("metrics") or {}
    if "cancelled_requests" not in m and point_cancelled(summary, status):
        return None
    return as_number(m.get("error_rate"))


def caveat_lines(label: str, caveats: list[Caveat]) -> list[str]:
    """``c=64: client timestamps late (event-loop lag p99 8.4 ms > 5 ms at 13% of a core):
    its latency tails ...``: one line per caveat of one point of one run."""
    return [
        f"{label}: {c.kind} ({c.detail}): {CAVEAT_MEANING.get(c.kind, 'read with care')}"
        for c in caveats
    ]


def point_caveats(summary: Mapping[str, Any], status: RunStatus | None = None) -> list[Caveat]:
    """Why a stored point's numbers are suspect, in words (empty when they are not): cut
    short by a cancel, the load generator saturated (its client used a core) or its
    timestamps late (its loop lagged with CPU to spare), not steady state
    (``point_warnings``). The one rule behind the verdict, the summary card and the exports
    (core/analysis/card.py); ``status``: the run's, for folders older than ``cancelled``."""
    out = []
    m = summary.get("metrics") or {}
    if point_cancelled(summary, status):
        cut, done = m.get("cancelled_requests"), m.get("completed")
        if isinstance(cut, int) and isinstance(done, int):
            detail = f"{done} of {done + (m.get('failed') or 0) + cut} requests finished"
        else:  # an older folder: the cut requests sit among its errors
            detail = "its unfinished requests are counted as errors"
        out.append(Caveat(CAVEAT_KINDS[0], detail))
    client = summary.get("client") or {}
    if client.get("client_saturated"):
        lag = client.get("loop_lag_ms_p99")
        lag = float(lag) if isinstance(lag, int | float) else 0.0
        why = str(client.get("client_saturated_why") or f"event-loop lag p99 {lag:.1f} ms")
        shares = [w.get("client_cpu_share") for w in client.get("workers") or [client]]
        shares = [float(x) for x in shares if isinstance(x, int | float)]
        if any(x >= CLIENT_CPU_BOUND_SHARE for x in shares) or not shares:
            out.append(Caveat(CAVEAT_KINDS[1], why, lag))
        else:  # the loop woke late with CPU to spare: stamps late, load offered in full
            out.append(
                Caveat(CAVEAT_KINDS[2], f"{why} at {share_text(max(shares))} of a core", lag)
            )
    if client.get("client_sent_late"):
        late = client.get("send_late_ms_p99")
        out.append(
            Caveat(
                CAVEAT_KINDS[4],
                str(client.get("client_sent_late_why") or "late sends"),
                float(late) if isinstance(late, int | float) else 0.0,
            )
        )
    if hidden := _tokens_without_text(m):
        out.append(Caveat(CAVEAT_KINDS[5], hidden))
    stored = summary.get("warnings")
    if stored is None:  # a folder older than its warnings: the waves rule, from its plan
        point = summary.get("point") or {}
        concurrency = point.get("concurrency") if isinstance(point, Mapping) else None
        waves = wave_warning(
            int(m.get("num_requests") or 0), concurrency if isinstance(concurrency, int) else None
        )
        stored = [waves] if waves else []
    for w in stored:
        # the finding, without the advice on how to size the point
        out.append(Caveat(CAVEAT_KINDS[3], str(w).split(": ")[0].split("; ")[0]))
    return out


def _tokens_without_text(m: Mapping[str, Any]) -> str | None:
    """The server's output tokens against those its text re-tokenizes to, where most are
    missing (None otherwise, or where either count is absent)."""
    server, text = m.get("total_output_tokens_server"), m.get("total_output_tokens_retokenized")
    if not isinstance(server, int) or not isinstance(text, int) or server <= 0:
        return None
    if text >= MIN_TEXT_TOKEN_SHARE * server:
        return None
    return (
        f"the server counted {server:,} output tokens, the text re-tokenizes to {text:,}; the "
        "rest streamed as no text, as a dummy-weight shape's ids beyond its tokenizer do"
    )


def _length_stats(values: Sequence[int]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p90": None, "p99": None, "max": None}
    arr = np.asarray(values, dtype=float)
    return {
        "p50": float(np.percentile(arr, 50)),
        "p90": float(np.percentile(arr, 90)),
        "p99": float(np.percentile(arr, 99)),
        "max": float(arr.max()),
    }


def length_distribution(
    input_tokens: Sequence[int], output_tokens: Sequence[int]
) -> dict[str, dict[str, float | None]]:
    """p50/p90/p99/max of per-request input and output tokens: the point's lengths as sent
    (inputs of every request sent; outputs of the successful ones, as the throughput counts
    them), so a point of varied lengths says what it measured. ``np.percentile``, linear."""
    return {
        "input_tokens": _length_stats(input_tokens),
        "output_tokens": _length_stats(output_tokens),
    }


def record_lengths(
    records: Sequence[RequestRecord], source: TokenSource = "server"
) -> dict[str, dict[str, float | None]]:
    """``length_distribution`` of a point's records (cancelled requests were never measured)."""
    sent = [r for r in records if r.error != CANCELLED]
    return length_distribution(
        [r.prompt_tokens for r in sent], [r.output_tokens(source) for r in sent if r.ok]
    )


def compute_point_metrics(
    records: list[RequestRecord],
    source: TokenSource = "server",
    target_in_flight: int | None = None,
) -> dict[str, Any]:
    """All headline metrics of one benchmark point. Keys follow bench_serving's JSONL
    names (``output_throughput``, ``median_ttft_ms`` ...) plus ``max_*_ms``,
    ``error_rate``, the output-length check and the steady-state window
    (``steady_*``, over ``target_in_flight`` slots). Requests a cancel cut short are no
    server errors: counted in ``cancelled_requests`` and left out of every other figure."""
    cut = sum(1 for r in records if r.error == CANCELLED)
    if cut:
        records = [r for r in records if r.error != CANCELLED]
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
        "cancelled_requests": cut,
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
    for fam in (
        _Family("ttft", ttfts),
        _Family("itl", itls),
        _Family("tpot", tpots),
        _Family("e2e", e2es),
    ):
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
    m.update(steady_state(records, target_in_flight, source))
    return m
