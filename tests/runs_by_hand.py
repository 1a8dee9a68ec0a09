"""Run folders built by hand, as the pipeline leaves them, for the analysis tests
(test_diff, test_points, test_memory, test_runs, test_roles, test_figures, test_explain)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

from core.config import BenchmarkPlan, Point, RunSpec, ServerConfig
from core.records import RequestRecord, records_to_table
from core.run.samplers import SAMPLE_SCHEMA
from core.run_folder import RunFolder

__all__ = [
    "P1",
    "P4",
    "P8",
    "launch_argv",
    "make_run",
    "point_label",
    "request_records",
    "run_facts",
]

P1 = {"concurrency": 1, "request_rate": "inf", "num_prompts": 4, "input_len": 32, "output_len": 16}
P4 = {**P1, "concurrency": 4, "num_prompts": 8}
P8 = {**P1, "concurrency": 8, "num_prompts": 8}


def point_label(p: dict[str, Any]) -> str:
    return Point.model_validate(p).label


def launch_argv(port: int, *extra: str) -> list[str]:
    return [
        "/usr/bin/python3",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "/models/m",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--tp-size",
        "1",
        *extra,
        "--enable-metrics",
    ]


def run_facts(**over: Any) -> dict[str, Any]:
    facts: dict[str, Any] = {
        "engine_version": "0.5.23",
        "kv_cache_tokens": 500_000,
        "weight_mem_gb": 15.2,
        "kv_cache_gb": 100.5,
        "graph_mem_gb": 1.25,
        "available_gpu_mem_gb": 12.0,
        "cuda_graph_batch_sizes": [1, 2, 4, 8],
        "cuda_graph_enabled": True,
        "mem_fraction_static": 0.85,
        "attention_backend": "fa3",
        "startup_s": 40.0,
        "ready_after_s": 41.0,
        "server_info_raw": {"huge": "ignored"},
        "gpus": [{"gpu": 0, "used_mib": 130_000.0, "total_mib": 143_771.0, "name": "NVIDIA H200"}],
    }
    facts.update(over)
    return facts


def request_records(send_gap: float = 0.0, scale: float = 1.0) -> list[RequestRecord]:
    """Three successful requests (one with a single output token: no TPOT) and one
    failure (excluded from latencies)."""
    return [
        RequestRecord(
            index=0,
            send_s=0.0,
            prompt_tokens=32,
            output_tokens_requested=4,
            chunk_s=[0.05 * scale, 0.07 * scale, 0.10 * scale, 0.12 * scale],
            end_s=0.13 * scale,
            ok=True,
            output_tokens_server=4,
        ),
        RequestRecord(
            index=1,
            send_s=send_gap,
            prompt_tokens=32,
            output_tokens_requested=4,
            chunk_s=[send_gap + 0.08 * scale, send_gap + 0.11 * scale],
            end_s=send_gap + 0.2 * scale,
            ok=True,
            output_tokens_server=3,
        ),
        RequestRecord(
            index=2,
            send_s=0.01,
            prompt_tokens=32,
            output_tokens_requested=1,
            chunk_s=[0.04],
            end_s=0.05,
            ok=True,
            output_tokens_server=1,
        ),
        RequestRecord(
            index=3,
            send_s=0.02,
            prompt_tokens=32,
            output_tokens_requested=4,
            chunk_s=[0.5],
            end_s=None,
            ok=False,
            error="truncated stream",
        ),
    ]


def make_run(
    runs: Path,
    run_id: str,
    *,
    server: dict[str, Any] | None = None,
    points: list[tuple[dict[str, Any], dict[str, Any], str]] | None = None,
    facts: dict[str, Any] | None = None,
    argv: list[str] | None = None,
    intended: list[str] | None = None,
    records: list[RequestRecord] | None = None,
    samples: list[dict[str, Any]] | None = None,
    started_at: str | None = None,
) -> RunFolder:
    """A run folder as the pipeline leaves it. ``points``: (point, metrics, digest);
    ``started_at``: when the run (and each of its points) started, ISO 8601."""
    points = points if points is not None else [(P1, {"output_throughput": 100.0}, "d1")]
    spec = RunSpec(
        server=ServerConfig(**(server or {"engine": "sglang"})),
        plan=BenchmarkPlan(points=tuple(Point.model_validate(p) for p, _, _ in points)),
    )
    folder = RunFolder.create(runs, run_id)
    spec_json: dict[str, Any] = {
        "run_id": run_id,
        "created_at": "2026-01-01T00:00:00+00:00",
        **spec.model_dump(mode="json"),
    }
    if intended is not None:
        spec_json["intended_diff"] = intended
    folder.write("spec.json", spec_json)
    status: dict[str, Any] = {"run_id": run_id, "state": "succeeded", "phase": "done"}
    folder.write("status.json", status | ({"started_at": started_at} if started_at else {}))
    folder.write("facts.json", facts if facts is not None else run_facts())
    folder.write(
        "launch.json",
        {"argv": argv if argv is not None else launch_argv(30000), "engine": "sglang"},
    )
    folder.write("probe.json", {"prompt": "q", "answer": "Paris", "passed": True, "reason": "ok"})
    for i, (point, metrics, digest) in enumerate(points):
        folder.point_dir(i)
        folder.write(
            f"points/{i:03d}/summary.json",
            {
                "index": i,
                "label": point_label(point),
                "point": point,
                "prompts_digest": digest,
                "token_source": "server",
                "metrics": metrics,
                "metrics_retokenized": metrics,
                "client": {},
                **({"started_at": started_at} if started_at else {}),
            },
        )
        if records is not None:
            folder.write_table(f"points/{i:03d}/records.parquet", records_to_table(records))
    if samples is not None:
        folder.write_table("samples.parquet", pa.Table.from_pylist(samples, schema=SAMPLE_SCHEMA))
    return folder
