"""The client-saturation warning end to end: a blocked loop is caught while a point runs, and
the CLI names the point and the reason (the rule itself: tests/test_health.py)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from core.load.generator import LoadOptions, run_load
from core.load.health import MIN_LAG_SAMPLES, ClientHealth
from core.load.prompts import Prompt
from core.run_folder import RunFolder
from core.views.report import format_run
from tests.test_loadgen import fake_server


def test_a_blocked_loop_is_reported(fake_sglang: Path, tmp_path: Path) -> None:
    def block(_done: int, _total: int) -> None:
        time.sleep(0.03)  # a callback that holds the loop, as an overloaded client does

    with fake_server(tmp_path / "s.log") as base:
        opts = LoadOptions(
            base_url=base,
            model="m",
            concurrency=2,
            request_rate=float("inf"),
            seed=1,
            exact_length_body={"ignore_eos": True},
            request_timeout_s=30.0,
            point_timeout_s=60.0,
        )
        prompt = Prompt(text=" alpha", prompt_tokens=1, output_len=4)
        _, health = run_load(opts, [prompt] * 40, on_done=block)
    assert health.saturated and "lag" in health.saturated_why


def test_cli_report_names_the_point_and_the_reason(tmp_path: Path) -> None:
    folder = RunFolder.create(tmp_path)
    folder.write("status.json", {"state": "succeeded", "steps": []})
    metrics = {
        k: 1.0
        for k in (
            "output_throughput",
            "median_ttft_ms",
            "p99_ttft_ms",
            "median_itl_ms",
            "median_tpot_ms",
            "median_e2e_ms",
        )
    }
    d = folder.point_dir(0)
    (d / "summary.json").write_text(
        json.dumps(
            {
                "index": 0,
                "label": "c=8",
                "metrics": {**metrics, "completed": 8, "num_requests": 8},
                "client": ClientHealth(loop_lag_ms_p99=1.0, cpu_s=0.97, wall_s=1.0).as_dict(),
            }
        )
    )
    text = format_run(folder)
    assert (
        "WARNING: point c=8: load generator saturated (client CPU 97% of a core >= 90%): "
        "the client, not the server, may have limited these numbers"
    ) in text
    # a loop that lagged with CPU to spare: every request went out, the stamps came late
    (d / "summary.json").write_text(
        json.dumps(
            {
                "index": 0,
                "label": "c=8",
                "metrics": {**metrics, "completed": 8, "num_requests": 8},
                "client": ClientHealth(
                    loop_lag_ms_p99=6.0, cpu_s=0.1, wall_s=1.0, lag_samples=MIN_LAG_SAMPLES
                ).as_dict(),
            }
        )
    )
    assert (
        "WARNING: point c=8: client timestamps late (event-loop lag p99 6.0 ms > 5 ms at "
        "10% of a core): its latency tails (p99) may include that much client delay"
    ) in format_run(folder)
