"""Part 1 of docs/BENCHMARKS.md: ServeLab's measurement error against known truth.

The fake SGLang (tests/fakes, launched through core.run.launcher.ManagedServer) sends the first
content chunk exactly FAKE_SGLANG_TTFT_MS after it received the request body, and chunk i at
TTFT + i * ITL (absolute deadlines), so every metric's true value is known:
TTFT, ITL = TPOT = the injected delays, E2E = TTFT + (n - 1) * ITL. True throughput follows
from the same timing and the send times the client chose: total output tokens divided by
(max(send_i + E2E) - min(send_i)).

Two load shapes per concurrency N (1, 8, 64, 256), each after a warm-up of N requests on the
same connection pool (as the pipeline does):
  steady  Poisson arrivals at N / E2E per second (about N in flight, no cap)
  burst   N at once, a closed loop of N in flight (request_rate = inf, concurrency = N)

    python -m bench.accuracy [--ttft-ms 50 --itl-ms 10 --out-len 32 --repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from bench.common import OUT, Fake, HostLoad, fake_sglang, fmt, machine, save, wait_quiet
from core.load.generator import LoadGenerator, LoadOptions
from core.load.prompts import Prompt
from core.metrics import compute_point_metrics
from core.records import RequestRecord

CONCURRENCY = (1, 8, 64, 256)


def requests_for(c: int) -> int:
    return max(20, 4 * c)


def measure(
    base: Fake, shape: str, c: int, n_out: int, e2e_s: float, seed: int, workers: int = 1
) -> tuple[list[RequestRecord], dict[str, Any]]:
    n = requests_for(c)
    prompts = [Prompt(text=" alpha bravo charlie delta", prompt_tokens=4, output_len=n_out)] * n
    common = {
        "base_url": base,
        "model": "m",
        "seed": seed,
        "exact_length_body": {"ignore_eos": True},
        "request_timeout_s": 60.0,
        "point_timeout_s": 300.0,
        "workers": workers,
    }
    if shape == "steady":
        opts = LoadOptions(concurrency=None, request_rate=c / e2e_s, **common)  # type: ignore[arg-type]
    else:
        opts = LoadOptions(concurrency=c, request_rate=float("inf"), **common)  # type: ignore[arg-type]
    warm = LoadOptions(concurrency=c, request_rate=float("inf"), **common)  # type: ignore[arg-type]
    with LoadGenerator(base, n if shape == "steady" else c, 60.0) as gen:
        gen.run(warm, [Prompt(text=" warm", prompt_tokens=1, output_len=4)] * c)
        quiet = wait_quiet(timeout_s=10.0)
        cpu0, t0 = base.cpu_s(), time.perf_counter()
        with HostLoad() as load:
            records, health = gen.run(opts, prompts)
        health_row = {k: v for k, v in health.as_dict().items() if k != "workers"}
        server_cpu = base.cpu_s() - cpu0
        server_share = server_cpu / (time.perf_counter() - t0)
    # other_cpu_share: what the rest of the host used meanwhile (a shared machine)
    return records, {
        **health_row,
        "server_cpu_share": server_share,
        "host_busy_before": quiet,
        "other_cpu_share": load.other_share(server_cpu + health.cpu_s),
    }


def errors(
    records: list[RequestRecord],
    ttft_ms: float,
    itl_ms: float,
    n_out: int,
) -> dict[str, Any]:
    m = compute_point_metrics(records)
    e2e_ms = ttft_ms + (n_out - 1) * itl_ms
    ok = [r for r in records if r.ok]
    t0 = min(r.send_s for r in ok)
    true_duration = max(r.send_s for r in ok) + e2e_ms / 1000 - t0
    true_tput = len(ok) * n_out / true_duration
    out = {
        "completed": m["completed"],
        "num_requests": m["num_requests"],
        "mean_in_flight": m["concurrency"],
        "max_concurrent_requests": m["max_concurrent_requests"],
        "output_throughput": m["output_throughput"],
        "true_output_throughput": true_tput,
        "throughput_err_pct": 100 * (m["output_throughput"] / true_tput - 1),
        # how long the client took to put all of a burst on the wire
        "send_spread_ms": 1000 * (max(r.send_s for r in ok) - t0),
        "dispatch_to_send_ms_median": 1000
        * statistics.median(r.send_s - (r.dispatch_s or r.send_s) for r in ok),
    }
    for fam, truth in (("ttft", ttft_ms), ("itl", itl_ms), ("tpot", itl_ms), ("e2e", e2e_ms)):
        out[f"median_{fam}_err_ms"] = m[f"median_{fam}_ms"] - truth
        out[f"p99_{fam}_err_ms"] = m[f"p99_{fam}_ms"] - truth
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--ttft-ms", type=float, default=50.0)
    ap.add_argument("--itl-ms", type=float, default=10.0)
    ap.add_argument("--out-len", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--concurrency", default=",".join(map(str, CONCURRENCY)))
    ap.add_argument("--name", default="accuracy")
    ap.add_argument(
        "--workers",
        type=int,
        default=1,
        help="load-generator processes per point (core/load/shards.py)",
    )
    a = ap.parse_args()
    if not 1 <= a.repeats <= 10:
        raise SystemExit("--repeats must be 1..10")
    concs = [int(x) for x in a.concurrency.split(",")]
    e2e_s = (a.ttft_ms + (a.out_len - 1) * a.itl_ms) / 1000
    rows: list[dict[str, Any]] = []
    t_start = time.monotonic()
    with fake_sglang(OUT / f"{a.name}-server.log", a.ttft_ms, a.itl_ms) as base:
        for rep in range(a.repeats):
            for c in concs:
                for shape in ("steady", "burst"):
                    records, health = measure(
                        base, shape, c, a.out_len, e2e_s, seed=rep, workers=a.workers
                    )
                    row = {
                        "shape": shape,
                        "concurrency": c,
                        "repeat": rep,
                        **errors(records, a.ttft_ms, a.itl_ms, a.out_len),
                        **health,
                    }
                    rows.append(row)
                    print(
                        f"{shape:6} c={c:<3} rep={rep} ttft {row['median_ttft_err_ms']:+.2f} "
                        f"itl {row['median_itl_err_ms']:+.2f} "
                        f"tpot {row['median_tpot_err_ms']:+.2f} "
                        f"e2e {row['median_e2e_err_ms']:+.2f} ms, "
                        f"tput {row['throughput_err_pct']:+.2f}%, lag p99 "
                        f"{row['loop_lag_ms_p99']:.1f} ms, cpu {row['client_cpu_share']:.2f}"
                        f" server cpu {row['server_cpu_share']:.2f}"
                        f" others {row['other_cpu_share']:.2f}"
                        f"{' SATURATED' if row['client_saturated'] else ''}",
                        flush=True,
                    )
    summary = []
    keys = (
        "median_ttft_err_ms",
        "median_itl_err_ms",
        "median_tpot_err_ms",
        "median_e2e_err_ms",
        "throughput_err_pct",
        "p99_ttft_err_ms",
        "p99_itl_err_ms",
        "send_spread_ms",
        "loop_lag_ms_p99",
        "client_cpu_share",
        "server_cpu_share",
        "other_cpu_share",
        "mean_in_flight",
    )
    for shape in ("steady", "burst"):
        for c in concs:
            sel = [r for r in rows if r["shape"] == shape and r["concurrency"] == c]
            s: dict[str, Any] = {"shape": shape, "concurrency": c}
            for k in keys:
                vals = [r[k] for r in sel]
                s[k] = statistics.median(vals)
                s[k + "_worst"] = max(vals, key=abs)
            s["saturated_any"] = any(r["client_saturated"] for r in sel)
            summary.append(s)
    result = {
        "machine": machine(),
        "workers": a.workers,
        "ttft_ms": a.ttft_ms,
        "itl_ms": a.itl_ms,
        "out_len": a.out_len,
        "repeats": a.repeats,
        "wall_s": time.monotonic() - t_start,
        "summary": summary,
        "rows": rows,
    }
    path = save(f"{a.name}.json", result)
    print(
        "\n| shape | N | TTFT | ITL | TPOT | E2E | throughput | p99 TTFT | send spread | "
        "lag p99 | client CPU | server CPU |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|"
    )
    for s in summary:
        print(
            f"| {s['shape']} | {s['concurrency']} | {s['median_ttft_err_ms']:+.2f} | "
            f"{s['median_itl_err_ms']:+.2f} | {s['median_tpot_err_ms']:+.2f} | "
            f"{s['median_e2e_err_ms']:+.2f} | {s['throughput_err_pct']:+.2f}% | "
            f"{s['p99_ttft_err_ms']:+.2f} | {fmt(s['send_spread_ms'], '.1f')} | "
            f"{s['loop_lag_ms_p99']:.1f} | {s['client_cpu_share']:.2f}"
            f"{' (saturated)' if s['saturated_any'] else ''} | "
            f"{s['server_cpu_share']:.2f} |"
        )
    print(f"\nwritten {path}")


if __name__ == "__main__":
    main()
