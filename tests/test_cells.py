"""core.views.cells: a table's cells as a reader sees them, and the one wording for "no
difference"."""

from __future__ import annotations

import math
import time

import pandas as pd
import pytest

from core.metrics import metric_label
from core.views.cells import (
    CARD_COLUMNS,
    CARD_LEGEND,
    DELTA_LEGEND,
    column_groups,
    column_label,
    confounder_sentence,
    headroom_table,
    number_text,
    readable_cells,
    readable_table,
    time_text,
)


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


def test_the_legends_name_the_four_words_and_no_noise_floor() -> None:
    for word in ("better", "worse", "equivalent", "inconclusive", "unconfirmed", "cost"):
        assert word in CARD_LEGEND
    assert "Holm" in CARD_LEGEND and "Benjamini–Hochberg" in CARD_LEGEND
    assert "A/A" not in CARD_LEGEND and "within noise" not in CARD_LEGEND
    assert "noise floor" not in CARD_LEGEND
    assert '"unconfirmed"' in DELTA_LEGEND and "no interval" in DELTA_LEGEND


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


def test_a_number_reads_to_three_significant_digits_with_separators() -> None:
    """Issue 24 item 5: "ready_after_s 127.46550430199999" and 4-decimal floats."""
    assert number_text(127.46550430199999) == "127"
    assert number_text(12.345) == "12.3"
    assert number_text(3.14159) == "3.14"
    assert number_text(0.012345) == "0.0123"
    assert number_text(1234.56) == "1,235"
    assert number_text(99.96) == "100"  # rounded once, not "100.0"
    assert number_text(5_952_378) == "5,952,378"  # a count in full
    assert number_text(0.5) == "0.5" and number_text(0) == "0"
    assert number_text(8633.2, "tok/s") == "8,633 tok/s"
    for unset in (None, math.nan, math.inf, "x", True):
        assert number_text(unset) == "—"


def test_a_timestamp_reads_local_to_the_second(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "Europe/Berlin")
    time.tzset()
    try:
        assert time_text("2026-12-01T04:14:12.345678+00:00") == "2026-12-01 05:14:12"
        assert time_text("2026-12-01T04:14:12.345Z") == "2026-12-01 05:14:12"
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    assert time_text(None) == "—" and time_text("") == "—"
    assert time_text("yesterday") == "yesterday"  # not a timestamp: as it is


def test_a_heading_is_the_metric_label_or_the_words_with_the_unit() -> None:
    assert metric_label("output_throughput") == "Output throughput (tok/s)"
    assert metric_label("median_ttft_ms") == "Median TTFT (ms)"
    assert column_label("output_throughput") == "Output throughput (tok/s)"
    assert column_label("p99_itl_ms") == "p99 ITL (ms)"
    assert column_label("available_gpu_mem_gb") == "Available GPU mem (GB)"
    assert column_label("peak_gpu_used_mib") == "Peak GPU used (MiB)"
    assert column_label("ready_after_s") == "Ready after (s)"
    assert column_label("headline at") == "headline at"  # already words


def test_the_confounder_warning_names_each_extra_field_once() -> None:
    """Issue 24: "More differs than the knob under test (A, B): A, B"."""
    both = ["server.cuda_graphs", "server.mem_fraction_static"]
    text = confounder_sentence(both, both)  # nothing declared: the same two lists
    assert text.count("cuda_graphs") == 1 and text.count("mem_fraction_static") == 1
    assert "none is declared" in text and "server." not in text
    text = confounder_sentence(["server.cuda_graphs"], ["server.dtype"])
    assert text.startswith("More differs than the knob under test (cuda_graphs): **dtype** differs")


def test_memory_headroom_reads_a_row_per_fact_and_a_column_per_run() -> None:
    """Nine snake_case columns cut the last one off at 1440 px (issue 24 item 5)."""
    frame = pd.DataFrame(
        {
            "run_id": [f"arm {i}" for i in range(5)],
            "kv_cache_tokens": [5_952_378.0] * 5,
            "available_gpu_mem_gb": [12.345] * 5,
            "headroom_gb": [None] * 5,
            "headroom_from": ["server facts"] * 5,
        }
    )
    tables = headroom_table(frame)
    assert [list(t.columns) for t in tables] == [["arm 0", "arm 1", "arm 2"], ["arm 3", "arm 4"]]
    first = tables[0]
    assert list(first.index) == [
        "KV pool (tokens)",
        "Available GPU mem (GB)",
        "Memory headroom (GB)",
        "Headroom from",
    ]
    assert first.loc["KV pool (tokens)", "arm 0"] == "5,952,378"
    assert first.loc["Available GPU mem (GB)", "arm 1"] == "12.35"
    assert first.loc["Memory headroom (GB)", "arm 2"] == "—"


def test_a_sortable_table_shows_dashes_and_readable_numbers_but_keeps_the_values() -> None:
    """The Runs table showed ``None`` in empty cells (issue 24 item 5)."""
    frame = pd.DataFrame(
        {
            "run_id": ["r1", "r2"],
            "output_throughput": [8633.21, None],
            "error_rate": [0.0125, None],
            "started_at": ["2026-12-01T04:14:12.345+00:00", None],
            "experiment": ["experiment?experiment=exp-1", None],
        }
    )
    styled = readable_table(frame, {"run_id": "run"}, keep=["experiment"])
    assert list(styled.data.columns) == [
        "run",
        "Output throughput (tok/s)",
        "Error rate",
        "Started at",
        "experiment",
    ]
    assert styled.data["Output throughput (tok/s)"].iloc[0] == 8633.21  # sorts as a number
    html = styled.to_html()
    assert "8,633" in html and "1.2%" in html and "None" not in html and "nan" not in html
    assert ".345" not in html  # to the second
    assert "experiment?experiment=exp-1" in html  # the link column as it is
