"""Catalog.sync at scale: batched indexing gives the same rows as one-by-one indexing, the
idle fast path never hides a change, and folders mid-creation are picked up later."""

from __future__ import annotations

import json
import shutil

from core.config import RunSpec
from core.run_folder import RunFolder
from core.settings import Settings
from core.store import _SYNCED, Catalog


def _run(settings: Settings, i: int) -> RunFolder:
    spec = RunSpec.model_validate(
        {
            "server": {"engine": "sglang", "mem_fraction_static": 0.8, "cuda_graphs": i % 2 == 0},
            "tags": [f"t{i}"],
        }
    )
    folder = RunFolder.prepare(settings.runs_dir, spec, f"20260101-000000-{i:06x}")
    folder.write("facts.json", {"kv_cache_tokens": 1000 + i} if i % 3 else {})
    folder.write(
        "result.json",
        {"headline": {"output_throughput": 10.0 * i, "median_ttft_ms": None if i == 4 else 1.5}},
    )
    for k in range(2):
        d = folder.point_dir(k)
        (d / "summary.json").write_text(
            json.dumps(
                {
                    "index": k,
                    "label": f"c={k + 1}",
                    "metrics": {"output_throughput": i + k},
                    "point": {
                        "concurrency": k + 1,
                        "request_rate": "inf" if k else 2.5,
                        "input_len": 8,
                        "output_len": 8,
                    },
                }
            )
        )
    folder.update_status(state="succeeded", duration_s=1.0 + i)
    return folder


def _dump(cat: Catalog) -> tuple[list[dict[str, object]], list[list[dict[str, object]]]]:
    runs = cat.list_runs(limit=10_000)
    return runs, [cat.points(r["run_id"]) for r in runs]


def test_batched_sync_equals_one_by_one(settings: Settings) -> None:
    folders = [_run(settings, i) for i in range(30)]  # >= 20: the Arrow batch path
    batched = Catalog(settings.catalog_path, settings.runs_dir)
    assert batched.sync() == 30
    one_by_one = Catalog(settings.data_dir / "other.duckdb", settings.runs_dir)
    for f in folders:
        one_by_one.index_run(f)
    assert _dump(batched) == _dump(one_by_one)
    row = next(r for r in batched.list_runs() if r["run_id"] == folders[4].run_id)
    assert row["median_ttft_ms"] is None and row["kv_cache_tokens"] == 1004
    assert row["tags"] == ["t4"] and row["cuda_graphs"] is True
    assert batched.points(folders[4].run_id)[1]["request_rate"] == float("inf")
    assert batched.reindex() == 30
    assert _dump(batched) == _dump(one_by_one)


def test_idle_sync_skips_the_catalog_but_sees_every_change(settings: Settings) -> None:
    cat = Catalog(settings.catalog_path, settings.runs_dir)
    a, b = _run(settings, 1), _run(settings, 2)
    assert cat.sync() == 2
    assert cat.sync() == 0
    # a final run changed in place
    a.update_status(state="interrupted")
    assert cat.sync() == 1
    assert {r["run_id"]: r["state"] for r in cat.list_runs()}[a.run_id] == "interrupted"
    # a folder without status.json yet (being created) is not indexed, then is
    half = RunFolder.create(settings.runs_dir, "20260101-000000-halfway")
    assert cat.sync() == 0
    half.write("spec.json", {"run_id": half.run_id})
    half.write("status.json", {"state": "queued"})
    assert cat.sync() == 1
    # a deleted folder disappears
    shutil.rmtree(b.path)
    assert cat.sync() == 0
    assert b.run_id not in {r["run_id"] for r in cat.list_runs()}
    # the catalog lost behind this process's back: rebuilt, not skipped by the memo
    settings.catalog_path.unlink()
    assert cat.sync() == 2
    # another process changed the catalog: still consistent with the folders
    _SYNCED.clear()
    assert cat.sync() == 0
    assert len(cat.list_runs()) == 2
