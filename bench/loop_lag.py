"""docs/BENCHMARKS.md §2 (2026-12-01): what the /metrics sampler thread did to the load generator's
timestamps, before and after it stopped parsing during the points.

The run process has two threads while a point runs: the load generator's event loop,
which timestamps every streamed chunk, and the Sampler, which scrapes the server's
Prometheus /metrics once a second. Both need the GIL. Before, the Sampler parsed each
scrape at once (~10 ms of pure Python for SGLang's ~750 lines) and CPython let it keep
the GIL for its 5 ms switch interval, so the loop woke up to 5 ms late; the H200 points
of the shipped demo showed loop-lag p99 of 5.0-5.4 ms at 4-20 % of a core and were
flagged "load generator saturated". After, the Sampler keeps the text and parses it
after the points, and the loop measures with a 0.5 ms switch interval.

Both modes run the real LoadGenerator and the real Sampler in a child process pinned to
CPU 1, against the fake SGLang (exact TTFT 20 ms, ITL 5 ms) pinned to CPU 0; the scrapes
come from ``python -m http.server`` serving a synthetic /metrics shaped after one scrape of
SGLang 0.5.17 on the H200 (123 gauges/counters and 11 histograms of 30 buckets, SGLang's
label sets). "before" is the old Sampler (parse at once) with CPython's default switch
interval, reproduced here; "after" is core as it is. Modes alternate per repeat.

    python -m bench.loop_lag [--repeats 3] [--interval-s 1.0]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import REPO, fake_sglang, fmt, machine, save, wait_quiet
from core.run.launcher import free_port

TTFT_MS, ITL_MS = 20.0, 5.0
LABELS = (
    'engine_type="unified",model_name="/tmp/gpu/models/smollm2-135m-random",'
    'moe_ep_rank="0",pp_rank="0",tp_rank="0"'
)


def metrics_text() -> str:
    """A /metrics page the size and shape of SGLang 0.5.17's on the H200 demo runs."""
    out: list[str] = []
    for i in range(123):
        kind = "counter" if i % 4 == 0 else "gauge"
        name = f"sglang:metric_{i}" + ("_total" if kind == "counter" else "")
        out += [
            f"# HELP {name} A ServeLab benchmark stand-in for one SGLang metric.",
            f"# TYPE {name} {kind}",
            f"{name}{{{LABELS}}} {i * 1.5}",
        ]
    buckets = [0.001 * 1.6**k for k in range(29)] + [float("inf")]
    for h in range(11):
        name = f"sglang:histogram_{h}_seconds"
        out += [f"# HELP {name} A stand-in histogram.", f"# TYPE {name} histogram"]
        out += [
            f'{name}_bucket{{{LABELS},le="{"+Inf" if b == float("inf") else f"{b:.6g}"}"}} '
            f"{k * 3}.0"
            for k, b in enumerate(buckets)
        ]
        out += [f"{name}_sum{{{LABELS}}} 12.5", f"{name}_count{{{LABELS}}} 87.0"]
    return "\n".join(out) + "\n"


def lag_client(
    base: str, metrics_url: str, mode: str, c: int, n: int, out_len: int, interval_s: float
) -> dict[str, Any]:
    """Run in the pinned child: a warm-up round, then one point with a Sampler beside it."""
    import core.load.generator as loadgen
    from core.load.generator import LoadGenerator, LoadOptions
    from core.load.prompts import Prompt
    from core.metrics import compute_point_metrics
    from core.run.samplers import Sampler, parse_prometheus

    class ParsingSampler(Sampler):
        """The Sampler before: each scrape parsed in the sampler thread as it arrived."""

        def sample_once(self, client: Any) -> None:
            super().sample_once(client)
            for t, point, text in self._scrapes:
                self.rows.extend(
                    {
                        "t_s": t,
                        "point": point,
                        "source": "metrics",
                        "name": nm,
                        "labels": lb,
                        "value": v,
                    }
                    for nm, lb, v in parse_prometheus(text)
                )
            self._scrapes = []

    if mode == "before":
        loadgen.fine_gil_switching = contextlib.nullcontext  # type: ignore[assignment]
    common = {
        "base_url": base,
        "model": "m",
        "seed": 1,
        "concurrency": c,
        "request_rate": float("inf"),
        "exact_length_body": {"ignore_eos": True},
        "request_timeout_s": 300.0,
        "point_timeout_s": 600.0,
    }
    prompt = Prompt(text=" ".join(["alpha"] * 32), prompt_tokens=32, output_len=out_len)
    cls = ParsingSampler if mode == "before" else Sampler
    with LoadGenerator(base, c, 300.0) as gen:
        gen.run(LoadOptions(**common), [Prompt(prompt.text, 32, 16)] * c)  # type: ignore[arg-type]
        sampler = cls(metrics_url, interval_s, time.perf_counter()).start()
        records, health = gen.run(LoadOptions(**common), [prompt] * n)  # type: ignore[arg-type]
        sampler.stop()
        t = time.perf_counter()
        rows = sampler.table().num_rows
        parse_after_s = time.perf_counter() - t
    m = compute_point_metrics(records)
    h = health.as_dict()
    return {
        "mode": mode,
        "completed": m["completed"],
        "scrape_rows": rows,
        "parse_after_s": parse_after_s if mode == "after" else 0.0,
        "loop_lag_ms_p99": h["loop_lag_ms_p99"],
        "loop_lag_ms_max": h["loop_lag_ms_max"],
        "client_cpu_share": h["client_cpu_share"],
        "flagged": h["client_saturated"],
        "why": h.get("client_saturated_why"),
        **{
            k: m[k]
            for k in ("median_itl_ms", "p99_itl_ms", "median_ttft_ms", "p99_ttft_ms", "duration_s")
        },
    }


def run_mode(base: str, metrics_url: str, mode: str, a: argparse.Namespace) -> dict[str, Any]:
    code = (
        "import json; from bench.loop_lag import lag_client; print('RESULT ' + json.dumps("
        f"lag_client({base!r}, {metrics_url!r}, {mode!r}, {a.concurrency}, {a.requests}, "
        f"{a.output_len}, {a.interval_s})))"
    )
    argv = [sys.executable, "-c", code]
    if not a.no_pin:
        argv = ["taskset", "-c", "1", *argv]
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=900, check=False)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return dict(json.loads(line[7:]))
    raise RuntimeError(f"client failed: {proc.stderr[-2000:]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--interval-s", type=float, default=1.0, help="the Sampler's interval")
    ap.add_argument("--no-pin", action="store_true", help="no taskset (a 1-core host)")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="servelab-looplag-"))
    (work / "metrics").write_text(metrics_text())
    port = free_port()
    http = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "http.server",
            str(port),
            "--bind",
            "127.0.0.1",
            "--directory",
            str(work),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    metrics_url = f"http://127.0.0.1:{port}/metrics"
    results: list[dict[str, Any]] = []
    try:
        time.sleep(1.0)  # http.server binds at start-up
        with fake_sglang(
            work / "server.log", TTFT_MS, ITL_MS, cpus=None if a.no_pin else "0"
        ) as base:
            for rep in range(a.repeats):
                for mode in ("before", "after"):
                    load = wait_quiet()
                    r = {
                        **run_mode(base, metrics_url, mode, a),
                        "repeat": rep,
                        "host_load_before": load,
                    }
                    results.append(r)
                    print(
                        f"{mode:6s} #{rep}: lag p99 {fmt(r['loop_lag_ms_p99'])} ms "
                        f"max {fmt(r['loop_lag_ms_max'])} ms, client CPU "
                        f"{fmt(100 * (r['client_cpu_share'] or 0), '.0f')}%, ITL p50/p99 "
                        f"{fmt(r['median_itl_ms'])}/{fmt(r['p99_itl_ms'])} ms, TTFT p99 "
                        f"{fmt(r['p99_ttft_ms'])} ms, flagged: {r['why'] or 'no'}",
                        flush=True,
                    )
    finally:
        http.terminate()
        http.wait(10)
        for f in work.iterdir():
            f.unlink()
        work.rmdir()
    summary = {}
    for mode in ("before", "after"):
        rs = [r for r in results if r["mode"] == mode]
        summary[mode] = {
            k: statistics.median(r[k] for r in rs)
            for k in (
                "loop_lag_ms_p99",
                "loop_lag_ms_max",
                "median_itl_ms",
                "p99_itl_ms",
                "p99_ttft_ms",
                "client_cpu_share",
            )
        }
        summary[mode]["flagged_runs"] = sum(bool(r["flagged"]) for r in rs)
        print(
            f"{mode}: median of {len(rs)}: "
            + ", ".join(f"{k} {fmt(v)}" for k, v in summary[mode].items())
        )
    path = save(
        "loop-lag.json",
        {
            "machine": machine(),
            "args": vars(a),
            "truth": {"ttft_ms": TTFT_MS, "itl_ms": ITL_MS},
            "metrics_lines": metrics_text().count("\n"),
            "results": results,
            "summary": summary,
            "pid": os.getpid(),
        },
    )
    print(f"saved {path.relative_to(REPO)}")


if __name__ == "__main__":
    main()
