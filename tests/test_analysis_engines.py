"""core/analysis/engines.py and the rules that read it, on runs made by hand: arms of
different engines compare engines; what differs with the engine is each arm's configuration."""

from __future__ import annotations

from pathlib import Path

from core.analysis.diff import environment_differences
from core.analysis.engines import arm_engines, engines_differ
from core.analysis.knob_checks import knobs_under_test
from core.analysis.roles import knob_fields
from core.analysis.runs import RunView, load_run
from tests.runs_by_hand import make_run, run_facts

INTENDED = ["server.engine", "server.mem_fraction_static", "server.attention_backend"]


def _arms(tmp_path: Path) -> dict[str, list[RunView]]:
    sglang = make_run(
        tmp_path,
        "s",
        server={"engine": "sglang", "mem_fraction_static": 0.85, "attention_backend": "triton"},
        facts=run_facts(engine_version="0.5.17"),
        intended=INTENDED,
    )
    vllm = make_run(
        tmp_path,
        "v",
        server={"engine": "vllm", "mem_fraction_static": 0.9},
        facts=run_facts(engine_version="0.26.0"),
        intended=INTENDED,
    )
    return {"sglang": [load_run(sglang)], "vllm": [load_run(vllm)]}


def test_the_engine_is_the_knob_and_no_version_confounds(tmp_path: Path) -> None:
    arms = _arms(tmp_path)
    views = [v for vs in arms.values() for v in vs]
    assert engines_differ(arms)
    assert knob_fields(views) == ["server.engine"]
    assert knobs_under_test(arms) == []  # no mem_fraction_static check across engines
    assert "facts.engine_version" not in environment_differences(views)


def test_each_arm_lists_its_own_settings_and_engine_defaults(tmp_path: Path) -> None:
    by_arm = {e.arm: e for e in arm_engines(_arms(tmp_path))}
    assert by_arm["sglang"].settings == {"mem_fraction_static": 0.85, "attention_backend": "triton"}
    assert by_arm["vllm"].settings == {"mem_fraction_static": 0.9, "attention_backend": None}
    assert (by_arm["sglang"].version, by_arm["vllm"].version) == ("0.5.17", "0.26.0")
    assert by_arm["vllm"].defaults["cuda_graphs"].startswith("on: cudagraph_mode FULL_AND")


def test_same_engine_arms_keep_their_knobs(tmp_path: Path) -> None:
    a = make_run(tmp_path, "a", server={"engine": "vllm", "cuda_graphs": False})
    b = make_run(tmp_path, "b", server={"engine": "vllm", "cuda_graphs": True})
    arms = {"off": [load_run(a)], "on": [load_run(b)]}
    assert not engines_differ(arms)
    assert knobs_under_test(arms) == ["cuda_graphs"]
    assert knob_fields([load_run(a), load_run(b)]) == ["server.cuda_graphs"]
