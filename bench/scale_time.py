"""Part 4 of docs/BENCHMARKS.md: the data preparation the portal's pages do, timed on a large
synthetic data folder (bench/scale_gen.py).

  list runs      Runs page refresh (every 2 s): Catalog.sync() + list_runs(limit=500) + table
  load a run     Run page: status, load_run, the per-point table, a TTFT CDF, GPU memory figure,
                 the server log tail and the raw-artifact download list
  compare 2      Compare page for two heavy runs
  compare 15     Compare page for 15 runs (3 arms x 5 trials)

Figures are serialised (``fig.to_json()``) as Streamlit does before sending them. Each
measurement is repeated and the median and max reported.

    python -m bench.scale_time --data bench/out/scale/data [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from bench.common import machine, save
from core.analysis.diff import config_diff, confounders
from core.analysis.memory import memory_headroom
from core.analysis.points import metric_deltas
from core.analysis.runs import latency_samples, load_run
from core.run.launcher import tail
from core.run_folder import RunFolder
from core.store import Catalog
from core.views.figures import (
    cdf_figure,
    gpu_memory_figure,
    memory_headroom_figure,
    metric_vs_concurrency,
)


def runs_page(cat: Catalog) -> int:
    cat.sync()
    rows = cat.list_runs(limit=500)
    df = pd.DataFrame(rows)
    df.to_json()  # what st.dataframe sends, roughly (arrow in reality)
    return len(rows)


def run_page(folder: RunFolder) -> int:
    folder.status()
    view = load_run(folder)
    table = pd.DataFrame([{"point": s["label"], **s["metrics"]} for s in view.points])
    table.to_json()
    idx = view.points[-1]["index"]
    cdf_figure({view.run_id: latency_samples(folder, idx, "ttft")}, "TTFT (ms)").to_json()
    samples = (
        folder.read_table("samples.parquet") if (folder.path / "samples.parquet").exists() else None
    )
    gpu_memory_figure(samples).to_json()
    tail(folder.log_path, 200)
    files = sorted(p for p in folder.path.rglob("*") if p.is_file() and not p.name.startswith("."))
    return sum(p.stat().st_size for p in files)  # read on click only (download_button)


def compare_page(folders: list[RunFolder], metric: str = "itl") -> int:
    views = [load_run(f) for f in folders]
    intended = {f for v in views for f in v.spec.get("intended_diff", [])}
    config_diff(views).astype(str).to_json()
    confounders(views, intended)
    deltas = metric_deltas(views, baseline=0)
    deltas.to_json()
    metric_vs_concurrency(views, "output_throughput").to_json()
    metric_vs_concurrency(views, "median_ttft_ms").to_json()
    point = views[0].points[-1]["label"]
    series = {}
    for v, f in zip(views, folders, strict=True):
        match = [s["index"] for s in v.points if s["label"] == point]
        series[v.run_id] = latency_samples(f, match[0], metric) if match else []
    cdf_figure(series, f"{metric.upper()} (ms)").to_json()
    head = memory_headroom(views)
    memory_headroom_figure(head).to_json()
    return sum(len(s) for s in series.values())


def timed(fn: Callable[[], Any], repeats: int) -> dict[str, Any]:
    times = []
    out = None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return {
        "median_s": statistics.median(times),
        "max_s": max(times),
        "first_s": times[0],
        "result": out,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", type=Path, default=Path("bench/out/scale/data"))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--name", default="scale")
    a = ap.parse_args()
    runs_dir = a.data / "runs"
    cat = Catalog(a.data / "servelab.duckdb", runs_dir)
    ids = sorted(p.name for p in runs_dir.iterdir())
    heavy = [RunFolder(runs_dir / r) for r in ids[-20:]]  # bench/scale_gen.py: heavy last
    light = [RunFolder(runs_dir / r) for r in ids[:15]]
    res: dict[str, Any] = {"runs": len(ids)}
    res["list_runs"] = timed(lambda: runs_page(cat), a.repeats)
    res["catalog_sync_only"] = timed(cat.sync, a.repeats)
    res["list_runs_query_only"] = timed(lambda: len(cat.list_runs(limit=500)), a.repeats)
    res["load_run_heavy"] = timed(lambda: run_page(heavy[0]), a.repeats)
    res["load_run_light"] = timed(lambda: run_page(light[0]), a.repeats)
    res["compare_2_heavy"] = timed(lambda: compare_page(heavy[:2]), a.repeats)
    res["compare_15_heavy"] = timed(lambda: compare_page(heavy[:15]), a.repeats)
    res["compare_15_light"] = timed(lambda: compare_page(light), a.repeats)
    for k, v in res.items():
        if isinstance(v, dict):
            print(
                f"{k:22} median {v['median_s'] * 1000:8.1f} ms  max {v['max_s'] * 1000:8.1f} ms"
                f"  first {v['first_s'] * 1000:8.1f} ms  ({v['result']})"
            )
    path = save(f"{a.name}.json", {"machine": machine(), **res})
    print(json.dumps({"written": str(path)}))


if __name__ == "__main__":
    main()
