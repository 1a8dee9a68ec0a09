"""Acceptance: an adaptive A/B (trials: auto, 2 to 3) on the real `transformers serve`
with the real SmolLM2 on CPU, through the CLI, which runs the queue and the stop rule's
controller in its worker; the experiment stops by itself and records why.

The arms differ in the weights' dtype (float32 vs bfloat16), the CPU knob that moved
numbers most in test_explain_e2e.py. Either ending is the stop rule working: decided
(every headline contrast clear), or, as measured on the shared 2-core CI host, where
2 requests of 8 tokens vary by a factor of several between fresh servers, "undecided
after 3 trials: ..." naming the open contrasts. The plan is the smallest that still
measures and still looks more than once: the first look after 2 trials (the least the
stop rule allows), the last after 3; one point, 2 requests of 8 tokens, no probe, no
warm-up. 4-6 fresh servers instead of 6-12 (at most 6 trials): the suite's longest
module, ~10 min on a loaded 2-core host."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core.analysis.trials import experiment_runs
from core.engines.model_setup import ensure_default_model
from core.experiments.design import list_experiments
from core.settings import Settings, load_settings

REPO = Path(__file__).resolve().parent.parent
# up to 6 fresh servers (3 trials x 2 arms) on the shared 2-core host
TIMEOUT_S = 1200
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(TIMEOUT_S)]
MIN_TRIALS, MAX_TRIALS = 2, 3


def test_adaptive_ab_on_transformers_serve_stops_by_itself_and_says_why(tmp_path: Path) -> None:
    model_dir = ensure_default_model(load_settings().models_dir)
    data = tmp_path / "data"
    (data / "models").mkdir(parents=True)
    (data / "models" / model_dir.name).symlink_to(model_dir)
    plan = {
        "name": "CPU: dtype, trials auto",
        "trials": "auto",
        "min_trials": MIN_TRIALS,
        "max_trials": MAX_TRIALS,
        "base": {
            "server": {
                "engine": "transformers",
                "device": "cpu",
                # a bounded KV cache on CPU (see test_explain_e2e.py)
                "extra_args": ["--cb-num-blocks", "16"],
            },
            "plan": {
                "points": [{"concurrency": 1, "num_prompts": 2, "input_len": 16, "output_len": 8}],
                "probe": None,
                "warmup_requests": 0,
            },
        },
        "arms": [
            {"label": "fp32", "changes": {"server.dtype": "float32"}},
            {"label": "bf16", "changes": {"server.dtype": "bfloat16"}},
        ],
        "baseline": "fp32",
    }
    path = tmp_path / "auto.json"
    path.write_text(json.dumps(plan))
    env = {**os.environ, "SERVELAB_DATA_DIR": str(data), "HF_HUB_OFFLINE": "1"}
    started = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "core", "experiment", str(path)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S - 60,
    )
    took_s = time.monotonic() - started
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    settings = Settings(
        data_dir=data, sglang_python=sys.executable, transformers_python=sys.executable
    )
    (record,) = list_experiments(settings)
    assert record.adaptive is not None and record.adaptive.stop is not None
    stop = record.adaptive.stop
    runs = experiment_runs(settings, record)
    assert all(r.view.status.state == "succeeded" for r in runs), [
        (r.arm, r.view.status.reason) for r in runs
    ]
    # it stopped by itself: decided, or at its limit, never more than max_trials
    assert stop.reason in ("decided", "max_trials")
    assert MIN_TRIALS <= stop.queued_trials <= MAX_TRIALS
    assert len(runs) == 2 * stop.queued_trials
    assert len(record.adaptive.looks) == stop.queued_trials - MIN_TRIALS + 1  # one per trial
    last = record.adaptive.looks[-1]
    assert {c.metric for c in last.contrasts} == {
        "output_throughput",
        "median_ttft_ms",
        "median_itl_ms",
    }
    if stop.reason == "decided":
        assert stop.text.startswith(f"decided after {stop.complete_trials} trials (")
    else:
        assert stop.text.startswith(f"undecided after {MAX_TRIALS} trials: ")
    assert f"Trials auto: {stop.text}" in out.stdout  # the CLI's verdict says why
    print(
        f"\n{stop.text}; "
        + ", ".join(
            f"{c.what} {c.rel:+.0%} [{c.low:+.0%}, {c.high:+.0%}] {c.decision}"
            for c in last.contrasts
            if c.rel is not None and c.low is not None and c.high is not None
        )
        + f" [{took_s:.0f} s]"
    )
