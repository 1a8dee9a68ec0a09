"""`python -m core history RUN_OR_SERIES [--json]` through a real process: the same series,
band and alert words as the History page."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from core.analysis.history import alert_text, load_history
from tests.runs_by_hand import P4, make_run, run_facts

REPO = Path(__file__).resolve().parent.parent


def _history(data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "core", "history", *args],
        cwd=REPO,
        env={**os.environ, "SERVELAB_DATA_DIR": str(data)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_history_prints_the_series_band_and_alert(tmp_path: Path) -> None:
    data = tmp_path / "data"
    ids = []
    for i, tput in enumerate([1000.0, 1030.0, 970.0, 1010.0, 850.0]):
        run_id = f"20990301-0{i}0000-cli00{i}"
        make_run(
            data / "runs",
            run_id,
            points=[(P4, {"output_throughput": tput, "median_ttft_ms": 80.0}, "d4")],
            facts=run_facts(engine_version="0.5.17" if i < 4 else "0.5.18"),
            started_at=f"2099-03-01T0{i}:00:00+00:00",
        )
        ids.append(run_id)
    history = load_history(data / "runs", ids[-1])
    assert history is not None and history.regression
    out = _history(data, ids[-1])
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == alert_text(history)  # the page's words
    assert f"link: /history?series={history.key}" in lines
    assert sum(line.startswith(ids[0][:8]) for line in lines) == 5
    assert any("sglang 0.5.18" in line and line.endswith("<") for line in lines)
    as_json = _history(data, history.key, "--json")
    assert as_json.returncode == 0, as_json.stderr
    doc = json.loads(as_json.stdout)
    assert doc["alert"] == alert_text(history) and doc["regression"] is True
    assert doc["checked_run"] == ids[-1] and [r["run_id"] for r in doc["runs"]] == ids
    regression = next(c for c in doc["checks"] if c["metric"] == "output_throughput")
    assert regression["outcome"] == "regression" and regression["band"]["n"] == 4


def test_history_of_nothing_says_why(tmp_path: Path) -> None:
    out = _history(tmp_path / "data", "20990301-000000-nothing")
    assert out.returncode == 2
    assert out.stderr.startswith(
        "error: RUN_OR_SERIES: no succeeded run of 20990301-000000-nothing"
    )
    bad = _history(tmp_path / "data", "../etc")
    assert bad.returncode == 2 and "neither a run id nor a series key" in bad.stderr
