"""Table cells in words: what a reader sees of a value (pages, the HTML report);
exports keep the raw values."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import pandas as pd
from pandas.io.formats.style import Styler

from core.analysis.roles import field_name
from core.config import knob_text
from core.metric_info import METRICS, metric_label, metric_unit
from core.numbers import EMPTY, count_text, gb_text, number_text, share_text

__all__ = [
    "CARD_COLUMNS",
    "CARD_LEGEND",
    "DELTA_LEGEND",
    "EMPTY",
    "cell_text",
    "column_groups",
    "column_label",
    "confounder_sentence",
    "headroom_table",
    "number_text",
    "readable_cells",
    "readable_table",
    "time_text",
]

# Column-name endings and the unit each names (``weight_mem_gb`` -> "Weight mem (GB)").
_UNIT_SUFFIXES = {
    "_gb": "GB",
    "_mib": "MiB",
    "_ms": "ms",
    "_s": "s",
    "_tokens": "tokens",
    "_tok_s": "tok/s",
}
# Words a column name spells as letters (kv -> KV).
_ACRONYMS = {
    "cuda": "CUDA",
    "kv": "KV",
    "gpu": "GPU",
    "ttft": "TTFT",
    "itl": "ITL",
    "tpot": "TPOT",
    "e2e": "E2E",
}

# The most point columns one summary-card table holds. At 400 px a card of c=1 … c=64 and
# start-up (8 columns) showed c=1 … c=16 and cut c=32 and c=64 off with no scroll hint;
# 4 columns beside the metric names fit there.
CARD_COLUMNS = 4

# The marks of the four words of core.analysis.words (the rule that decides them lives
# there, and the family's correction in core.analysis.card / family).
CARD_LEGEND = (
    "▲ better / ▼ worse by each metric's direction (green / red): the interval lies beyond "
    "zero and the contrast survives its family (Holm for the confirmatory contrasts, "
    "Benjamini–Hochberg for the rest); ≈ equivalent: the interval lies inside the plan's "
    "equivalence margin; △ better alone / ▽ worse alone: the interval alone lies beyond zero, "
    "its family does not confirm it (never coloured); ? inconclusive: the interval is too "
    "wide for either; · unconfirmed: no interval (one run per "
    "arm), never coloured; cost: memory a knob is meant to consume; n/t = not tested by this "
    "workload: the arm differs only in a knob whose resource the load never reached."
)
DELTA_LEGEND = (
    'One run each, so no interval: every difference reads "unconfirmed", never better or '
    "worse, however large (only an interval over trials, on an experiment's card, can say "
    "that)."
)


def time_text(stamp: Any) -> str:
    """A stored ISO timestamp (UTC, with milliseconds) as a reader sees it: this host's
    local time, to the second ("2026-12-01 04:14:12"); "—" when unset or unreadable."""
    if not isinstance(stamp, str) or not stamp:
        return EMPTY
    try:
        when = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return stamp
    return when.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def _is_share(column: str) -> bool:
    """A column of fractions, shown as a percentage (``error_rate`` 0.0125 -> "1.2%")."""
    return column == "error_rate" or column.endswith(("_share", "hit_rate"))


def column_label(column: str) -> str:
    """A column name as a heading: a metric's label (``core.metrics.metric_label``:
    "Output throughput (tok/s)"), else its words with the unit its ending names
    (``weight_mem_gb`` -> "Weight mem (GB)", ``kv_cache_tokens`` -> "KV cache (tokens)");
    a heading already in words is kept; a share's without a unit (its cells say "%")."""
    if _is_share(column):
        return metric_label(column).removesuffix(f" ({metric_unit(column)})")
    if column in METRICS or (column.endswith("_ms") and metric_label(column) != column):
        return metric_label(column)
    if "_" not in column:
        return column
    unit = ""
    for suffix, name in _UNIT_SUFFIXES.items():
        if column.endswith(suffix):
            column, unit = column[: -len(suffix)], name
            break
    words = " ".join(_ACRONYMS.get(w, w) for w in column.split("_"))
    words = words[:1].upper() + words[1:]
    return f"{words} ({unit})" if unit else words


def cell_text(value: Any, column: str = "") -> str:
    """One cell in words, by its column (the rule of ``readable_cells`` and
    ``readable_table``): on / off for booleans, "—" where unset, a fraction column
    (``error_rate``, ``*_share``) as a percentage, GB to 2 decimals, MiB and tokens whole
    and grouped, every other number by ``number_text``, timestamps (``*_at``) by
    ``time_text``, text as it is, in full (a model path is not shortened: two paths may
    share their last part)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return EMPTY
    if isinstance(value, bool):
        return knob_text(value)
    if isinstance(value, int | float):
        if _is_share(column):
            return share_text(value, 1)
        if column.endswith("_gb"):
            return gb_text(value, unit=False)
        if column.endswith(("_mib", "tokens")):
            return count_text(value)
        return number_text(value)
    if column.endswith("_at"):
        return time_text(value)
    if isinstance(value, list | tuple):  # tags, a server's CUDA-graph batch sizes
        return ", ".join(map(str, value)) or EMPTY
    return str(value)


def readable_cells(frame: pd.DataFrame) -> pd.DataFrame:
    """A table as a reader sees it (pages, the HTML report), each cell by ``cell_text``.
    Exports keep the raw values."""
    return frame.apply(lambda col: col.map(lambda v: cell_text(v, str(col.name))))


def readable_table(
    frame: pd.DataFrame, headings: dict[str, str] | None = None, keep: Sequence[str] = ()
) -> Styler:
    """A table to sort and select in (``st.dataframe``): each cell shown by ``cell_text``
    while the values stay numbers (a column sorts 9 before 10), "—" where empty, headings
    by ``column_label`` unless ``headings`` names them; ``keep``: columns shown as they are
    (a link column: the page's column config draws it)."""
    names = {c: (headings or {}).get(str(c)) or column_label(str(c)) for c in frame.columns}
    formats = {
        names[c]: (lambda v, c=str(c): cell_text(v, c)) for c in frame.columns if c not in keep
    }
    return frame.rename(columns=names).style.format(formats, na_rep=EMPTY)


def _and(names: Sequence[str]) -> str:
    bold = [f"**{n}**" for n in names]
    return bold[0] if len(bold) == 1 else ", ".join(bold[:-1]) + " and " + bold[-1]


def confounder_sentence(knobs: Sequence[str], extra: Sequence[str]) -> str:
    """The warning that more differs than the knob under test, naming each extra field
    once (``knobs``: the knobs under test, ``core.analysis.roles.knob_fields``; ``extra``:
    ``core.analysis.diff.confounders``). With no knob declared both lists are the same
    fields: then they are named once, as what differs."""
    declared = [k for k in knobs if k not in extra]
    others = [field_name(f) for f in extra]
    if not declared:
        what = (
            f"none is declared, and {_and(others)} both differ"
            if len(others) == 2
            else f"none is declared, and {len(others)} fields differ: {_and(others)}"
        )
        return (
            f"More differs than the knob under test: {what}. A difference in the numbers "
            "cannot be pinned on one knob."
        )
    under = ", ".join(field_name(k) for k in declared)
    verb = "differs" if len(others) == 1 else "differ"
    return (
        f"More differs than the knob under test ({under}): {_and(others)} {verb} too. A "
        "difference in the numbers cannot be pinned on one knob."
    )


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


def headroom_table(frame: pd.DataFrame, first: str = "run") -> list[pd.DataFrame]:
    """The memory headroom table (``core.analysis.memory.memory_headroom``: a row per run)
    turned to read: a row per fact with its heading in words (``column_label``), a column
    per run or arm (``first``: what its first column names), in groups of at most
    ``CARD_COLUMNS`` so that no column leaves a narrow screen. Nine facts as columns
    cut the last one off at 1440 px; a handful of runs as columns fit at 400."""
    cells = readable_cells(frame).set_index(frame.columns[0])
    cells.index.name = first
    facts = cells.T
    facts.index = [column_label(str(c)) for c in facts.index]
    return [facts[g] for g in column_groups([str(c) for c in facts.columns])]
