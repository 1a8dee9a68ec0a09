"""Table cells in words: what a reader sees of a value (pages, the HTML report);
exports keep the raw values."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from core.config import knob_text

__all__ = ["readable_cells"]


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
