"""core/run/samplers.py against the fake SGLang server (a real process, real HTTP)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.run.samplers import Sampler
from tests.helpers import wait_for
from tests.test_loadgen import fake_server


@pytest.fixture
def metrics_server(fake_sglang: Path, tmp_path: Path) -> Iterator[str]:
    with fake_server(tmp_path / "server.log", args=("--enable-metrics",)) as base:
        yield base


def test_scrapes_are_kept_as_text_during_the_points_and_parsed_after(metrics_server: str) -> None:
    """Parsing /metrics is pure Python; done in the sampler thread during a point it held
    the GIL the load generator's loop needs to timestamp tokens. So nothing is parsed
    until the samples are asked for."""
    sampler = Sampler(metrics_server + "/metrics", 0.02, time.perf_counter())
    sampler.point = 0
    sampler.start()
    try:
        wait_for(lambda: sampler.unparsed_scrapes >= 3, 30, "three /metrics scrapes")
    finally:
        sampler.stop()
    assert not [r for r in sampler.rows if r["source"] == "metrics"]  # none parsed yet
    scrapes = sampler.unparsed_scrapes
    rows = sampler.table().to_pylist()
    assert sampler.unparsed_scrapes == 0 and sampler.metrics_error is None
    metrics = [r for r in rows if r["source"] == "metrics"]
    assert len({r["t_s"] for r in metrics}) == scrapes
    assert {r["point"] for r in metrics} == {0}
    names = {r["name"] for r in metrics}
    assert {"sglang:num_running_reqs", "sglang:token_usage"} <= names
    assert not [n for n in names if n.endswith("_bucket")]  # histograms keep _sum/_count
    assert [r["t_s"] for r in rows] == sorted(r["t_s"] for r in rows)
    assert sampler.table().num_rows == len(rows)  # parsed once, kept


def test_a_metrics_url_that_is_not_prometheus_is_named(metrics_server: str) -> None:
    sampler = Sampler(metrics_server + "/v1/models", 0.02, time.perf_counter()).start()
    try:
        wait_for(lambda: sampler.unparsed_scrapes >= 1, 30, "a scrape")
    finally:
        sampler.stop()
    assert not [r for r in sampler.table().to_pylist() if r["source"] == "metrics"]
    assert sampler.metrics_error is not None and "ValueError" in sampler.metrics_error


def test_a_server_without_metrics_is_asked_no_more(fake_sglang: Path, tmp_path: Path) -> None:
    with fake_server(tmp_path / "server.log") as base:
        sampler = Sampler(base + "/metrics", 0.02, time.perf_counter()).start()
        wait_for(lambda: sampler.metrics_error is not None, 30, "the 404 to be seen")
        sampler.stop()
    assert sampler.metrics_error is not None and "HTTP 404" in sampler.metrics_error
    assert sampler.unparsed_scrapes == 0
