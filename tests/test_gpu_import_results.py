"""bench/gpu/import_results.py: the device's returned data folder, as a real tar.gz, into a
demo folder. A run the lent machine never finished must not ship queued or running."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

from bench.gpu.import_results import main


def _run(data: Path, run_id: str, state: str, updated_at: str) -> None:
    folder = data / "runs" / run_id
    folder.mkdir(parents=True)
    (folder / "spec.json").write_text(json.dumps({"run_id": run_id, "server": {}}))
    status = {"run_id": run_id, "state": state, "phase": state, "updated_at": updated_at}
    (folder / "status.json").write_text(json.dumps(status))


def test_runs_left_active_on_the_device_ship_interrupted_with_their_last_time(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    _run(data, "r-done", "succeeded", "2026-12-07T09:05:00+00:00")
    _run(data, "r-running", "running", "2026-12-07T09:09:53+00:00")
    _run(data, "r-queued", "queued", "2026-12-07T09:04:13+00:00")
    (data / "experiments").mkdir()
    tar_path = tmp_path / "gpu-data.tar.gz"
    with tarfile.open(tar_path, "w:gz") as tar:
        tar.add(data, arcname="data")
    dest = tmp_path / "demo"
    main(tar_path, dest)

    def status(run_id: str) -> dict:
        return json.loads((dest / "runs" / run_id / "status.json").read_text())

    assert status("r-done")["state"] == "succeeded"  # a finished run is left as measured
    for run_id, was in (("r-running", "running"), ("r-queued", "queued")):
        got = status(run_id)
        assert got["state"] == "interrupted" and got["phase"] == "done"
        assert f"released while this run was {was}" in got["reason"]
    # when it was last heard from, not when it was imported
    assert status("r-running")["finished_at"] == "2026-12-07T09:09:53+00:00"
    main(tar_path, dest)  # a second import skips what is there
    assert status("r-queued")["state"] == "interrupted"
