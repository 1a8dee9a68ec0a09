"""The memory ledger as one stacked horizontal bar per arm (GB per GPU): weights, KV cache,
CUDA graphs, the rest of what the load used at its peak (activations, the runtime) and
what was left free at the peak. The arm's name is written in its colour (``arm_colours``).
A part no source stated is left out of that bar and named under the plot, never drawn as 0.
"""

from __future__ import annotations

from collections.abc import Mapping

import plotly.graph_objects as go

from core.analysis.ledger import MemoryLedger
from core.views.figures import (
    MEMORY_PART_COLOURS,
    colour_of,
    label_small_parts,
    layout,
    note,
)

__all__ = ["LEDGER_PARTS", "ledger_figure", "ledger_parts"]

# part → fill colour, as on the start-up bars (the arm's own colour is its label's)
LEDGER_PARTS: dict[str, str] = {
    "weights": MEMORY_PART_COLOURS["weights"],
    "KV cache": MEMORY_PART_COLOURS["KV cache"],
    "CUDA graphs": MEMORY_PART_COLOURS["CUDA graphs"],
    "other at peak": MEMORY_PART_COLOURS["other at peak"],
    "free at peak": MEMORY_PART_COLOURS["free"],
}


def ledger_parts(lg: MemoryLedger) -> dict[str, float | None]:
    """The bar's parts in GB. "other at peak" is the NVML peak less weights, KV and graphs
    (never below 0); without a peak, "free at peak" falls back to what the server left
    free at start-up."""
    known = [lg.weights_gb, lg.kv_cache_gb, lg.graph_gb]
    other = None
    if lg.peak_used_gb is not None and all(x is not None for x in known):
        other = max(0.0, lg.peak_used_gb - sum(x or 0.0 for x in known))
    free = lg.headroom_at_peak_gb if lg.headroom_at_peak_gb is not None else lg.free_at_ready_gb
    return {
        "weights": lg.weights_gb,
        "KV cache": lg.kv_cache_gb,
        "CUDA graphs": lg.graph_gb,
        "other at peak": other,
        "free at peak": free,
    }


def ledger_figure(
    ledger_by_arm: Mapping[str, MemoryLedger], colours: Mapping[str, str]
) -> go.Figure:
    """One bar per arm (first arm on top), parts stacked left to right."""
    fig = go.Figure()
    arms = list(ledger_by_arm)
    parts = {arm: ledger_parts(lg) for arm, lg in ledger_by_arm.items()}
    ticks = [
        f'<span style="color:{colour_of(colours, a, i)}">■</span> {a}' for i, a in enumerate(arms)
    ]
    missing: list[str] = []
    for part, fill in LEDGER_PARTS.items():
        values = [parts[a][part] for a in arms]
        missing += [f"{part} ({a})" for a, v in zip(arms, values, strict=True) if v is None]
        if all(v is None for v in values):
            continue
        fig.add_trace(
            go.Bar(
                y=ticks,
                x=values,
                name=part,
                orientation="h",
                marker={"color": fill, "line": {"color": "#999", "width": 0.5}},
                customdata=arms,
                hovertemplate=f"%{{customdata}}<br>{part}: %{{x:.2f}} GB<extra></extra>",
            )
        )
    label_small_parts(
        fig,
        {tick: list(parts[a].items()) for tick, a in zip(ticks, arms, strict=True)},
        horizontal=True,
    )
    fig.update_layout(barmode="stack", legend_traceorder="normal")
    layout(fig, "GPU memory ledger per arm (GB per GPU)", "GB", "")
    fig.update_yaxes(autorange="reversed")
    if not fig.data:
        return note(fig, "no memory ledger: the server stated none and no GPU was sampled")
    if missing:  # e.g. no NVML peak on an imported run: said, not drawn as 0
        text = "not reported: " + ", ".join(missing)
        fig.add_annotation(
            text=text if len(text) <= 160 else text[:157] + "...",
            xref="paper",
            yref="paper",
            x=0.0,
            y=-0.3,
            xanchor="left",
            showarrow=False,
            font={"size": 11, "color": "#666"},
        )
    return fig
