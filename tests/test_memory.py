"""core.analysis.memory: the GPU peaks and the one memory-headroom rule (None where
unknown, never 0)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from core.analysis.card import summary_card
from core.analysis.memory import headroom_gb, memory_headroom, peak_gpu_mib_by_point
from core.analysis.runs import load_run
from tests.runs_by_hand import (
    make_run,
    run_facts,
)


def test_memory_headroom_is_none_where_unknown(tmp_path: Path) -> None:
    transformers_facts = {"engine": "transformers", "engine_version": "5.24.0", "gpus": []}
    cpu = make_run(
        tmp_path,
        "cpu",
        facts=transformers_facts,
        samples=[
            {"t_s": 0.0, "point": 0, "source": "metrics", "name": "x", "labels": "", "value": 1.0}
        ],
    )
    gpu = make_run(
        tmp_path,
        "gpu",
        facts=run_facts(graph_mem_gb=None),
        samples=[
            {
                "t_s": float(t),
                "point": 0,
                "source": "nvml",
                "name": "gpu_used_mib",
                "labels": f"gpu={g}",
                "value": 1000.0 * t + g,
            }
            for t in range(3)
            for g in range(2)
        ],
    )
    df = memory_headroom([load_run(cpu), load_run(gpu)]).set_index("run_id")
    for col in (
        "kv_cache_tokens",
        "weight_mem_gb",
        "kv_cache_gb",
        "graph_mem_gb",
        "available_gpu_mem_gb",
        "gpu_total_gb",
        "peak_gpu_used_mib",
    ):
        assert df.loc["cpu", col] is None, col
    assert df.loc["gpu", "graph_mem_gb"] is None
    assert df.loc["gpu", "kv_cache_tokens"] == 500_000
    assert df.loc["gpu", "weight_mem_gb"] == 15.2
    assert df.loc["gpu", "available_gpu_mem_gb"] == 12.0
    assert df.loc["gpu", "peak_gpu_used_mib"] == 2001.0
    assert df.loc["gpu", "gpu_total_gb"] == pytest.approx(143_771.0 / 1024)


def test_memory_headroom_without_samples_file(tmp_path: Path) -> None:
    df = memory_headroom([load_run(make_run(tmp_path, "a", facts={}))])
    assert df.loc[0, "peak_gpu_used_mib"] is None and df.loc[0, "weight_mem_gb"] is None


def test_memory_headroom_falls_back_to_the_nvml_peak(tmp_path: Path) -> None:
    """No memory facts from the server (transformers): headroom = GPU total - NVML peak."""
    facts = {
        "engine_version": "5.17.0",
        "gpus": [{"gpu": 0, "total_mib": 143_771.0, "name": "NVIDIA H200"}],
    }
    run = make_run(
        tmp_path,
        "t",
        facts=facts,
        samples=[
            {
                "t_s": float(t),
                "point": 0,
                "source": "nvml",
                "name": "gpu_used_mib",
                "labels": "gpu=0",
                "value": 127_000.0 + 300 * t,
            }
            for t in range(3)
        ],
    )
    row = memory_headroom([load_run(run)]).iloc[0]
    assert row["peak_gpu_used_mib"] == 127_600.0
    assert row["headroom_gb"] == pytest.approx((143_771.0 - 127_600.0) / 1024)
    assert row["headroom_from"] == "NVML peak"
    assert peak_gpu_mib_by_point(run.path) == {0: 127_600.0}
    server = memory_headroom([load_run(make_run(tmp_path, "s"))]).iloc[0]
    assert server["headroom_gb"] == 12.0 and server["headroom_from"] == "server facts"


def test_headroom_gb_is_the_one_rule() -> None:
    assert headroom_gb(12.0, 140.0, 5000.0) == 12.0  # the server's own figure first
    assert headroom_gb(0.0, 140.0, 5000.0) == 0.0  # nothing free is 0, not "unknown"
    assert headroom_gb(None, 140.0, 1024.0) == pytest.approx(139.0)  # total - NVML peak
    assert headroom_gb(None, 140.0, 0.0) == 140.0  # a 0 peak is a measured value
    assert headroom_gb(None, None, 1024.0) is None and headroom_gb(None, 140.0, None) is None


def _nvml_run(tmp_path: Path, run_id: str, peak_mib: float) -> Any:
    facts = {"engine_version": "5.17.0", "gpus": [{"gpu": 0, "total_mib": 10_240.0}]}
    samples = [
        {
            "t_s": 0.0,
            "point": 0,
            "source": "nvml",
            "name": "gpu_used_mib",
            "labels": "gpu=0",
            "value": peak_mib,
        }
    ]
    return load_run(make_run(tmp_path, run_id, facts=facts, samples=samples))


def test_the_card_and_the_table_read_the_same_headroom_a_zero_peak_included(
    tmp_path: Path,
) -> None:
    idle, busy = _nvml_run(tmp_path, "idle", 0.0), _nvml_run(tmp_path, "busy", 1024.0)
    table = memory_headroom([idle, busy]).set_index("run_id")["headroom_gb"]
    assert table["idle"] == 10.0 and table["busy"] == 9.0
    (row,) = [
        r
        for r in summary_card({"idle": [idle], "busy": [busy]}, "idle")
        if r.metric == "headroom_gb"
    ]
    assert (row.base_mean, row.mean) == (table["idle"], table["busy"])
