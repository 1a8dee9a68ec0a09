"""core.numbers: THE display vocabulary for numbers, one convention each."""

from __future__ import annotations

import math

import pytest

from core.numbers import (
    EMPTY,
    as_number,
    count_text,
    duration_text,
    gb_text,
    is_number,
    minutes_text,
    number_text,
    pct_interval_text,
    pct_number,
    pct_text,
    share_text,
    short_count_text,
    signed_text,
    trial_text,
)


@pytest.mark.parametrize("value", [None, math.nan, math.inf, -math.inf, True, "12", [1]])
def test_nan_and_the_rest_are_no_number(value: object) -> None:
    assert as_number(value) is None and not is_number(value)


def test_a_finite_int_or_float_is_a_number() -> None:
    assert as_number(3) == 3.0 and as_number(-0.5) == -0.5 and is_number(0)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (127.46550430199999, "127"),
        (12.345, "12.3"),
        (0.012345, "0.0123"),
        (1234.56, "1,235"),
        (5952378, "5,952,378"),
        (99.96, "100"),
        (0.5, "0.5"),
        (0, "0"),
        (None, EMPTY),
        (math.nan, EMPTY),
    ],
)
def test_number_text_three_significant_digits(value: object, text: str) -> None:
    assert number_text(value) == text


def test_one_signed_percent_convention() -> None:
    assert pct_text(0.078) == "+7.8%"
    assert pct_text(-0.4512) == "-45.1%"
    assert pct_text(math.nan) == EMPTY
    assert pct_interval_text(0.031, 0.842) == "+3.1…+84.2%"
    assert pct_interval_text(None, 0.1) == EMPTY
    assert pct_number(0.44, decimals=None) == "+44" and pct_number(0.012, None) == "+1.2"
    assert share_text(0.85) == "85%" and share_text(0.0125, 1) == "1.2%"


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.34, "340 ms"), (12.5, "12.5 s"), (155, "2 min 35 s"), (185, "3 min 05 s"),
     (3 * 3600 + 300, "3 h 05 min"), (None, "")],
)  # fmt: skip
def test_one_duration_convention(seconds: float | None, text: str) -> None:
    assert duration_text(seconds) == text


def test_estimates_sizes_counts_and_differences() -> None:
    assert minutes_text(95) == "95 s" and minutes_text(600) == "10 min"
    assert gb_text(12.345) == "12.35 GB" and gb_text(1.5, unit=False) == "1.50"
    assert count_text(123456, "tokens") == "123,456 tokens" and count_text(None) == EMPTY
    assert signed_text(306.4, "MiB") == "+306 MiB" and signed_text(-0.4213, "GB") == "-0.42 GB"


def test_a_large_count_said_short() -> None:
    assert short_count_text(5_498_295) == "5.50 M" and short_count_text(479_000) == "479 K"
    assert short_count_text(4096) == "4,096" and short_count_text(None) == EMPTY


def test_trials_count_from_one() -> None:
    assert trial_text(0) == "trial 1" and trial_text(2) == "trial 3"
