"""The memory ledger figure: one stacked bar per arm, its label in the arm's colour, and a
part no source stated named under the plot instead of drawn as 0."""

from __future__ import annotations

import pytest

from core.analysis.ledger import MemoryLedger
from core.views.figures import arm_colours
from core.views.figures_ledger import ledger_figure, ledger_parts


def test_one_bar_per_arm_whose_parts_add_up_to_the_gpu() -> None:
    lg = MemoryLedger(
        weights_gb=0.27,
        kv_cache_gb=118.0,
        graph_gb=0.4,
        gpu_total_gb=140.4,
        peak_used_gb=120.6,
        headroom_at_peak_gb=19.8,
    )
    parts = ledger_parts(lg)
    assert sum(v or 0.0 for v in parts.values()) == 140.4
    colours = arm_colours(["off", "on"], "off")
    fig = ledger_figure({"off": lg, "on": lg}, colours)
    assert [t.name for t in fig.data] == [
        "weights",
        "KV cache",
        "CUDA graphs",
        "other at peak",
        "free at peak",
    ]
    assert all(t.orientation == "h" and len(t.x) == 2 for t in fig.data)
    assert colours["on"] in fig.data[0].y[1]  # the arm's name in its colour
    assert fig.layout.barmode == "stack"


def test_an_unstated_part_is_named_not_drawn_as_zero() -> None:
    known = MemoryLedger(weights_gb=1.0, kv_cache_gb=10.0, graph_gb=0.0, free_at_ready_gb=5.0)
    bare = MemoryLedger(peak_used_gb=12.0, gpu_total_gb=16.0, headroom_at_peak_gb=4.0)
    fig = ledger_figure({"a": known, "b": bare}, arm_colours(["a", "b"], "a"))
    weights = next(t for t in fig.data if t.name == "weights")
    assert weights.x == (1.0, None)
    assert any("weights (b)" in a.text for a in fig.layout.annotations if not a.showarrow)
    empty = ledger_figure({"a": MemoryLedger()}, {"a": "#4c78a8"})
    assert "no memory ledger" in empty.layout.annotations[0].text


def test_the_cuda_graph_sliver_is_labelled_where_it_is_drawn() -> None:
    """0.4 GB of CUDA graphs beside 118 GB of KV cache is a hairline: the cost a CUDA-graph
    A/B is about gets a label with its size, its arrow at the segment (issue 24 item 7)."""
    on = MemoryLedger(weights_gb=0.27, kv_cache_gb=128.0, graph_gb=0.4, free_at_ready_gb=10.2)
    off = MemoryLedger(weights_gb=0.27, kv_cache_gb=118.0, graph_gb=0.0, free_at_ready_gb=20.3)
    fig = ledger_figure({"off": off, "on": on}, arm_colours(["off", "on"], "off"))
    labels = {(a.y, a.text): a for a in fig.layout.annotations if a.showarrow}
    ticks = next(t for t in fig.data if t.name == "CUDA graphs").y
    on_graphs = labels[(ticks[1], "CUDA graphs: 0.4 GB")]
    assert on_graphs.x == pytest.approx(0.27 + 128.0 + 0.2)  # the middle of the segment
    assert (ticks[0], "CUDA graphs: 0 GB") in labels  # a stated 0 is said: graphs off
    assert (ticks[1], "weights: 0.27 GB") in labels
    # the big parts read from the bar: no label on the KV cache or the free memory
    assert not any("KV cache" in t or "free" in t for _, t in labels)


def test_an_unstated_part_gets_no_label() -> None:
    """A part the engine did not state (CUDA graphs here) is neither drawn nor labelled with
    a size, never "0 GB": it is listed as not reported. The thin part it did state beside
    100 GB of KV cache (1 GB of weights) is labelled, so the figure does label thin parts."""
    fig = ledger_figure(
        {"a": MemoryLedger(weights_gb=1.0, kv_cache_gb=100.0, free_at_ready_gb=5.0)},
        {"a": "#4c78a8"},
    )
    assert [a.text for a in fig.layout.annotations if a.showarrow] == ["weights: 1 GB"]
    assert "CUDA graphs" not in {t.name for t in fig.data}
    notes = [a.text for a in fig.layout.annotations if not a.showarrow]
    assert any("not reported: CUDA graphs (a)" in n for n in notes), notes
