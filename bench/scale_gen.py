"""Generate a synthetic ServeLab data folder: N run folders with M per-request records in all,
shaped like real ones (spec/status/facts/launch/result JSON, points/NNN/summary.json and
records.parquet with the real schema), plus the catalog built by ``Catalog.reindex``.

    python -m bench.scale_gen --out bench/out/scale/data --runs 10000 --records 10000000

Most runs have 4 points x 250 requests x 32 output tokens; ``--heavy`` runs (the ones the
comparison timings open) have 5 points x 1000 requests x 256 tokens, with summaries computed by
``core.metrics`` from their records. The other runs' summaries are one real summary, scaled per
run (computing 10 million records' metrics in Python would dominate the generation time and
prove nothing). Two processes write folders in parallel; bounded by ``--runs``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from core.config import BenchmarkPlan, Point, RunSpec, ServerConfig
from core.metrics import compute_point_metrics
from core.records import RECORD_SCHEMA, records_from_table
from core.run_folder import RUN_STEPS, point_step, write_json_atomic
from core.store import Catalog

WORDS = " The quick brown fox jumps over the lazy dog and then runs far away".split(" ")
CONCURRENCY = (1, 8, 32, 64, 256)


def records_table(
    rng: np.random.Generator, n: int, out_len: int, conc: int, ttft_ms: float, itl_ms: float
) -> pa.Table:
    """n requests, each with out_len chunk arrival times, ~conc in flight."""
    e2e = (ttft_ms + (out_len - 1) * itl_ms) / 1000.0
    send = np.sort(rng.uniform(0.0, e2e * n / conc, n))
    ttft = ttft_ms / 1000.0 * rng.lognormal(0.0, 0.15, n)
    gaps = itl_ms / 1000.0 * rng.lognormal(0.0, 0.2, (n, out_len - 1))
    chunks = np.empty((n, out_len))
    chunks[:, 0] = send + ttft
    chunks[:, 1:] = chunks[:, :1] + np.cumsum(gaps, axis=1)
    end = chunks[:, -1] + 0.0002
    offsets = pa.array(np.arange(0, n * out_len + 1, out_len, dtype=np.int32))
    chunk_col = pa.ListArray.from_arrays(offsets, pa.array(chunks.ravel()))
    text = [
        "".join(f" {WORDS[(i + j) % len(WORDS)]}" for j in range(min(out_len, 64)))
        for i in range(4)
    ]
    cols = {
        "index": pa.array(np.arange(n, dtype=np.int32)),
        "send_s": pa.array(send),
        "prompt_tokens": pa.array(np.full(n, 256, dtype=np.int32)),
        "output_tokens_requested": pa.array(np.full(n, out_len, dtype=np.int32)),
        "chunk_s": chunk_col,
        "end_s": pa.array(end),
        "ok": pa.array(np.ones(n, dtype=bool)),
        "status_code": pa.array(np.full(n, 200, dtype=np.int32)),
        "error": pa.nulls(n, pa.string()),
        "prompt_tokens_server": pa.array(np.full(n, 270, dtype=np.int32)),
        "output_tokens_server": pa.array(np.full(n, out_len, dtype=np.int32)),
        "output_tokens_retokenized": pa.array(np.full(n, out_len, dtype=np.int32)),
        "finish_reason": pa.array(["length"] * n),
        "generated_text": pa.array([text[i % 4] for i in range(n)]),
        "dispatch_s": pa.array(send - 0.0001),
    }
    return pa.table(cols, schema=RECORD_SCHEMA)


def spec_for(i: int, points: list[Point]) -> dict[str, Any]:
    graphs = i % 2 == 0
    spec = RunSpec(
        server=ServerConfig(
            engine="sglang",
            model=f"/models/model-{i % 7}",
            cuda_graphs=graphs,
            mem_fraction_static=0.85,
            device="cuda",
        ),
        plan=BenchmarkPlan(points=tuple(points), seed=42),
        tags=(f"batch-{i // 500}", "graphs-on" if graphs else "graphs-off"),
        intended_diff=("server.cuda_graphs",),
    )
    return spec.model_dump(mode="json")


def summary_of(index: int, point: Point, metrics: dict[str, Any]) -> dict[str, Any]:
    return {
        "index": index,
        "label": point.label,
        "point": point.model_dump(mode="json"),
        "started_at": "2026-11-30T00:00:00.000+00:00",
        "prompts_digest": f"digest-{index}",
        "token_source": "server",
        "metrics": metrics,
        "metrics_retokenized": metrics,
        "client": {
            "loop_lag_ms_max": 1.2,
            "loop_lag_ms_p99": 0.8,
            "client_cpu_s": 1.0,
            "client_cpu_share": 0.2,
            "client_saturated": False,
        },
    }


def _scaled(m: dict[str, Any], f: float) -> dict[str, Any]:
    out = dict(m)
    for k, v in m.items():
        if not isinstance(v, float) or isinstance(v, bool):
            continue
        if k.endswith("_ms"):
            out[k] = v / f
        elif k.endswith("throughput"):
            out[k] = v * f
    return out


def write_run(args: tuple[Path, int, bool, dict[str, dict[str, Any]]]) -> int:
    runs_dir, i, heavy, templates = args
    rng = np.random.default_rng(i)
    run_id = f"20261130-{i // 3600:02d}{(i // 60) % 60:02d}{i % 60:02d}-{i:06x}"
    path = runs_dir / run_id
    (path / "points").mkdir(parents=True, exist_ok=True)
    n, out_len = (1000, 256) if heavy else (250, 32)
    concs = CONCURRENCY if heavy else CONCURRENCY[:4]
    points = [Point(concurrency=c, num_prompts=n, input_len=256, output_len=out_len) for c in concs]
    spec = spec_for(i, points)
    graphs = bool(spec["server"]["cuda_graphs"])
    f = (1.08 if graphs else 1.0) * float(rng.lognormal(0.0, 0.03))
    write_json_atomic(
        path / "spec.json",
        {"run_id": run_id, "created_at": "2026-11-30T00:00:00.000+00:00", **spec},
    )
    for k, p in enumerate(points):
        table = records_table(rng, n, out_len, p.concurrency or n, 40.0 / f, 8.0 / f)
        d = path / "points" / f"{k:03d}"
        d.mkdir(exist_ok=True)
        pq.write_table(table, d / "records.parquet")
        if heavy:
            m = compute_point_metrics(records_from_table(table))
        else:
            m = _scaled(templates[str(p.concurrency)], f)
        write_json_atomic(d / "summary.json", summary_of(k, p, m))
    head = m
    write_json_atomic(
        path / "facts.json",
        {
            "engine_version": "0.5.23",
            "kv_cache_tokens": 340000,
            "weight_mem_gb": 0.98,
            "kv_cache_gb": 20.5,
            "graph_mem_gb": 1.2 if graphs else None,
            "available_gpu_mem_gb": 18.0,
            "cuda_graph_enabled": graphs,
            "cuda_graph_batch_sizes": [1, 2, 4, 8] if graphs else None,
            "gpus": [{"index": 0, "name": "NVIDIA H200", "total_mib": 143771, "used_mib": 120000}],
        },
    )
    write_json_atomic(
        path / "launch.json",
        {
            "argv": [
                "python",
                "-m",
                "sglang.launch_server",
                "--model-path",
                spec["server"]["model"],
                "--port",
                "30000",
                *([] if graphs else ["--disable-cuda-graph"]),
            ],
            "base_url": "http://127.0.0.1:30000",
            "engine": "sglang",
            "engine_version": "0.5.23",
            "notes": [],
            "env": {},
            "exact_length_body": {"ignore_eos": True},
        },
    )
    write_json_atomic(
        path / "result.json",
        {
            "points": len(points),
            "headline_point": len(points) - 1,
            "headline": {
                k: head.get(k)
                for k in (
                    "output_throughput",
                    "median_ttft_ms",
                    "median_itl_ms",
                    "median_tpot_ms",
                    "error_rate",
                    "completed",
                    "num_requests",
                )
            },
        },
    )
    write_json_atomic(
        path / "status.json",
        {
            "run_id": run_id,
            "state": "succeeded",
            "phase": "done",
            "reason": "",
            "started_at": "2026-11-30T00:00:00.000+00:00",
            "finished_at": "2026-11-30T00:05:00.000+00:00",
            "duration_s": 300.0,
            "steps": [
                {"step": s, "outcome": "ok", "duration_s": 0.1}
                for name in RUN_STEPS
                if name not in ("exact_length", "kv_fill", "metrics")  # not for this engine
                for s in (
                    [point_step(k) for k in range(len(points))] if name == "points" else [name]
                )
            ],
        },
    )
    (path / "server.log").write_text("synthetic run: no server was started\n")
    return n * len(points)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, default=Path("bench/out/scale/data"))
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--heavy", type=int, default=20)
    ap.add_argument("--procs", type=int, default=2)
    a = ap.parse_args()
    if not 1 <= a.runs <= 20_000:
        raise SystemExit("--runs must be 1..20000")
    if a.out.exists():
        shutil.rmtree(a.out)
    runs_dir = a.out / "runs"
    runs_dir.mkdir(parents=True)
    t = time.perf_counter()
    rng = np.random.default_rng(0)
    templates = {}
    for c in CONCURRENCY[:4]:
        table = records_table(rng, 250, 32, c, 40.0, 8.0)
        templates[str(c)] = compute_point_metrics(records_from_table(table))
    jobs = [(runs_dir, i, i >= a.runs - a.heavy, templates) for i in range(a.runs)]
    records = 0
    with mp.Pool(a.procs) as pool:
        for k, n in enumerate(pool.imap_unordered(write_run, jobs, chunksize=50)):
            records += n
            if (k + 1) % 1000 == 0:
                print(
                    f"{k + 1} runs, {records:,} records, {time.perf_counter() - t:.0f} s",
                    flush=True,
                )
    t_folders = time.perf_counter() - t
    t = time.perf_counter()
    cat = Catalog(a.out / "servelab.duckdb", runs_dir)
    indexed = cat.reindex()
    t_index = time.perf_counter() - t
    size = sum(p.stat().st_size for p in runs_dir.rglob("*") if p.is_file())
    print(
        json.dumps(
            {
                "runs": a.runs,
                "records": records,
                "heavy_runs": a.heavy,
                "folders_s": round(t_folders, 1),
                "reindex_s": round(t_index, 1),
                "indexed": indexed,
                "bytes_on_disk": size,
                "heavy_run_ids": sorted(p.name for p in runs_dir.iterdir())[-a.heavy :],
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
