"""GPU memory of runs: the NVML peaks from ``samples.parquet`` (whole run and per point)
and THE memory-headroom rule, which the Compare table, the summary card and the
attribution all use (``headroom_gb``).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from core.analysis.runs import RunView, run_labels
from core.metrics import as_number

__all__ = [
    "gpu_total_gb",
    "headroom_gb",
    "memory_headroom",
    "peak_gpu_mib_by_point",
    "run_peak_gpu_mib",
]


def headroom_gb(
    free_gb: float | None, total_gb: float | None, peak_mib: float | None
) -> float | None:
    """THE memory headroom (GB): the server's free GPU memory after start-up (``free_gb``,
    SGLang's ``available_gpu_mem_gb``), else the GPU's total less the NVML peak used under
    load. None where that is unknown; a 0 is a measured value, never "unknown"."""
    if free_gb is not None:
        return free_gb
    if total_gb is None or peak_mib is None:
        return None
    return total_gb - peak_mib / 1024


def run_peak_gpu_mib(path: Path | None) -> float | None:
    """The peak over the whole run (NVML, MiB, the busiest GPU); None without samples."""
    if path is None:
        return None
    peaks = _gpu_peaks(path)
    return peaks[0] if peaks else None


def peak_gpu_mib_by_point(path: Path | None) -> dict[int, float]:
    """Per point index: the peak GPU memory used while it ran (NVML, MiB, the busiest GPU);
    empty on a CPU host or without samples."""
    if path is None:
        return {}
    peaks = _gpu_peaks(path)
    return dict(peaks[1]) if peaks else {}


def _gpu_peaks(path: Path) -> tuple[float, dict[int, float]] | None:
    """(run peak, per-point peaks) of ``samples.parquet``, read once per file version: the
    card, the headroom table and the figure all ask, on every rerun of a page."""
    file = path / "samples.parquet"
    try:
        stat = file.stat()
    except OSError:
        return None
    return _read_gpu_peaks(str(file), stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=256)
def _read_gpu_peaks(file: str, _mtime_ns: int, _size: int) -> tuple[float, dict[int, float]] | None:
    try:
        table = pq.read_table(file)
    except (OSError, pa.ArrowInvalid):  # being written, or cut short: no peaks, not a crash
        return None
    if table.num_rows == 0 or "name" not in table.column_names:
        return None
    gpu = table.filter(pc.equal(table["name"], "gpu_used_mib"))
    if gpu.num_rows == 0:
        return None
    peak = pc.max(gpu["value"]).as_py()
    if peak is None:
        return None
    by_point: dict[int, float] = {}
    if "point" in gpu.column_names:
        for point, value in zip(gpu["point"].to_pylist(), gpu["value"].to_pylist(), strict=True):
            if point is None or value is None or int(point) < 0:
                continue
            by_point[int(point)] = max(by_point.get(int(point), 0.0), float(value))
    return float(peak), by_point


def gpu_total_gb(gpus: Any) -> float | None:
    """The largest GPU's total memory (GB) from ``facts.json``'s ``gpus``; None unknown."""
    if not isinstance(gpus, list):
        return None
    totals = [as_number(g.get("total_mib")) for g in gpus if isinstance(g, dict)]
    known = [t for t in totals if t is not None]
    return max(known) / 1024 if known else None


def memory_headroom(views: Sequence[RunView], names: Sequence[str] | None = None) -> pd.DataFrame:
    """Per run: the server's memory facts (GB as SGLang reports them, i.e. GiB, per GPU)
    and the peak GPU memory used while points ran (NVML, MiB, the busiest GPU). None where
    unknown (not SGLang, facts missing, CPU host), never 0. ``headroom_gb``: the server's
    free memory after start-up, else (no memory facts) the GPU's total minus the NVML
    peak (``headroom_gb``). ``names`` replaces the run ids in ``run_id``."""
    rows = []
    labels = list(names) if names is not None else run_labels(views)
    for lab, v in zip(labels, views, strict=True):
        f = v.facts
        free = as_number(f.get("available_gpu_mem_gb"))
        total = gpu_total_gb(f.get("gpus"))
        peak = run_peak_gpu_mib(v.path)
        headroom = headroom_gb(free, total, peak)
        rows.append(
            {
                "run_id": lab,
                "kv_cache_tokens": as_number(f.get("kv_cache_tokens")),
                "weight_mem_gb": as_number(f.get("weight_mem_gb")),
                "kv_cache_gb": as_number(f.get("kv_cache_gb")),
                "graph_mem_gb": as_number(f.get("graph_mem_gb")),
                "available_gpu_mem_gb": free,
                "gpu_total_gb": total,
                "peak_gpu_used_mib": peak,
                "headroom_gb": headroom,
                "headroom_from": (
                    "server facts"
                    if free is not None
                    else "NVML peak"
                    if headroom is not None
                    else None
                ),
            }
        )
    columns = [
        "run_id",
        "kv_cache_tokens",
        "weight_mem_gb",
        "kv_cache_gb",
        "graph_mem_gb",
        "available_gpu_mem_gb",
        "gpu_total_gb",
        "peak_gpu_used_mib",
        "headroom_gb",
        "headroom_from",
    ]
    return pd.DataFrame(rows, columns=columns, dtype=object)
