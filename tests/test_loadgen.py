"""The load generator against a server whose timing is known exactly (the fake SGLang,
started through the real launcher)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.load.generator import LoadOptions, run_load
from core.load.health import MEASURE_SWITCH_INTERVAL_S
from core.load.prompts import Prompt
from core.metrics import compute_point_metrics
from core.records import RequestRecord
from core.run.launcher import ManagedServer, free_port

TTFT_MS, ITL_MS = 50.0, 10.0


@contextlib.contextmanager
def fake_server(log: Path, fault: str = "", args: tuple[str, ...] = ()) -> Iterator[str]:
    """The fake SGLang on a free port (``args``: more flags, e.g. --enable-metrics)."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {
        "FAKE_SGLANG_TTFT_MS": str(TTFT_MS),
        "FAKE_SGLANG_ITL_MS": str(ITL_MS),
        "FAKE_SGLANG_FAULT": fault,
    }
    srv = ManagedServer(
        [
            sys.executable,
            "-m",
            "sglang.launch_server",
            "--model-path",
            "m",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            *args,
        ],
        log,
        base + "/health",
        env,
    )
    srv.start()
    try:
        srv.wait_ready(30)
        yield base
    finally:
        assert srv.stop() == []


@pytest.fixture
def server(fake_sglang: Path, tmp_path: Path) -> Iterator[str]:
    with fake_server(tmp_path / "server.log") as base:
        yield base


def opts(base: str, concurrency: int, rate: float = float("inf"), **kw: object) -> LoadOptions:
    return LoadOptions(
        base_url=base,
        model="m",
        concurrency=concurrency,
        request_rate=rate,
        seed=1,
        exact_length_body={"ignore_eos": True},
        request_timeout_s=kw.pop("request_timeout_s", 30.0),  # type: ignore[arg-type]
        point_timeout_s=kw.pop("point_timeout_s", 120.0),
    )  # type: ignore[arg-type]


def prompts(n: int, out: int = 20) -> list[Prompt]:
    return [Prompt(text=" alpha bravo charlie", prompt_tokens=3, output_len=out)] * n


def assert_never_early(records: list[RequestRecord], out: int) -> None:
    """The fake sends chunk i at (body received + TTFT + i x ITL) and the client's clock starts
    before the body goes out, so no chunk can be measured early, however busy the host is.
    (How close to the truth the measurements are is bench/accuracy.py's job: it records the
    host's load, which a unit test cannot control; docs/BENCHMARKS.md part 1.)"""
    slack_s = 0.001  # the fake converts the kernel's receive stamp between clocks
    for r in records:
        assert r.ok and len(r.chunk_s) == out, (r.error, len(r.chunk_s))
        for i, t in enumerate(r.chunk_s):
            assert t - r.send_s >= (TTFT_MS + i * ITL_MS) / 1000 - slack_s, (r.index, i)
        assert r.chunk_s == sorted(r.chunk_s) and r.end_s is not None and r.end_s >= r.chunk_s[-1]


def most_in_flight(records: list[RequestRecord]) -> int:
    """The largest number of requests on the wire at one instant."""
    return max(
        sum(1 for o in records if o.send_s <= r.send_s < (o.end_s or o.send_s)) for r in records
    )


def test_concurrency_1_measures_every_chunk(server: str) -> None:
    opts1 = opts(server, 1)
    run_load(opts1, prompts(2))  # warm the server's code paths
    records, health = run_load(opts1, prompts(12))
    m = compute_point_metrics(records)
    assert m["completed"] == 12 and m["total_output_tokens"] == 12 * 20
    assert_never_early(records, 20)
    assert most_in_flight(records) == 1
    assert m["median_ttft_ms"] >= TTFT_MS - 1 and m["median_itl_ms"] > 0
    # the point reports what it cost the client (the saturation rule: test_client_saturation.py)
    assert health.cpu_s > 0 and health.wall_s >= 12 * (TTFT_MS + 19 * ITL_MS) / 1000


def test_the_loop_gets_the_gil_back_quickly_while_it_measures(server: str) -> None:
    """Another thread of the run process (the sampler) may hold the GIL for CPython's
    switch interval: 5 ms late token timestamps by default. While a point runs the
    interval is 0.5 ms; the process's own setting is back afterwards."""
    seen: list[float] = []
    before = sys.getswitchinterval()
    run_load(
        opts(server, 2),
        prompts(4, out=3),
        on_done=lambda _done, _total: seen.append(sys.getswitchinterval()),
    )
    assert seen and set(seen) == {MEASURE_SWITCH_INTERVAL_S}
    assert sys.getswitchinterval() == before


def test_concurrency_32_steady_state(server: str) -> None:
    # 32 in flight, arrivals spread by a Poisson process (about 32 / E2E per second).
    o = opts(server, 32, rate=128.0)
    records, _ = run_load(o, prompts(160))
    m = compute_point_metrics(records)
    assert m["completed"] == 160
    assert m["max_concurrent_requests"] >= 24
    assert_never_early(records, 20)
    assert 1 < most_in_flight(records) <= 32  # the cap holds


def test_burst_of_32_reports_client_load(server: str) -> None:
    # All 32 at once: the one-threaded client serialises the first chunks of 32
    # streams (a few ms on 2 cores, docs/BENCHMARKS.md); the loop-lag monitor sees it.
    records, health = run_load(opts(server, 32), prompts(64))
    m = compute_point_metrics(records)
    assert m["completed"] == 64
    assert_never_early(records, 20)
    assert 24 <= most_in_flight(records) <= 32  # 32 sent together (>= 240 ms each), cap held
    assert health.loop_lag_ms_max > 0


def test_http_500s_stay_in_the_denominator(fake_sglang: Path, tmp_path: Path) -> None:
    with fake_server(tmp_path / "s.log", "http_500_every=3") as base:
        records, _ = run_load(opts(base, 4), prompts(9, out=4))
    m = compute_point_metrics(records)
    assert m["num_requests"] == 9 and m["failed"] == 3 and m["error_rate"] == pytest.approx(1 / 3)
    assert all(r.error and r.error.startswith("HTTP 500") for r in records if not r.ok)


def test_truncated_streams_are_failures(fake_sglang: Path, tmp_path: Path) -> None:
    with fake_server(tmp_path / "s.log", "truncate_stream_every=2") as base:
        records, _ = run_load(opts(base, 2), prompts(4, out=6))
    bad = [r for r in records if not r.ok]
    assert len(bad) == 2 and all("truncated" in (r.error or "") for r in bad)


def test_hung_stream_times_out_per_request(fake_sglang: Path, tmp_path: Path) -> None:
    with fake_server(tmp_path / "s.log", "hang_after_tokens=2") as base:
        records, _ = run_load(opts(base, 2, request_timeout_s=1.5), prompts(2, out=8))
    assert all(not r.ok and "timeout" in (r.error or "") for r in records)
    assert all(len(r.chunk_s) == 2 for r in records)  # what arrived before the hang is kept


def test_cancel_stops_the_point_quickly(server: str) -> None:
    # Stop is asked once the first request is done; 50 requests of >= 240 ms each would take
    # 12 s, so the point must end after a few of them, the rest marked cancelled.
    done: list[int] = []
    o = LoadOptions(**{**opts(server, 1).__dict__, "should_stop": lambda: bool(done)})
    records, _ = run_load(o, prompts(50), on_done=lambda finished, _n: done.append(finished))
    assert 1 <= sum(r.ok for r in records) < 10
    assert sum(r.error == "cancelled" for r in records) > 40
    # what the cancel cut short is no server error: the point is not "96% errors"
    m = compute_point_metrics(records)
    assert m["cancelled_requests"] == sum(r.error == "cancelled" for r in records)
    assert m["failed"] == 0 and m["error_rate"] == 0.0
    assert m["num_requests"] == m["completed"] == sum(r.ok for r in records)
