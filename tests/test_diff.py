"""core.analysis.diff over run folders built by hand: config diffs, confounders and the
differences the server derived."""

from __future__ import annotations

from pathlib import Path

from core.analysis.diff import config_diff, confounders, derived_differences, flatten_config
from core.analysis.runs import load_run
from tests.runs_by_hand import (
    P1,
    P4,
    P8,
    launch_argv,
    make_run,
    run_facts,
)


def test_seed_trap_names_the_unintended_memory_fraction(tmp_path: Path) -> None:
    a = make_run(
        tmp_path,
        "a",
        server={"engine": "sglang", "cuda_graphs": False, "mem_fraction_static": 0.85},
        argv=launch_argv(30000, "--mem-fraction-static", "0.85", "--disable-cuda-graph"),
        facts=run_facts(
            mem_fraction_static=0.85, cuda_graph_enabled=False, cuda_graph_batch_sizes=None
        ),
        intended=["server.cuda_graphs"],
    )
    b = make_run(
        tmp_path,
        "b",
        server={"engine": "sglang", "cuda_graphs": True, "mem_fraction_static": 0.92},
        argv=launch_argv(30001, "--mem-fraction-static", "0.92"),
        facts=run_facts(mem_fraction_static=0.92),
        intended=["server.cuda_graphs"],
    )
    views = [load_run(a), load_run(b)]

    assert confounders(views) == ["server.mem_fraction_static"]
    assert confounders(views, {"server.cuda_graphs"}) == ["server.mem_fraction_static"]
    assert confounders(views, {"cuda_graphs"}) == ["server.mem_fraction_static"]

    diff = config_diff(views)
    assert list(diff.columns) == ["field", "a", "b"]
    assert list(diff["field"][:2]) == ["server.cuda_graphs", "server.mem_fraction_static"]
    row = diff.set_index("field").loc["server.mem_fraction_static"]
    assert (row["a"], row["b"]) == (0.85, 0.92)
    derived = derived_differences(views)
    assert {
        "facts.mem_fraction_static",
        "facts.cuda_graph_enabled",
        "facts.cuda_graph_batch_sizes",
        "launch.argv",
    } == set(derived)


def test_clean_ab_has_no_confounders(tmp_path: Path) -> None:
    a = make_run(
        tmp_path,
        "a",
        server={"engine": "sglang", "cuda_graphs": False},
        intended=["server.cuda_graphs"],
    )
    b = make_run(
        tmp_path,
        "b",
        server={"engine": "sglang", "cuda_graphs": True},
        intended=["server.cuda_graphs"],
    )
    views = [load_run(a), load_run(b)]
    assert confounders(views) == []
    # Nothing declared: one differing field is the comparison itself.
    assert confounders(views, set()) == []
    assert list(config_diff(views)["field"]) == ["server.cuda_graphs"]


def test_without_intended_every_spec_difference_is_a_confounder(tmp_path: Path) -> None:
    a = make_run(
        tmp_path,
        "a",
        server={"engine": "sglang", "cuda_graphs": False, "mem_fraction_static": 0.85},
    )
    b = make_run(
        tmp_path, "b", server={"engine": "sglang", "cuda_graphs": True, "mem_fraction_static": 0.92}
    )
    views = [load_run(a), load_run(b)]
    assert confounders(views) == ["server.cuda_graphs", "server.mem_fraction_static"]


def test_port_only_argv_difference_is_no_difference(tmp_path: Path) -> None:
    a = make_run(tmp_path, "a", argv=launch_argv(30000))
    b = make_run(tmp_path, "b", argv=launch_argv(41234))
    c = make_run(
        tmp_path, "c", argv=[*launch_argv(30000)[:7], "--port=51234", *launch_argv(30000)[9:]]
    )
    views = [load_run(a), load_run(b)]
    flat = flatten_config(views[0])
    assert "--port <port>" in flat["launch.argv"] and "30000" not in flat["launch.argv"]
    assert config_diff(views).empty
    assert derived_differences(views) == [] and confounders(views) == []
    assert "--port=<port>" in flatten_config(load_run(c))["launch.argv"]


def test_flatten_config_fields(tmp_path: Path) -> None:
    view = load_run(make_run(tmp_path, "a", points=[(P1, {}, "d"), (P4, {}, "d")]))
    flat = flatten_config(view)
    assert flat["server.engine"] == "sglang"
    assert flat["plan.points[0]"] == "c=1 rate=inf in=32 out=16 n=4"
    assert flat["plan.points[1]"] == "c=4 rate=inf in=32 out=16 n=8"
    assert flat["plan.probe.expect"] == "(?i)paris"
    assert flat["facts.gpu"] == "NVIDIA H200"
    assert flat["facts.cuda_graph_batch_sizes"] == "1,2,4,8"
    assert flat["facts.kv_cache_tokens"] == 500_000
    assert flat["facts.mem_fraction_static"] == 0.85
    assert "server_info_raw" not in view.facts


def test_plan_differences_are_confounders_and_prefix_intended_covers_subfields(
    tmp_path: Path,
) -> None:
    a = make_run(tmp_path, "a", points=[(P1, {}, "d")], intended=["plan.points"])
    b = make_run(tmp_path, "b", points=[(P4, {}, "d"), (P8, {}, "d")], intended=["plan.points"])
    views = [load_run(a), load_run(b)]
    diff = list(config_diff(views)["field"])
    assert {"plan.points.count", "plan.points[0]", "plan.points[1]"} <= set(diff)
    assert confounders(views) == []
