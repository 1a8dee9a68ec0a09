"""core.analysis.roles: who is who in a comparison (names, the baseline, the headline
point)."""

from __future__ import annotations

from pathlib import Path

from core.analysis.roles import arm_names, baseline_index, headline_point
from core.analysis.runs import load_run
from core.experiments.design import control_of
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
    assert arm_names(views) == ["cuda_graphs=on", "cuda_graphs=off"]
    assert baseline_index(views) == 1  # off is the control, whatever the order
    assert baseline_index(views[::-1]) == 0
    # numbers: the lower value; no intended_diff: the one differing knob
    hi = make_run(tmp_path, "hi", server={"engine": "sglang", "mem_fraction_static": 0.9})
    lo = make_run(tmp_path, "lo", server={"engine": "sglang", "mem_fraction_static": 0.7})
    dflt = make_run(tmp_path, "dflt", server={"engine": "sglang"})
    assert arm_names([load_run(hi), load_run(lo)]) == [
        "mem_fraction_static=0.9",
        "mem_fraction_static=0.7",
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
