"""core.analysis.runs: per-request latencies of one point, as core.metrics defines them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from core.analysis.runs import latency_samples
from core.metrics import compute_point_metrics
from tests.runs_by_hand import (
    make_run,
    request_records,
)


@pytest.mark.parametrize("family", ["ttft", "itl", "tpot", "e2e"])
def test_latency_samples_match_core_metrics(tmp_path: Path, family: str) -> None:
    records = request_records(send_gap=0.03, scale=1.7)
    folder = make_run(tmp_path, "a", records=records)
    values = latency_samples(folder, 0, family)
    m = compute_point_metrics(records, "server")
    assert float(np.median(values)) == pytest.approx(m[f"median_{family}_ms"])
    assert float(np.mean(values)) == pytest.approx(m[f"mean_{family}_ms"])
    assert max(values) == pytest.approx(m[f"max_{family}_ms"])
    expected_n = {"ttft": 3, "e2e": 3, "tpot": 2, "itl": 4}[family]
    assert len(values) == expected_n
    # A summary key names its family.
    assert latency_samples(folder, 0, f"p99_{family}_ms") == values


def test_latency_samples_edge_cases(tmp_path: Path) -> None:
    folder = make_run(tmp_path, "a", records=request_records())
    assert latency_samples(folder, 7, "ttft") == []
    assert latency_samples(folder, 0, "ttft") == pytest.approx([50.0, 80.0, 30.0])
    with pytest.raises(ValueError, match="unknown latency metric"):
        latency_samples(folder, 0, "output_throughput")
