"""Catalog round-trips, reindex from folders, and two processes sharing the file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from core.config import RunSpec
from core.run_folder import RunFolder
from core.settings import Settings
from core.store import Catalog


def _finished_run(settings: Settings, engine: str = "sglang", tput: float = 100.0) -> RunFolder:
    spec = RunSpec.model_validate(
        {
            "server": {"engine": engine, "mem_fraction_static": 0.85}
            if engine == "sglang"
            else {"engine": engine}
        }
    )
    folder = RunFolder.prepare(settings.runs_dir, spec)
    folder.write("facts.json", {"kv_cache_tokens": 370000, "engine_version": "0.5.23"})
    folder.write("result.json", {"headline": {"output_throughput": tput, "median_ttft_ms": 12.5}})
    d = folder.point_dir(0)
    (d / "summary.json").write_text(
        json.dumps(
            {
                "index": 0,
                "label": "c=1",
                "metrics": {"output_throughput": tput},
                "point": {"concurrency": 1, "request_rate": "inf", "input_len": 8, "output_len": 8},
            }
        )
    )
    folder.update_status(state="succeeded", duration_s=3.5)
    return folder


def test_index_list_and_reindex(settings: Settings) -> None:
    cat = Catalog(settings.catalog_path, settings.runs_dir)
    a = _finished_run(settings, "sglang", 225.0)
    b = _finished_run(settings, "transformers", 194.0)
    assert cat.sync() == 2
    rows = {r["run_id"]: r for r in cat.list_runs()}
    assert rows[a.run_id]["output_throughput"] == 225.0
    assert rows[a.run_id]["kv_cache_tokens"] == 370000
    assert rows[a.run_id]["mem_fraction_static"] == 0.85
    assert [r["run_id"] for r in cat.list_runs(engine="transformers")] == [b.run_id]
    assert cat.points(a.run_id)[0]["request_rate"] == float("inf")
    assert cat.sync() == 0  # nothing changed
    b.update_status(state="interrupted")
    assert cat.sync() == 1
    # Lose the catalog entirely: the folders rebuild it.
    settings.catalog_path.unlink()
    assert cat.reindex() == 2
    assert {r["state"] for r in cat.list_runs()} == {"succeeded", "interrupted"}


def test_second_process_waits_for_the_lock_instead_of_failing(settings: Settings) -> None:
    cat = Catalog(settings.catalog_path, settings.runs_dir)
    _finished_run(settings)
    code = (
        "import sys; from pathlib import Path; from core.store import Catalog;"
        "c = Catalog(Path(sys.argv[1]), Path(sys.argv[2]));"
        "print(len(c.list_runs()))"
    )
    with cat.connect():
        # While this process holds the catalog, a second one must queue, not crash.
        proc = subprocess.Popen(
            [sys.executable, "-c", code, str(settings.catalog_path), str(settings.runs_dir)],
            stdout=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).resolve().parent.parent,
        )
        try:
            proc.wait(timeout=1.0)
            finished_early = True
        except subprocess.TimeoutExpired:
            finished_early = False
    out, _ = proc.communicate(timeout=30)
    assert not finished_early
    assert proc.returncode == 0
    assert out.strip() in ("0", "1")


def test_recent_durations_of_an_engine_and_model(settings: Settings) -> None:
    cat = Catalog(settings.catalog_path, settings.runs_dir)
    assert cat.recent_durations_s("sglang", "smollm2-135m-instruct") == []  # no catalog yet
    a = _finished_run(settings, "sglang")
    _finished_run(settings, "transformers")
    failed = _finished_run(settings, "sglang")
    failed.update_status(state="failed", duration_s=1.0)
    a.update_status(duration_s=7.25)
    cat.sync()
    # Only finished (succeeded) runs of this engine and model count.
    assert cat.recent_durations_s("sglang", "smollm2-135m-instruct") == [7.25]
    assert cat.recent_durations_s("sglang", "another-model") == []
    settings.catalog_path.write_text("not a database")
    assert cat.recent_durations_s("sglang", "smollm2-135m-instruct") == []  # never an error
