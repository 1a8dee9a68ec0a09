"""Could the workload show the knob? Checked on the shipped H200 demos, from stored data."""

from __future__ import annotations

import sys
from dataclasses import replace

import pytest

from core.analysis.knob_checks import knob_checks, knob_lines
from core.analysis.runs import RunView
from core.analysis.trials import experiment_runs
from core.experiments.design import load_experiment
from core.settings import DEMO_DIR, Settings


def _arms(exp_id: str) -> dict[str, list[RunView]]:
    settings = Settings(
        data_dir=DEMO_DIR, sglang_python=sys.executable, transformers_python=sys.executable
    )
    record = load_experiment(settings, exp_id)
    if record is None:
        pytest.skip(f"demo {exp_id} not shipped")
    arms: dict[str, list[RunView]] = {}
    for r in experiment_runs(settings, record):
        if r.view.status.state == "succeeded":
            arms.setdefault(r.arm, []).append(r.view)
    return arms


def test_the_2x2_demo_never_tested_the_memory_fraction_and_ran_all_decode_in_graphs() -> None:
    checks = {c["knob"]: c for c in knob_checks(_arms("exp-20261201-041412-6b50"))}
    mem = checks["mem_fraction_static"]
    assert mem["exercised"] is False and mem["capacity"] == 5498295
    assert mem["why"].startswith("not tested by this workload")
    assert "peak 0.14% of 5.50 M tokens" in mem["why"]
    graphs = checks["cuda_graphs"]
    assert graphs["exercised"] is True and graphs["used_peak"] == 1.0
    assert "100% of decode passes" in graphs["why"]
    assert all("within noise" not in line for line in knob_lines(list(checks.values())))


def test_the_kv_pressure_demo_tested_the_memory_fraction() -> None:
    (mem,) = knob_checks(_arms("exp-20261201-204553-b919"))
    assert mem["knob"] == "mem_fraction_static" and mem["exercised"] is True
    assert mem["used_peak"] / mem["capacity"] > 0.99
    assert mem["why"].startswith("tested") and "queued" in mem["why"]


def test_a_queue_the_load_could_not_owe_to_the_kv_cache_does_not_test_the_fraction() -> None:
    """The team change on the Qwen3-30B-A3B shape (H200): 64 x 512 tokens planned against a
    670 K-token pool; 2 requests queued behind the prefill budget, at 4.81 % KV used."""
    arms = _arms("exp-20261206-025848-b394")
    mem = next(c for c in knob_checks(arms) if c["knob"] == "mem_fraction_static")
    assert mem["exercised"] is False and mem["why"].startswith("not tested by this workload")
    assert "peak 4.81% of 670 K tokens" in mem["why"]
    assert "up to 2 requests queued with the planned in-flight tokens at most 4.89%" in mem["why"]
    # The same measurements under a plan that could fill the pool: the queue is KV pressure.
    heavy = {
        arm: [
            replace(v, spec={**v.spec, "plan": {"points": [{"concurrency": 64, "kv_fill": 1.2}]}})
            for v in views
        ]
        for arm, views in arms.items()
    }
    mem = next(c for c in knob_checks(heavy) if c["knob"] == "mem_fraction_static")
    assert mem["exercised"] is True and "up to 2 requests queued, 0 retracted" in mem["why"]


def _relabel(views: list[RunView], **server: object) -> list[RunView]:
    """The same measured runs as if launched with other server settings (the checks read
    the settings from spec.json and the measurements from the folder)."""
    return [replace(v, spec={**v.spec, "server": {**v.spec["server"], **server}}) for v in views]


def test_a_limit_knob_is_tested_only_once_the_workload_passes_the_smaller_arms_limit() -> None:
    """cuda_graph_max_bs and chunked_prefill_size act only past a limit: the 2x2's graphs-on
    runs peaked at 64 running requests with 64-token prompts."""
    graphs = next(
        vs
        for vs in _arms("exp-20261201-041412-6b50").values()
        if vs[0].spec["server"]["cuda_graphs"] and vs[0].spec["server"]["mem_fraction_static"] < 0.9
    )
    past = knob_checks({"a": _relabel(graphs, cuda_graph_max_bs=32), "b": graphs})
    check = next(c for c in past if c["knob"] == "cuda_graph_max_bs")
    assert check["exercised"] is True and check["suggest"] is None
    assert check["why"] == "tested: the largest running batch (64) exceeded the smaller max_bs (32)"
    within = knob_checks(
        {"a": _relabel(graphs, cuda_graph_max_bs=128), "b": _relabel(graphs, cuda_graph_max_bs=256)}
    )
    check = next(c for c in within if c["knob"] == "cuda_graph_max_bs")
    assert check["exercised"] is False and check["suggest"] == "a concurrency above 128"
    assert check["why"].startswith("not tested by this workload: the largest running batch (64)")
    chunked = knob_checks(
        {
            "a": _relabel(graphs, chunked_prefill_size=4096),
            "b": _relabel(graphs, chunked_prefill_size=8192),
        }
    )
    check = next(c for c in chunked if c["knob"] == "chunked_prefill_size")
    assert check["exercised"] is False and check["suggest"] == "prompts over 4,096 tokens"
    assert "the longest prompt (64 tokens) fits one chunk (4,096)" in check["why"]


def test_each_check_names_the_resource_its_engine_declares(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The words come from the engine's KnobSpec.resource: the demo's SGLang runs read
    SGLang's (the words the demo has always shown), the same runs as another engine read
    that engine's declaration, and a run of an engine registered nowhere here reads the
    first declaring engine's."""
    from dataclasses import replace

    from core.engines import registry

    arms = _arms("exp-20261201-041412-6b50")
    checks = {c["knob"]: c["resource"] for c in knob_checks(arms)}
    assert checks == {
        "mem_fraction_static": "KV cache tokens",
        "cuda_graphs": "decode passes run in CUDA graphs",
    }
    sglang = registry.get_engine("sglang")
    assert all(sglang.knob(k).resource == words for k, words in checks.items())  # type: ignore[union-attr]
    imported = {a: _relabel(vs, engine="tgi") for a, vs in arms.items()}
    assert {c["knob"]: c["resource"] for c in knob_checks(imported)} == checks
    # transformers declaring other words for its CUDA graphs: its runs show those
    mine = registry.get_engine("transformers")
    knobs = tuple(
        replace(k, resource="graph-captured decode steps") if k.name == "cuda_graphs" else k
        for k in mine.knobs
    )
    monkeypatch.setitem(registry._loaded, "transformers", replace(mine, knobs=knobs))
    as_transformers = {a: _relabel(vs, engine="transformers") for a, vs in arms.items()}
    shown = {c["knob"]: c["resource"] for c in knob_checks(as_transformers)}
    assert shown["cuda_graphs"] == "graph-captured decode steps"


def test_where_the_server_reports_no_per_pass_graph_use_the_check_says_what_it_captured() -> None:
    """vLLM's graphs A/B (H100, one trial): vLLM logs no per-batch graph flag, so the check
    stays unknown, and says what the start-up log did show: the graphs captured, up to which
    batch, against the largest batch the load ran; a batch past the capture is named."""
    arms = _arms("exp-20261206-205528-0196")
    graphs = next(c for c in knob_checks(arms) if c["knob"] == "cuda_graphs")
    assert graphs["exercised"] is None
    assert graphs["why"] == (
        "unknown: the server did not say which decode passes ran in graphs; at start-up the "
        "graphs-on arm captured 0.98 GB of graphs for batches up to 512, and the largest "
        "running batch (64) was within them"
    )
    small = {
        arm: [
            replace(v, facts={**v.facts, "cuda_graph_capture_sizes": [1, 2, 4, 8, 16, 32]})
            for v in vs
        ]
        for arm, vs in arms.items()
    }
    why = next(c for c in knob_checks(small) if c["knob"] == "cuda_graphs")["why"]
    assert why.endswith(
        "the largest running batch (64) was above them: passes that large ran without graphs"
    )
