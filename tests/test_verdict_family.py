"""The verdict's family over card rows: Holm over the confirmatory contrasts, BH over the
exploratory cells; a better / worse the family does not confirm reads "alone", never
inconclusive, and never enters Regressions."""

from __future__ import annotations

from core.analysis.card_row import CardRow
from core.analysis.verdict_family import (
    declare_family,
    family_line,
    regressions,
    worse_alone_lines,
)
from core.analysis.words import read_difference


def _row(change: float, low: float, high: float, family: str = "confirmatory") -> CardRow:
    reading = read_difference("output_throughput", change, low, high, 3)
    return CardRow(
        metric="output_throughput",
        concurrency=64,
        point="c=64",
        arm="off",
        baseline="on",
        base_mean=100.0,
        mean=100.0 * (1 + change),
        change=change,
        low=low,
        high=high,
        n=3,
        n_base=3,
        verdict=reading.word,
        confirmed=True,
        reading=reading,
        family=family,  # type: ignore[arg-type]
    )


def test_a_worse_holm_does_not_confirm_reads_worse_alone_and_is_no_regression() -> None:
    # the graphs demo's c=64 contrast beside five that changed nothing
    rows = [_row(-0.655, -0.816, -0.353)] + [_row(0.0, -0.02, 0.02) for _ in range(5)]
    out = declare_family(rows)
    assert out[0].verdict == "worse alone" and not out[0].reading.coloured
    head = "worse alone, not confirmed over the family (Holm over 6 comparisons); about 4"
    assert out[0].word_text().startswith(head)
    assert regressions(out) == []
    assert "Holm over 6 comparisons" in (family_line(out) or "")


def test_a_summary_without_regressions_still_names_a_confirmatory_worse_alone() -> None:
    """The 8B version A/B: -5.1 % at c=64, its own interval below zero, Holm over three not
    confirming it. "No regression" alone would read as "nothing moved"; the note names it
    with the trials that would confirm it, and nothing else (not a confirmed regression,
    not an exploratory cell, not a better alone)."""
    rows = [_row(-0.051, -0.087, -0.015), _row(0.0, -0.02, 0.02), _row(0.02, 0.001, 0.04)]
    rows += [_row(-0.307, -0.46, -0.112, "exploratory")]
    rows += [_row(0.0, -0.3, 0.3, "exploratory") for _ in range(21)]
    out = declare_family(rows)
    assert regressions(out) == []
    (line,) = worse_alone_lines(out)
    assert line.startswith("output throughput at c=64: -5.1%")
    assert "worse alone, not confirmed over the family (Holm over 3 comparisons)" in line
    assert "trials would confirm it at this noise" in line
    # a confirmed regression is the Regressions paragraph's, never this note's
    confirmed = declare_family([_row(-0.5, -0.51, -0.49)] + [_row(0.0, -0.02, 0.02)] * 2)
    assert worse_alone_lines(confirmed) == [] and regressions(confirmed) != []


def test_a_worse_holm_confirms_stays_worse_and_is_a_regression() -> None:
    rows = [_row(-0.5, -0.51, -0.49)] + [_row(0.0, -0.02, 0.02) for _ in range(5)]
    out = declare_family(rows)
    assert out[0].verdict == "worse" and regressions(out) == [out[0]]


def test_an_exploratory_cell_bh_does_not_confirm_names_its_cells() -> None:
    rows = [_row(-0.307, -0.46, -0.112, "exploratory")]
    rows += [_row(0.0, -0.3, 0.3, "exploratory") for _ in range(21)]
    out = declare_family(rows)
    head = "worse alone, not confirmed over the exploratory cells (Benjamini–Hochberg over 22"
    assert out[0].word_text().startswith(head)
    assert "inconclusive" not in out[0].word_text()


def test_a_card_without_intervals_says_how_many_runs_it_has_and_what_would_give_one() -> None:
    """The team change ran 2 trials per arm: "one run per arm" would be false."""
    from dataclasses import replace

    from core.analysis.verdict_family import no_interval_text

    two = replace(_row(3.58, 0, 0), n=2, n_base=2, low=None, high=None, confirmed=False)
    text = no_interval_text([two])
    assert text.startswith("2 trials per arm, fewer than the 3 an interval needs")
    assert "1 more trial would give one" in text and "One run" not in text
    one = replace(two, n=1, n_base=1)
    assert no_interval_text([one]).startswith("One run per arm: no interval")
