"""Table cells in words: what a reader sees of a value (pages, the HTML report);
exports keep the raw values."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pandas as pd

from core.config import knob_text

__all__ = ["CARD_COLUMNS", "CARD_LEGEND", "DELTA_LEGEND", "column_groups", "readable_cells"]

# The most point columns one summary-card table holds. At 400 px a card of c=1 … c=64 and
# start-up (8 columns) showed c=1 … c=16 and cut c=32 and c=64 off with no scroll hint;
# 4 columns beside the metric names fit there.
CARD_COLUMNS = 4

# The words for "no difference", one meaning each (the numbers that decide them:
# core.analysis.points.is_no_change and core.analysis.card): "within noise" only where an
# interval or the host's A/A noise floor covers the change; "no change" where neither
# exists (one run each) and the change is under 0.5 %.
CARD_LEGEND = (
    "▲ better / ▼ worse by each metric's direction (green / red); ≈ within noise: the "
    "interval or the host's A/A noise floor covers the change; = no change: one run per "
    "arm and under 0.5 %; '?' = one run per arm, no interval; n/t = not tested by this "
    "workload: the arm differs only in a knob whose resource the load never reached."
)
DELTA_LEGEND = (
    'One run each, so no interval: a change under 0.5 % reads "no change" (not "within '
    'noise": only an interval or the A/A noise floor, on the card above, can say that).'
)


def readable_cells(frame: pd.DataFrame) -> pd.DataFrame:
    """A table as a reader sees it (pages, the HTML report): on / off for booleans, "—"
    where unset, numbers to the precision their unit deserves (the column's suffix: ``_gb``
    2 decimals, ``_mib`` and ``tokens`` whole and grouped), every other value as it is, in
    full (a model path is not shortened here: two paths may share their last part).
    Exports keep the raw values."""

    def cell(value: Any, column: str) -> str:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return "—"
        if isinstance(value, bool):
            return knob_text(value)
        if isinstance(value, int | float):
            if column.endswith("_gb"):
                return f"{value:,.2f}"
            if column.endswith(("_mib", "tokens")):
                return f"{value:,.0f}"
        return str(value)

    return frame.apply(lambda col: col.map(lambda v: cell(v, str(col.name))))


def column_groups(columns: Sequence[str], most: int = CARD_COLUMNS) -> list[list[str]]:
    """``columns`` in order, split into as few groups of at most ``most`` as there can be,
    of even sizes (8 → 4 + 4, 5 → 3 + 2): one table each, so no column leaves a narrow
    screen."""
    if not columns:
        return []
    groups = math.ceil(len(columns) / most)
    size, longer = divmod(len(columns), groups)  # the first ``longer`` groups get one more
    out, start = [], 0
    for g in range(groups):
        end = start + size + (g < longer)
        out.append(list(columns[start:end]))
        start = end
    return out
