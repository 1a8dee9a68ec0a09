"""core.views.cells: a table's cells as a reader sees them, and the one wording for "no
difference"."""

from __future__ import annotations

import math

import pandas as pd

from core.views.cells import CARD_COLUMNS, CARD_LEGEND, DELTA_LEGEND, column_groups, readable_cells


def test_readable_cells_word_each_value_by_its_column() -> None:
    frame = pd.DataFrame(
        {
            "field": ["server.cuda_graphs", "x", "y"],
            "flag": [True, False, None],
            "free_gb": [12.0, 1.23456, math.nan],
            "peak_mib": [127_600.0, 0, None],
            "kv_cache_tokens": [500_000, None, 3],
            "model": ["/models/org/big-model", "b", "c"],
        },
        dtype=object,
    )
    cells = readable_cells(frame)
    assert list(cells["flag"]) == ["on", "off", "—"]
    assert list(cells["free_gb"]) == ["12.00", "1.23", "—"]
    assert list(cells["peak_mib"]) == ["127,600", "0", "—"]  # a 0 is a value, not "unset"
    assert list(cells["kv_cache_tokens"]) == ["500,000", "—", "3"]
    assert cells["model"][0] == "/models/org/big-model"  # in full, never shortened


def test_no_difference_has_one_word_per_meaning() -> None:
    assert "within noise: the interval or the host's A/A noise floor" in CARD_LEGEND
    assert "no change: one run per arm and under 0.5 %" in CARD_LEGEND
    assert '"no change"' in DELTA_LEGEND and "no interval" in DELTA_LEGEND


def test_a_wide_card_is_split_so_every_column_stays_on_a_narrow_screen() -> None:
    """At 400 px the card of c=1 … c=64 + start-up cut c=32 and c=64 off (issue 24 item 7)."""
    columns = ["c=1", "c=2", "c=4", "c=8", "c=16", "c=32", "c=64", "start-up"]
    groups = column_groups(columns)
    assert groups == [["c=1", "c=2", "c=4", "c=8"], ["c=16", "c=32", "c=64", "start-up"]]
    for n in range(1, 12):
        cols = [f"c={i}" for i in range(n)]
        groups = column_groups(cols)
        assert [c for g in groups for c in g] == cols  # every column once, in order
        assert all(len(g) <= CARD_COLUMNS for g in groups)
        assert len(groups) == math.ceil(n / CARD_COLUMNS)  # as few tables as can be
        assert max(map(len, groups)) - min(map(len, groups)) <= 1  # of even sizes
    assert column_groups(["c=1", "c=16", "c=64", "start-up"]) == [
        ["c=1", "c=16", "c=64", "start-up"]
    ]  # a card that fits stays one table
    assert column_groups([]) == []
