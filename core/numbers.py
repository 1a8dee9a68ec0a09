"""THE display vocabulary for numbers: what counts as a number, and how a number, a signed
percentage, a percent interval, a duration, a memory size, a token count and a trial number
read, on every page, in the CLI, the HTML report and the exports.

One convention each, so a reader meets a figure spelled one way wherever it is shown:

* a number: three significant digits, thousands separators, "—" when there is none;
* a change: signed, one decimal, the percent sign written on (``+7.8%``);
* an interval of changes: ``+3.1…+84.2%``;
* a duration: ``340 ms``, ``12.5 s``, ``2 min 35 s``, ``3 h 05 min``;
* a trial: counted from 1 (stored 0-based).

Sentences stay with the modules that compose them; they take their numbers from here. A
base module: imports nothing from ServeLab.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = [
    "EMPTY",
    "as_number",
    "count_text",
    "duration_text",
    "gb_text",
    "is_number",
    "minutes_text",
    "number_text",
    "pct_interval_text",
    "pct_number",
    "pct_text",
    "share_text",
    "short_count_text",
    "signed_text",
    "token_span_text",
    "trial_number",
    "trial_text",
]

EMPTY = "—"  # a cell or figure with no value: never 0, never "nan", never "None"


def as_number(value: Any) -> float | None:
    """THE "is this a number" rule: an int or a float, finite; a bool (``True == 1`` in
    Python), NaN, an infinity, text or None is not (None: unknown, never 0)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def is_number(value: Any) -> bool:
    """``as_number(value) is not None``: NaN is not a number."""
    return as_number(value) is not None


def number_text(value: Any, unit: str = "") -> str:
    """THE number as a reader sees it: three significant digits by magnitude, never fewer
    than the whole part (127.46550430199999 -> "127", 12.345 -> "12.3", 0.012345 ->
    "0.0123", 1234.56 -> "1,235"), thousands separators, a whole int in full (5,952,378);
    ``unit`` after a space. "—" for None, NaN, infinities, text and bools."""
    x = as_number(value)
    if x is None:
        return EMPTY
    if isinstance(value, int) or (x.is_integer() and abs(x) >= 1):
        text = f"{x:,.0f}"
    elif x == 0:
        text = "0"
    else:
        # digits after the point that show three significant ones, counted again after
        # rounding (99.96 rounds to 100: "100", not "100.0")
        decimals = max(0, 2 - math.floor(math.log10(abs(x))))
        rounded = round(x, decimals)
        if rounded != 0:
            decimals = max(0, 2 - math.floor(math.log10(abs(rounded))))
        text = f"{x:,.{decimals}f}"
        if "." in text:  # 0.5, not 0.500: no digit that says nothing
            text = text.rstrip("0").rstrip(".")
    return f"{text} {unit}" if unit else text


def signed_text(value: Any, unit: str = "", decimals: int | None = None) -> str:
    """A difference in its own unit, signed: ``+306 MiB``, ``-0.42 GB`` (by default whole
    from 10 up, two decimals below; else ``decimals``); "—" when it is no number."""
    x = as_number(value)
    if x is None:
        return EMPTY
    if decimals is None:
        decimals = 0 if abs(x) >= 10 else 2
    text = f"{x:+,.{decimals}f}"
    return f"{text} {unit}" if unit else text


def pct_number(fraction: Any, decimals: int | None = 1) -> str:
    """A relative change in percent, signed, without the sign: ``+7.8``. ``decimals=None``:
    as a grid cell says it, short (whole from 9.5 % up, one decimal below). "—" when it is
    no number."""
    x = as_number(fraction)
    if x is None:
        return EMPTY
    if decimals is None:
        decimals = 0 if abs(x) >= 0.095 else 1
    return f"{x * 100:+.{decimals}f}"


def pct_text(fraction: Any, decimals: int | None = 1) -> str:
    """A relative change (a fraction: 0.078) as THE signed percentage: ``+7.8%``; "—" when
    it is no number (``decimals`` as ``pct_number``)."""
    text = pct_number(fraction, decimals)
    return text if text == EMPTY else text + "%"


def pct_interval_text(low: Any, high: Any) -> str:
    """An interval of relative changes (fractions): ``+3.1…+84.2%``; "—" when either end
    is no number."""
    lo, hi = pct_number(low), pct_number(high)
    return EMPTY if EMPTY in (lo, hi) else f"{lo}…{hi}%"


def share_text(fraction: Any, decimals: int = 0) -> str:
    """A share of a whole (a fraction: 0.85), unsigned: ``85%``; "—" when it is no number."""
    x = as_number(fraction)
    return EMPTY if x is None else f"{x * 100:.{decimals}f}%"


def duration_text(seconds: Any) -> str:
    """A measured duration in the unit that fits: ``340 ms``, ``12.5 s``, ``2 min 35 s``,
    ``3 h 05 min``; "" when there is none (a duration not yet known reads as nothing)."""
    s = as_number(seconds)
    if s is None:
        return ""
    if s < 1:
        return f"{s * 1000:.0f} ms"
    if s < 120:
        return f"{s:.1f} s"
    if s < 7200:
        return f"{int(s // 60)} min {int(s % 60):02d} s"
    return f"{int(s // 3600)} h {int(s % 3600 // 60):02d} min"


def minutes_text(seconds: float) -> str:
    """A rough duration as an estimate says it: whole seconds below two minutes, else whole
    minutes (an estimate claims no more digits than it has)."""
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def gb_text(value: Any, unit: bool = True) -> str:
    """A memory size in GB to two decimals: ``12.34 GB``; "—" when it is no number."""
    x = as_number(value)
    if x is None:
        return EMPTY
    return f"{x:,.2f} GB" if unit else f"{x:,.2f}"


def count_text(value: Any, unit: str = "") -> str:
    """A count (tokens, requests, MiB) whole, with thousands separators: ``12,345 tokens``;
    "—" when it is no number."""
    x = as_number(value)
    if x is None:
        return EMPTY
    text = f"{x:,.0f}"
    return f"{text} {unit}" if unit else text


def short_count_text(value: Any) -> str:
    """A large count said short, as a chart note or a sentence says a KV pool: ``5.50 M``,
    ``454 K`` (from 10,000), else whole with separators (``1,234``); "—" when no number."""
    x = as_number(value)
    if x is None:
        return EMPTY
    return f"{x / 1e6:.2f} M" if x >= 1e6 else f"{x / 1e3:.0f} K" if x >= 1e4 else f"{x:,.0f}"


def trial_number(index0: Any) -> Any:
    """A trial's number as a reader counts it, from 1 (stored from 0); a value that is no
    whole number is returned as it is (a closing run has no trial)."""
    x = as_number(index0)
    return int(x) + 1 if x is not None and x.is_integer() else index0


def trial_text(index0: Any) -> str:
    """A trial as a reader counts it, from 1 (stored from 0): ``trial 1``."""
    return f"trial {trial_number(index0)}"


def token_span_text(first0: int, last0: int | None = None) -> str:
    """Generated tokens as a reader counts them, from 1 (stored from 0, as trials are):
    ``token 1``, ``tokens 2–3``."""
    last0 = first0 if last0 is None else last0
    if first0 == last0:
        return f"token {first0 + 1}"
    return f"tokens {first0 + 1}–{last0 + 1}"
