"""Part 2 of docs/BENCHMARKS.md: how many streamed chunks per second each client handles on one
core before its own overhead shows, ServeLab's load generator vs SGLang's ``bench_serving``.

The fake SGLang runs pinned to CPU 0; each client runs as its own process pinned to CPU 1
(``taskset -c 1``), alternating ServeLab / bench_serving / ServeLab / ... per setting.

  flood   FAKE_SGLANG_ITL_MS=0: the server writes every token as soon as it can, so the chunk
          rate a client reaches is its own ceiling (as long as it is below the server's).
  paced   ITL = 10 ms, N streams: the server offers N x 100 chunks/s; a client that keeps up
          measures ITL = 10 ms and the offered throughput; one that does not, shows it in ITL
          and throughput. The highest N that passes is the client's sustained rate.

bench_serving: ``python -m sglang.bench_serving --backend sglang-oai-chat --dataset-name
random-ids`` from bench/.venv-sglang (see docs/BENCHMARKS.md), offline, with the SmolLM2
tokenizer; its JSON line gives throughput and ITL. ServeLab: core.load.generator.run_load.

    python -m bench.headroom [--repeats 2] [--skip-bench-serving]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import (
    OUT,
    REPO,
    HostLoad,
    bench_serving_record,
    fake_sglang,
    machine,
    save,
    wait_quiet,
)

SGLANG_PY = REPO / "bench" / ".venv-sglang" / "bin" / "python"
# bench_serving unchanged, except that its benchmark() coroutine (warm-up, the requests, the
# /server_info call; not the ~17 s of imports) is timed in CPU seconds of its process.
CPU_TIMED = """
import json, runpy, time
import sglang.benchmark.serving as S
_bench = S.benchmark
async def benchmark(*a, **k):
    c0, t0 = time.process_time(), time.perf_counter()
    try:
        return await _bench(*a, **k)
    finally:
        print("CPU_TIMED " + json.dumps({"cpu_s": time.process_time() - c0,
                                          "wall_s": time.perf_counter() - t0}), flush=True)
S.benchmark = benchmark
runpy.run_module("sglang.bench_serving", run_name="__main__", alter_sys=True)
"""
TOKENIZER = REPO / "data" / "models" / "SmolLM2-135M-Instruct"
CLIENT_CPU = "1"
SERVER_CPU = "0"


def _pinned(cpus: str, argv: list[str]) -> list[str]:
    """``argv`` pinned to ``cpus`` with taskset, or as it is where there is no taskset."""
    return ["taskset", "-c", cpus, *argv] if shutil.which("taskset") else argv


def servelab_client(
    base: str,
    c: int,
    n: int,
    out_len: int,
    workers: int = 1,
    event_loop: str = "auto",
    json_parser: str = "auto",
) -> dict[str, Any]:
    """Run in the pinned child: one warm-up round, then the measured point. With
    ``workers`` > 1 the point is sharded (core/load/shards.py): the client's CPU is every
    worker's plus this process's (which only waits and merges). ``event_loop`` and
    ``json_parser``: as Settings.event_loop / Settings.json_parser (SERVELAB_EVENT_LOOP,
    SERVELAB_JSON) give them to a run."""
    from core.load.generator import LoadGenerator, LoadOptions
    from core.load.prompts import Prompt
    from core.metrics import compute_point_metrics

    common = {
        "base_url": base,
        "model": "m",
        "seed": 1,
        "concurrency": c,
        "request_rate": float("inf"),
        "exact_length_body": {"ignore_eos": True},
        "request_timeout_s": 300.0,
        "point_timeout_s": 600.0,
        "workers": workers,
    }
    prompt = Prompt(text=" ".join(["alpha"] * 32), prompt_tokens=32, output_len=out_len)
    gen = LoadGenerator(base, c, 300.0, event_loop=event_loop, json_parser=json_parser)
    with gen:
        gen.run(LoadOptions(**common), [Prompt(prompt.text, 32, 16)] * c)  # type: ignore[arg-type]
        parent_cpu0 = time.process_time()
        records, health = gen.run(LoadOptions(**common), [prompt] * n)  # type: ignore[arg-type]
        parent_cpu_s = time.process_time() - parent_cpu0 if workers > 1 else 0.0
    health.cpu_s += parent_cpu_s
    m = compute_point_metrics(records)
    chunks_all = sum(len(r.chunk_s) for r in records)
    reads = sum(len(set(r.chunk_s)) for r in records if r.ok)
    chunks = sum(len(r.chunk_s) for r in records if r.ok)
    return {
        "completed": m["completed"],
        "output_throughput": m["output_throughput"],
        "median_itl_ms": m["median_itl_ms"],
        "p99_itl_ms": m["p99_itl_ms"],
        "median_ttft_ms": m["median_ttft_ms"],
        "duration_s": m["duration_s"],
        "chunks_per_read": chunks / reads if reads else None,
        "client_cpu_us_per_chunk": 1e6 * health.cpu_s / max(chunks_all, 1),
        "parent_cpu_s": parent_cpu_s,
        "workers": workers,
        "json_parser": gen.json_parser,
        "event_loop": gen.event_loop,
        **{k: v for k, v in health.as_dict().items() if k != "workers"},
        "client_cpu_share": health.cpu_s / health.wall_s if health.wall_s else None,
    }


def run_servelab(
    base: str,
    c: int,
    n: int,
    out_len: int,
    workers: int = 1,
    event_loop: str = "auto",
    cpus: str = CLIENT_CPU,
    json_parser: str = "auto",
) -> dict[str, Any]:
    code = (
        "import json,sys; from bench.headroom import servelab_client; "
        f"print('RESULT ' + json.dumps(servelab_client({base!r}, {c}, {n}, {out_len}, "
        f"{workers}, {event_loop!r}, {json_parser!r})))"
    )
    proc = subprocess.run(
        _pinned(cpus, [sys.executable, "-c", code]),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return dict(json.loads(line[7:]))
    raise RuntimeError(f"ServeLab client failed: {proc.stderr[-2000:]}")


def run_bench_serving(base: str, c: int, n: int, out_len: int, tag: str) -> dict[str, Any]:
    out = OUT / f"headroom-bench-serving-{tag}.jsonl"
    out.unlink(missing_ok=True)
    argv = [
        "taskset",
        "-c",
        CLIENT_CPU,
        str(SGLANG_PY),
        "-c",
        CPU_TIMED,
        "--backend",
        "sglang-oai-chat",
        "--base-url",
        base,
        "--model",
        "m",
        "--dataset-name",
        "random-ids",
        "--tokenizer",
        str(TOKENIZER),
        "--num-prompts",
        str(n),
        "--random-input-len",
        "32",
        "--random-output-len",
        str(out_len),
        "--random-range-ratio",
        "1.0",
        "--max-concurrency",
        str(c),
        "--request-rate",
        "inf",
        "--warmup-requests",
        str(c),
        "--disable-tqdm",
        "--output-file",
        str(out),
    ]
    rec, stdout = bench_serving_record(argv, out, timeout_s=900)
    timed = next(
        json.loads(line[10:]) for line in stdout.splitlines() if line.startswith("CPU_TIMED ")
    )
    chunks = rec["total_output_tokens"] + c * min(out_len, 32)  # + its warm-up requests
    return {
        "completed": rec["completed"],
        "output_throughput": rec["output_throughput"],
        "client_cpu_share": timed["cpu_s"] / timed["wall_s"],
        "client_cpu_us_per_chunk": 1e6 * timed["cpu_s"] / chunks,
        "median_itl_ms": rec["median_itl_ms"],
        "p99_itl_ms": rec["p99_itl_ms"],
        "median_ttft_ms": rec["median_ttft_ms"],
        "duration_s": rec["duration"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--skip-bench-serving", action="store_true")
    ap.add_argument("--modes", default="flood,paced")
    ap.add_argument(
        "--workers",
        default="1,4,8",
        help="--scale: ServeLab client processes per point (core/load/shards.py)",
    )
    ap.add_argument(
        "--variants",
        default="1-auto-auto",
        help="ServeLab variants WORKERS-LOOP-JSON, comma-separated: LOOP auto "
        "(uvloop where installed) or asyncio, JSON auto (orjson where "
        "installed) or json; e.g. 1-auto-auto,1-asyncio-json,2-auto-auto",
    )
    ap.add_argument(
        "--scale",
        action="store_true",
        help="the many-core run instead: W client workers against several fake "
        "servers on one port (--server-procs), flood, c=64",
    )
    ap.add_argument("--server-procs", type=int, default=6)
    ap.add_argument(
        "--seconds", type=float, default=8.0, help="--scale: about how long each point streams"
    )
    a = ap.parse_args()
    workers = [int(w) for w in a.workers.split(",")]
    if a.scale:
        scale(workers, a.server_procs, a.seconds, a.repeats)
        return
    if not 1 <= a.repeats <= 5:
        raise SystemExit("--repeats must be 1..5")
    if not a.skip_bench_serving and not SGLANG_PY.exists():
        raise SystemExit(f"{SGLANG_PY} missing: see docs/BENCHMARKS.md part 2 for the install")
    if len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("needs 2 CPUs (server on one, client on the other)")
    variants = [f"servelab-{v}" for v in a.variants.split(",")]
    clients = variants + ([] if a.skip_bench_serving else ["bench_serving"])
    settings: list[tuple[str, float, int, int, int]] = []  # mode, itl, c, n, out_len
    if "flood" in a.modes:
        settings += [("flood", 0.0, c, max(2 * c, 64), 4096) for c in (1, 8, 64)]
    if "paced" in a.modes:
        settings += [("paced", 10.0, c, 2 * c, 200) for c in (32, 64, 128, 256)]
    rows: list[dict[str, Any]] = []
    t_start = time.monotonic()
    for mode, itl, c, n, out_len in settings:
        with fake_sglang(
            OUT / "headroom-server.log", 0.0 if mode == "flood" else 20.0, itl, cpus=SERVER_CPU
        ) as base:
            for rep in range(a.repeats):
                order = clients if rep % 2 == 0 else clients[::-1]
                for client in order:
                    tag = f"{mode}-{c}-{rep}"
                    quiet = wait_quiet(timeout_s=10.0)
                    cpu0 = base.cpu_s()
                    with HostLoad() as load:
                        if client.startswith("servelab"):
                            _, w, loop, parser = client.split("-")
                            res = run_servelab(
                                base, c, n, out_len, int(w), loop, json_parser=parser
                            )
                        else:
                            res = run_bench_serving(base, c, n, out_len, tag)
                    # busy cores over the whole client process (bench_serving: with its ~17 s
                    # of imports), minus the server: the client plus anyone else's work
                    res["host_busy_before"] = quiet
                    res["load_average_1m"] = os.getloadavg()[0]
                    res["busy_minus_server_cores"] = load.other_share(base.cpu_s() - cpu0)
                    offered = c * 1000.0 / itl if itl else None
                    row = {
                        "mode": mode,
                        "itl_ms": itl,
                        "concurrency": c,
                        "num_prompts": n,
                        "out_len": out_len,
                        "repeat": rep,
                        "client": client,
                        "offered_chunks_per_s": offered,
                        **res,
                    }
                    rows.append(row)
                    print(
                        f"{mode:5} c={c:<3} {client:13} {res['output_throughput']:9.0f} "
                        f"(host before {quiet:.2f}) "
                        f"chunks/s  ITL p50 {res['median_itl_ms']:.3f} p99 "
                        f"{res['p99_itl_ms']:.2f} ms  client CPU "
                        f"{res['client_cpu_us_per_chunk']:.1f} us/chunk "
                        f"(share {res['client_cpu_share']:.2f}, busy-minus-server "
                        f"{res['busy_minus_server_cores']:.2f})"
                        + (
                            f"  lag p99 {res['loop_lag_ms_p99']:.1f} ms cpu "
                            f"{res['client_cpu_share']:.2f} per-read "
                            f"{res['chunks_per_read']:.1f}"
                            f"{' SATURATED' if res['client_saturated'] else ''}"
                            if client.startswith("servelab")
                            else ""
                        ),
                        flush=True,
                    )
    summary = []
    for mode, itl, c, _n, _o in settings:
        s: dict[str, Any] = {
            "mode": mode,
            "concurrency": c,
            "offered": c * 1000.0 / itl if itl else None,
        }
        for client in clients:
            sel = [
                r
                for r in rows
                if r["mode"] == mode and r["concurrency"] == c and r["client"] == client
            ]
            s[client] = {
                k: statistics.median(r[k] for r in sel)
                for k in (
                    "output_throughput",
                    "median_itl_ms",
                    "p99_itl_ms",
                    "client_cpu_us_per_chunk",
                    "client_cpu_share",
                )
            }
            s[client]["one_core_ceiling"] = 1e6 / s[client]["client_cpu_us_per_chunk"]
            if client.startswith("servelab"):
                s[client]["saturated_flags"] = [r["client_saturated"] for r in sel]
                s[client]["cpu_share"] = statistics.median(r["client_cpu_share"] for r in sel)
                s[client]["lag_p99_ms"] = statistics.median(r["loop_lag_ms_p99"] for r in sel)
        if "bench_serving" in s:
            for v in variants:
                s[v]["ratio"] = s[v]["output_throughput"] / s["bench_serving"]["output_throughput"]
                s[v]["ceiling_ratio"] = (
                    s[v]["one_core_ceiling"] / s["bench_serving"]["one_core_ceiling"]
                )
        s["load_average_1m"] = statistics.median(
            r["load_average_1m"] for r in rows if r["mode"] == mode and r["concurrency"] == c
        )
        summary.append(s)
    path = save(
        "headroom.json",
        {
            "machine": machine(),
            "wall_s": time.monotonic() - t_start,
            "summary": summary,
            "rows": rows,
        },
    )
    print(json.dumps(summary, indent=1))
    print(f"written {path}")


SERVER_PATCH = """
import runpy, socketserver, sys
socketserver.TCPServer.allow_reuse_port = True  # several fake processes on one port
sys.argv = ["sglang.launch_server", *sys.argv[1:]]
runpy.run_module("sglang.launch_server", run_name="__main__", alter_sys=True)
"""


def scale(workers: list[int], procs: int, seconds: float, repeats: int) -> None:
    """The many-core run: ``procs`` fake SGLang processes share one port (SO_REUSEPORT: the
    kernel spreads connections over them), each pinned to its own core, so the server side
    is not one GIL; the ServeLab client with W workers gets the other cores. Flood (the
    server writes as fast as it can), c=64 streams: aggregate chunks/s = the client's."""
    import urllib.request

    from bench.common import FAKE_SGLANG
    from core.run.launcher import free_port

    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < procs + 1:  # W workers beyond the client's cores share them
        raise SystemExit(f"needs at least {procs + 1} CPUs, have {len(cpus)}")
    server_cpus, client_cpus = cpus[-procs:], cpus[:-procs]
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "FAKE_SGLANG_TTFT_MS": "0",
        "FAKE_SGLANG_ITL_MS": "0",
        "FAKE_SGLANG_STARTUP_S": "0.2",
        "PYTHONPATH": os.pathsep.join([str(FAKE_SGLANG), str(REPO)]),
    }
    log = (OUT / "headroom-scale-server.log").open("w")
    servers = [
        subprocess.Popen(
            _pinned(
                str(cpu),
                [
                    sys.executable,
                    "-c",
                    SERVER_PATCH,
                    "--model-path",
                    "m",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                ],
            ),
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        for cpu in server_cpus
    ]
    rows: list[dict[str, Any]] = []
    t_start = time.monotonic()
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(base + "/health", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("fake servers did not start") from None
                time.sleep(0.2)
        time.sleep(1.0)  # every process listening before the first connections
        c, out_len = 64, 4096
        for rep in range(repeats):
            for w in workers if rep % 2 == 0 else workers[::-1]:
                # size the point to ~``seconds`` at 150,000 chunks/s per worker
                n = max(2 * c, int(seconds * 150_000 * w / out_len))
                res = run_servelab(
                    base, c, n, out_len, w, "auto", ",".join(str(x) for x in client_cpus[:w])
                )
                res.update(workers=w, repeat=rep, num_prompts=n, load_average_1m=os.getloadavg()[0])
                rows.append(res)
                print(
                    f"scale W={w} {res['output_throughput']:10.0f} chunks/s  client "
                    f"{res['client_cpu_us_per_chunk']:.2f} us/chunk, "
                    f"{res['client_cpu_share']:.2f} cores, lag p99 "
                    f"{res['loop_lag_ms_p99']:.1f} ms",
                    flush=True,
                )
    finally:
        for srv in servers:
            srv.terminate()
        for srv in servers:
            try:
                srv.wait(10)
            except subprocess.TimeoutExpired:
                srv.kill()
                srv.wait(5)
        log.close()
    summary = {
        w: {
            k: statistics.median(r[k] for r in rows if r["workers"] == w)
            for k in (
                "output_throughput",
                "client_cpu_us_per_chunk",
                "client_cpu_share",
                "loop_lag_ms_p99",
            )
        }
        for w in workers
    }
    path = save(
        "headroom-scale.json",
        {
            "machine": machine(),
            "server_procs": procs,
            "pinned": bool(shutil.which("taskset")),
            "server_cpus": server_cpus,
            "client_cpus": client_cpus,
            "wall_s": time.monotonic() - t_start,
            "summary": summary,
            "rows": rows,
        },
    )
    print(json.dumps(summary, indent=1))
    print(f"written {path}")


if __name__ == "__main__":
    Path(OUT).mkdir(parents=True, exist_ok=True)
    main()
