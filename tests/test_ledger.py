"""The memory ledger, from the shipped H200 demo runs' stored facts and samples: each figure
as its facts.json (or /metrics gauge) states it, an arm's median, and each knob's cost."""

from __future__ import annotations

import json
import sys

import pytest

from core.analysis.ledger import MemoryLedger, arm_ledgers, knob_cost, run_ledger
from core.analysis.runs import RunView, load_run
from core.analysis.trials import experiment_runs
from core.experiments.design import load_experiment
from core.run_folder import RunFolder
from core.settings import DEMO_DIR, Settings

GRAPHS_ON_092 = "20261201-041412-a1cfea"  # a run of the 2×2's graphs=on mem=0.92 arm


def _view(run_id: str) -> RunView:
    folder = RunFolder(DEMO_DIR / "runs" / run_id)
    if not (folder.path / "facts.json").is_file():
        pytest.skip(f"demo run {run_id} not shipped")
    return load_run(folder)


def test_a_run_ledger_is_what_its_facts_state() -> None:
    view = _view(GRAPHS_ON_092)
    facts = json.loads((DEMO_DIR / "runs" / GRAPHS_ON_092 / "facts.json").read_text())
    lg = run_ledger(view)
    assert lg.weights_gb == facts["weight_mem_gb"] == 0.266
    assert lg.kv_cache_gb == facts["kv_cache_gb"]
    assert lg.kv_cache_tokens == facts["kv_cache_tokens"] == 5952378
    assert lg.graph_gb == facts["graph_mem_gb"] == 0.4
    assert lg.free_after_weights_gb == facts["avail_mem_gb_after_load"]
    assert lg.free_after_kv_gb == facts["avail_mem_gb_after_kv_pool"]
    assert lg.free_after_capture_gb == facts["avail_mem_gb_after_graph"]
    assert lg.free_at_ready_gb == facts["available_gpu_mem_gb"]
    assert lg.gpu_total_gb == pytest.approx(facts["gpus"][0]["total_mib"] / 1024)
    # the graph memory per phase: this stored run's facts predate it, the gauges say it
    assert sum(lg.graph_gb_by_phase.values()) == pytest.approx(0.4, abs=0.001)
    assert set(lg.graph_gb_by_phase) == {"decode", "prefill"}
    # the NVML peak while points ran, and what it left
    assert lg.peak_used_gb is not None and lg.headroom_at_peak_gb is not None
    assert lg.peak_used_gb + lg.headroom_at_peak_gb == pytest.approx(lg.gpu_total_gb)
    assert lg.sources == ("facts.json", "NVML")


def test_a_graphs_off_run_has_no_capture_step_and_an_engine_without_facts_only_nvml() -> None:
    off = run_ledger(_view("20261201-041412-a1c2da"))
    assert off.graph_gb == 0.0 and off.free_after_capture_gb is None  # 0 is measured
    hf = run_ledger(_view("20261130-045815-c6a73d"))  # transformers serve: no server facts
    nvml_only = MemoryLedger(
        gpu_total_gb=hf.gpu_total_gb,
        peak_used_gb=hf.peak_used_gb,
        headroom_at_peak_gb=hf.headroom_at_peak_gb,
        sources=hf.sources,
    )
    assert hf == nvml_only and "facts.json" not in hf.sources


def test_each_knob_costs_what_the_2x2_ledgers_say() -> None:
    settings = Settings(
        data_dir=DEMO_DIR, sglang_python=sys.executable, transformers_python=sys.executable
    )
    record = load_experiment(settings, "exp-20261201-041412-6b50")
    if record is None:
        pytest.skip("the 2×2 demo is not shipped")
    arms: dict[str, list[RunView]] = {}
    for r in experiment_runs(settings, record):
        arms.setdefault(r.arm, []).append(r.view)
    ledgers = arm_ledgers(arms)
    base = "graphs=off mem=0.85"
    assert ledgers[base].kv_cache_tokens == 5498295
    assert ledgers["graphs=on mem=0.92"].graph_gb == 0.4  # the median of its three trials
    assert knob_cost("mem_fraction_static", arms, ledgers, base) == (
        "mem_fraction_static 0.92: +9.74 GB reserved → +454,083 KV tokens (+8.3%)"
    )
    assert knob_cost("cuda_graphs", arms, ledgers, base) == (
        "cuda_graphs on: +0.40 GB graph memory (decode 0.06, prefill 0.34)"
    )
    assert knob_cost("chunked_prefill_size", arms, ledgers, base) is None  # not a knob here
