"""The memory ledger figure: one stacked bar per arm, its label in the arm's colour, and a
part no source stated named under the plot instead of drawn as 0."""

from __future__ import annotations

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
    assert "weights (b)" in fig.layout.annotations[0].text
    empty = ledger_figure({"a": MemoryLedger()}, {"a": "#4c78a8"})
    assert "no memory ledger" in empty.layout.annotations[0].text
