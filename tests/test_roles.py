"""core.analysis.roles: who is who in a comparison (names, the baseline, the headline
point)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from core.analysis.roles import arm_names, baseline_index, headline_point
from core.analysis.runs import load_run
from core.experiments.design import control_of
from core.interop.importers import Given, parse_text, plan_runs, store_runs
from core.run_folder import RunFolder
from core.settings import Settings
from core.store import Catalog
from core.views.runs_table import runs_frame
from tests.runs_by_hand import (
    P1,
    P4,
    P8,
    make_run,
)


def test_runs_are_named_by_what_differs_and_the_control_is_the_baseline(tmp_path: Path) -> None:
    on = make_run(
        tmp_path,
        "on",
        server={"engine": "sglang", "cuda_graphs": True},
        intended=["server.cuda_graphs"],
    )
    off = make_run(
        tmp_path,
        "off",
        server={"engine": "sglang", "cuda_graphs": False},
        intended=["server.cuda_graphs"],
    )
    views = [load_run(on), load_run(off)]
    # the one arm-name spelling: a grid's arm labels and the shipped demo read the same
    assert arm_names(views) == ["graphs=on", "graphs=off"]
    assert baseline_index(views) == 1  # off is the control, whatever the order
    assert baseline_index(views[::-1]) == 0
    # numbers: the lower value; no intended_diff: the one differing knob
    hi = make_run(tmp_path, "hi", server={"engine": "sglang", "mem_fraction_static": 0.9})
    lo = make_run(tmp_path, "lo", server={"engine": "sglang", "mem_fraction_static": 0.7})
    dflt = make_run(tmp_path, "dflt", server={"engine": "sglang"})
    assert arm_names([load_run(hi), load_run(lo)]) == [
        "mem=0.9",
        "mem=0.7",
    ]
    assert baseline_index([load_run(hi), load_run(lo)]) == 1
    assert baseline_index([load_run(hi), load_run(dflt), load_run(lo)]) == 1  # default first
    # identical configurations keep the first, and each name says which run it is
    same = [load_run(make_run(tmp_path, f"run-{i}00000")) for i in range(2)]
    assert baseline_index(same) == 0
    assert arm_names(same) == ["run-000000", "run-100000"]
    assert control_of([None, False, 0]) == 0 and control_of(["fa3", "triton"]) == 0


def test_trials_of_one_arm_share_its_name_with_their_short_id(tmp_path: Path) -> None:
    views = []
    for i, arm in enumerate(("graphs-on", "graphs-off", "graphs-on")):
        folder = make_run(tmp_path, f"2026-{i}abcdef")
        spec = folder.read("spec.json")
        spec["tags"] = ["exp:exp-x", f"arm:{arm}", f"trial:{i}"]
        folder.write("spec.json", spec)
        views.append(load_run(folder))
    names = arm_names(views)
    assert names[1] == "graphs off" and names[0].startswith("graphs on · ")
    assert names[0] != names[2]


def test_headline_point_is_the_heaviest_load_all_runs_share(tmp_path: Path) -> None:
    a = make_run(tmp_path, "a", points=[(P8, {}, "d"), (P1, {}, "d"), (P4, {}, "d")])
    b = make_run(tmp_path, "b", points=[(P1, {}, "d"), (P4, {}, "d")])
    head = headline_point([load_run(a), load_run(b)])
    assert head is not None and head.key[0] == 4  # c=8 is not common, c=4 is the heaviest
    c = make_run(tmp_path, "c", points=[(P8, {}, "d")])
    assert headline_point([load_run(b), load_run(c)]) is None


def test_one_headline_rule_for_a_run_its_catalog_row_the_runs_page_and_compare(
    settings: Settings,
) -> None:
    """A plan [c=64, c=1] headlines c=64 everywhere: result.json (the catalog, the Runs
    page's numbers and its 'headline at') and Compare's headline point alike."""
    heavy = {**_BENCH, "max_concurrency": 64, "output_throughput": 900.0}
    light = {**_BENCH, "max_concurrency": 1, "output_throughput": 100.0}
    parsed = parse_text(json.dumps([heavy, light]), "sweep.json")
    (planned,) = plan_runs(parsed, settings, given=Given(input_len=1024, output_len=128))
    (run_id,) = store_runs([planned], settings)
    folder = RunFolder(settings.runs_dir / run_id)
    result = folder.read("result.json")
    assert result["headline_point"] == 0 and result["headline"]["output_throughput"] == 900.0
    catalog = Catalog(settings.catalog_path, settings.runs_dir)
    catalog.sync()
    row = catalog.get_run(run_id)
    assert row is not None and row["output_throughput"] == 900.0
    assert runs_frame([row], settings.runs_dir).iloc[0]["headline at"] == "c=64"
    head = headline_point([load_run(folder)])
    assert head is not None and head.key[0] == 64 and head.indices == (0,)


_BENCH: dict[str, Any] = {
    "backend": "openai-chat",
    "model_id": "Qwen/Qwen2-7B-Instruct",
    "num_prompts": 100,
    "request_rate": "inf",
    "duration": 20.5,
    "completed": 100,
    "failed": 0,
    "total_input_tokens": 102400,
    "total_output_tokens": 12800,
    "request_throughput": 4.87,
    "median_ttft_ms": 110.0,
    "p99_ttft_ms": 300.0,
}
