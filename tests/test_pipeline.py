"""Whole runs through the CLI (the run process) against the fake SGLang."""

from __future__ import annotations

import itertools
import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from core.analysis.points import point_rows
from core.analysis.runs import load_run
from core.run.pipeline import STEP_FUNCTIONS
from core.run_folder import RUN_STEPS, RunFolder, point_of_step
from core.settings import Settings
from core.store import Catalog

REPO = Path(__file__).resolve().parent.parent


def run_cli(settings: Settings, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "SERVELAB_DATA_DIR": str(settings.data_dir),
        "SERVELAB_SGLANG_PYTHON": sys.executable,
    }
    return subprocess.run(
        [sys.executable, "-m", "core", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def only_run(settings: Settings) -> RunFolder:
    folders = sorted(settings.runs_dir.iterdir())
    assert len(folders) == 1
    return RunFolder(folders[0])


def test_full_run_against_fake_sglang(
    fake_sglang: Path, settings: Settings, tiny_tokenizer_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_SGLANG_TTFT_MS", "30")
    monkeypatch.setenv("FAKE_SGLANG_ITL_MS", "5")
    out = run_cli(
        settings,
        "run",
        "--engine",
        "sglang",
        "--model",
        str(tiny_tokenizer_dir),
        "--mem-fraction-static",
        "0.85",
        "--cuda-graph-max-bs",
        "16",
        "--concurrency",
        "1,4",
        "--num-prompts",
        "8",
        "--input-len",
        "16",
        "--output-len",
        "12",
        "--tag",
        "smoke",
    )
    assert out.returncode == 0, out.stdout + out.stderr
    folder = only_run(settings)
    status = folder.status()
    assert status["state"] == "succeeded"
    steps = [s["step"] for s in status["steps"]]
    assert steps == [
        "preflight",
        "launch",
        "wait_ready",
        "facts",
        "probe",
        "warmup",
        "point 0",
        "point 1",
        "stop",
        "verify",
        "store",
    ]
    # in the order of THE list (core.run_folder.RUN_STEPS), each point under "points"
    named = list(dict.fromkeys("points" if point_of_step(s) is not None else s for s in steps))
    listed = iter(RUN_STEPS)
    assert all(s in listed for s in named), (named, RUN_STEPS)
    assert all(s["outcome"] in ("ok", "skipped") for s in status["steps"])
    launch = folder.read("launch.json")
    # 0.5.23 made --cuda-graph-max-bs ambiguous: the adapter must use the per-phase flag.
    assert "--cuda-graph-max-bs-decode" in launch["argv"]
    assert "--cuda-graph-max-bs" not in launch["argv"]
    facts = folder.read("facts.json")
    assert facts["kv_cache_tokens"] and facts["engine_version"] == "0.5.23"
    assert folder.read("probe.json")["passed"] is True
    assert "The server is fired up" in folder.log_path.read_text()
    recs = pq.read_table(folder.path / "points/001/records.parquet")
    assert recs.num_rows == 8 and all(recs.column("ok").to_pylist())
    summary = folder.read("points/001/summary.json")
    m = summary["metrics"]
    assert m["total_output_tokens"] == 8 * 12 and m["output_len_ratio"] == 1.0
    # The fake sends chunk i of a body at t_body + TTFT + i * ITL (absolute deadlines,
    # tests/fakes/sglang_pkg): no chunk arrives before its deadline, counted from the send.
    rows = recs.to_pylist()
    for r in rows:
        chunks = [t - r["send_s"] for t in r["chunk_s"]]
        assert len(chunks) == 12 and chunks == sorted(chunks)
        assert all(t >= 0.030 + i * 0.005 for i, t in enumerate(chunks)), chunks
    # The summary's latencies are these records' (medians as bench_serving takes them).
    ttfts = [1000 * (r["chunk_s"][0] - r["send_s"]) for r in rows]
    itls = [1000 * (b - a) for r in rows for a, b in itertools.pairwise(r["chunk_s"])]
    assert m["median_ttft_ms"] == pytest.approx(statistics.median(ttfts))
    assert m["median_itl_ms"] == pytest.approx(statistics.median(itls))
    assert summary["token_source"] == "server"
    samples = pq.read_table(folder.path / "samples.parquet").to_pylist()
    assert any(s["name"].startswith("sglang:") for s in samples)
    # the CLI summary and the catalog
    assert "out tok/s" in out.stdout and "sglang bench_serving" in out.stdout
    listing = run_cli(settings, "runs")
    assert folder.run_id in listing.stdout and "succeeded" in listing.stdout
    row = Catalog(settings.catalog_path, settings.runs_dir).get_run(folder.run_id)
    assert row is not None and row["mem_fraction_static"] == 0.85
    shown = run_cli(settings, "show", folder.run_id, "--json")
    assert json.loads(shown.stdout)["status"]["state"] == "succeeded"


def test_wrong_probe_answer_marks_the_run_invalid(
    fake_sglang: Path, settings: Settings, tiny_tokenizer_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_SGLANG_FAULT", "wrong_answer")
    out = run_cli(
        settings,
        "run",
        "--engine",
        "sglang",
        "--model",
        str(tiny_tokenizer_dir),
        "--concurrency",
        "1",
        "--num-prompts",
        "2",
    )
    assert out.returncode == 1
    folder = only_run(settings)
    st = folder.status()
    assert st["state"] == "invalid" and "does not match" in st["reason"]
    assert "Berlin" in folder.read("probe.json")["answer"]
    assert not (folder.path / "points/000/records.parquet").exists()  # benchmark skipped
    assert [s["step"] for s in st["steps"]][-3:] == ["stop", "verify", "store"]


def test_crash_on_start_is_recorded_with_the_log(
    fake_sglang: Path, settings: Settings, tiny_tokenizer_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_SGLANG_FAULT", "oom_during_capture")
    out = run_cli(settings, "run", "--engine", "sglang", "--model", str(tiny_tokenizer_dir))
    assert out.returncode == 1
    st = only_run(settings).status()
    assert st["state"] == "failed"
    assert "oom-during-cuda-graph-capture" in st["reason"]
    assert "exit code 1" in st["reason"]


def test_bad_input_names_the_flag_and_stores_nothing(settings: Settings) -> None:
    out = run_cli(settings, "run", "--engine", "transformers", "--mem-fraction-static", "0.9")
    assert out.returncode == 2
    assert "mem_fraction_static applies to the sglang, vllm engines only" in out.stderr
    assert not settings.runs_dir.exists() or not any(settings.runs_dir.iterdir())


def test_unknown_extra_flag_is_refused_before_anything_is_stored(
    fake_sglang: Path, settings: Settings, tiny_tokenizer_dir: Path
) -> None:
    out = run_cli(
        settings,
        "run",
        "--engine",
        "sglang",
        "--model",
        str(tiny_tokenizer_dir),
        "--extra-arg=--no-such-flag",
    )
    assert out.returncode == 2
    assert "server.extra_args (--extra-arg): --no-such-flag is unknown to SGLang" in out.stderr
    assert not settings.runs_dir.exists() or not any(settings.runs_dir.iterdir())


def test_unknown_extra_flag_in_a_queued_run_fails_preflight(
    fake_sglang: Path, settings: Settings, tiny_tokenizer_dir: Path
) -> None:
    """A run queued before the check existed (or by hand) still stops at preflight."""
    from core.config import RunSpec, ServerConfig

    spec = RunSpec(
        server=ServerConfig(
            engine="sglang", model=str(tiny_tokenizer_dir), extra_args=("--no-such-flag",)
        )
    )
    folder = RunFolder.prepare(settings.runs_dir, spec)
    out = run_cli(settings, "run", "--run-id", folder.run_id)
    assert out.returncode == 1
    st = only_run(settings).status()
    assert st["state"] == "failed" and "extra_args" in st["reason"]
    assert st["steps"][0] == {**st["steps"][0], "step": "preflight", "outcome": "failed"}


def test_a_gpu_released_late_by_an_exited_server_is_not_a_failure() -> None:
    """NVML may list an exited server's pid for a moment; verify waits for the release."""
    from core.run.pipeline import gpu_still_held

    now = [0.0]
    listings = iter([{0: [4644, 1]}, {0: [4644]}, {0: [1]}])
    held = gpu_still_held(
        {4644},
        lambda: next(listings),
        wait_s=10,
        clock=lambda: now[0],
        sleep=lambda s: now.__setitem__(0, now[0] + s),
    )
    assert held == {}
    # Still listed when the wait is over: the GPU really is held, and that is reported.
    now[0] = 0.0
    stuck = gpu_still_held(
        {4644, 7},
        lambda: {0: [4644], 1: [2]},
        wait_s=2,
        clock=lambda: now[0],
        sleep=lambda s: now.__setitem__(0, now[0] + s),
    )
    assert stuck == {0: [4644]} and now[0] >= 2


def test_a_kv_fill_point_is_sized_from_the_pool_the_fake_sglang_reports(
    fake_sglang: Path, settings: Settings, tiny_tokenizer_dir: Path, tmp_path: Path
) -> None:
    """The fake reports int(mem_fraction_static x 400,000) tokens; kv_fill 0.0005 of it at
    16 + 12 tokens a request (plus the template the server counted) sets the concurrency."""
    plan = tmp_path / "plan.json"
    point = {"concurrency": 1, "num_prompts": 2, "input_len": 16, "output_len": 12}
    plan.write_text(
        json.dumps(
            {
                "server": {"engine": "sglang", "model": str(tiny_tokenizer_dir)},
                "plan": {"points": [{**point, "kv_fill": 0.0005}], "probe": None},
            }
        )
    )
    out = run_cli(settings, "run", "--plan", str(plan), "--mem-fraction-static", "0.85")
    assert out.returncode == 0, out.stdout + out.stderr
    folder = only_run(settings)
    pool = folder.read("facts.json")["kv_cache_tokens"]
    assert pool == 340_000
    summary = folder.read("points/000/summary.json")
    sized = summary["kv_fill"]
    per_request = 16 + 12 + (sized["template_tokens"] or 0)
    want = math.ceil(0.0005 * pool / per_request)
    assert sized["pool_tokens"] == pool and sized["pool_whose"] == "this run's server"
    assert sized["asked"]["concurrency"] == 1 and sized["computed"]["concurrency"] == want
    assert summary["point"]["concurrency"] == want and summary["point"]["kv_fill"] == 0.0005
    assert sized["in_flight_tokens"] >= 0.0005 * pool
    assert summary["metrics"]["completed"] >= want  # every slot filled
    steps = [s for s in folder.status()["steps"] if s["step"] == "kv_fill"]
    assert len(steps) == 2 and f"c={want}" in steps[-1]["detail"]
    # the lengths it sent, and where the Run page lists the point
    assert summary["lengths"]["input_tokens"]["max"] == 16
    assert summary["lengths"]["output_tokens"]["p50"] == 12
    assert summary["workload"]["digest"]
    (row,) = point_rows(load_run(folder))
    assert row["kv_fill"] == 0.0005 and row["kv_fill_pool_tokens"] == pool
    assert row["kv_fill_computed"] == f"c={want} in=16 out=12"
    assert row["input_tokens_p99"] == 16
    shown = run_cli(settings, "show", folder.run_id)  # where the CLI lists the points
    assert f"0.0005 x {pool} (this run's server) -> c={want} in=16 out=12" in shown.stdout


def test_every_step_name_has_its_function_and_nothing_else_does() -> None:
    """The pipeline runs core.run_folder.RUN_STEPS: one function per name, none unnamed."""
    assert set(STEP_FUNCTIONS) == set(RUN_STEPS)
    assert RUN_STEPS[0] == "preflight" and RUN_STEPS[-1] == "store"
