"""The ``Serving Benchmark Result`` summary table that SGLang's ``bench_serving`` and vLLM's
``benchmark_serving`` / ``vllm bench serve`` print, pasted as text.

Rows are read by label, never by position: rows may be missing, added, reordered, padded
with trailing spaces, prefixed (``# ``, ``> ``, ``| ``) or written as a markdown table row.
A table starts at its ``=== Serving Benchmark Result ===`` header, or, without a header, at
the first known row; it ends at the closing ``=====`` line, at a line that is not a row,
or when a row repeats (a second result pasted right after the first). Lines printed
before a table (``#Input tokens: N``, vLLM's ``Traffic request rate`` / ``Burstiness
factor`` / ``Maximum request concurrency``) are its ``preamble``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from core.interop.importers.result import BenchResult
from core.interop.importers.vocab import (
    CONTEXT_KEYS,
    EXTRA_KEYS,
    PREAMBLE_KEYS,
    TABLE_METRICS,
    TABLE_POINT,
    count,
    is_stat_key,
    label_key,
    metric_for_key,
    number,
    parse_value,
    rate,
)

__all__ = ["parse_tables"]

_PREFIX_RE = re.compile(r"^[\s#>|*]{0,20}")
_SUFFIX_RE = re.compile(r"[\s|]{0,40}$")
_HEADER_RE = re.compile(r"={2,80}\s{0,5}Serving Benchmark Result\s{0,5}={2,80}", re.IGNORECASE)
_CLOSE_RE = re.compile(r"={10,200}")
_SECTION_RE = re.compile(r"-{2,80}\s{0,3}[A-Za-z][\w ().,/-]{0,60}?\s{0,3}-{2,80}|-{10,200}")
_ROW_RE = re.compile(r"(?P<label>[A-Za-z][^:|]{0,119}?)\s{0,5}:(?P<value>[^:]{0,200})")
_CELL_SPLIT_RE = re.compile(r"\s{0,40}\|\s{0,40}")
_RULE_CHARS = frozenset("-:| ")

_SGLANG_MARKERS = (
    "backend",
    "total_generated_tokens_retokenized",
    "concurrency",
    "mean_e2e_latency_ms",
    "median_e2e_latency_ms",
    "input_token_throughput_tok_s",
)
_VLLM_MARKERS = (
    "failed_requests",
    "request_rate_configured_rps",
    "mean_e2el_ms",
    "median_e2el_ms",
    "p99_e2el_ms",
)


@dataclass
class _Row:
    line: int  # 1-based
    label: str
    key: str
    value: Any


@dataclass
class _Table:
    line: int
    headered: bool
    preamble: dict[str, Any]
    rows: list[_Row] = field(default_factory=list)

    def has(self, key: str) -> bool:
        return any(r.key == key for r in self.rows)


def _clean(line: str) -> str:
    line = line[:2000]
    return _SUFFIX_RE.sub("", _PREFIX_RE.sub("", line, count=1), count=1)


def _row(line: str) -> tuple[str, Any] | None:
    """(label, value) of a ``Label:  value`` line or a markdown ``| Label | value |`` row."""
    if "|" in line:
        cells = [c for c in _CELL_SPLIT_RE.split(line) if c]
        if len(cells) == 2 and cells[0][:1].isalpha() and not set(cells[1]) <= {"-", ":"}:
            return cells[0].rstrip(": "), parse_value(cells[1])
        return None
    m = _ROW_RE.fullmatch(line)
    if m is None:
        return None
    return m["label"].strip(), parse_value(m["value"])


def _known(key: str) -> bool:
    return (
        key in TABLE_METRICS
        or key in TABLE_POINT
        or key in CONTEXT_KEYS
        or key in EXTRA_KEYS
        or is_stat_key(key)
    )


class _Scan:
    """parse_tables' state: the table being read, the preamble before it, what was read."""

    def __init__(self) -> None:
        self.results: list[BenchResult] = []
        self.consumed: set[int] = set()
        self.notes: list[str] = []
        self.preamble: dict[str, Any] = {}
        self.preamble_lines: list[int] = []
        self.cur: _Table | None = None

    def close(self) -> None:
        cur = self.cur
        if cur is None:
            return
        if any(r.key not in CONTEXT_KEYS for r in cur.rows):
            self.results.append(_result(cur))
        elif cur.headered:
            self.notes.append(f"line {cur.line}: a result header with no rows under it")
        self.cur = None

    def open(self, line_no: int, headered: bool) -> _Table:
        """A table from 1-based ``line_no``: it takes the preamble read so far."""
        self.cur = _Table(line_no, headered, self.preamble)
        self.preamble, self.preamble_lines = {}, []
        return self.cur

    def frame(self, i: int, line: str) -> bool:
        """A header, closing rule, section title or markdown rule: True when ``line`` is one."""
        if "Benchmark Result" in line and _HEADER_RE.fullmatch(line):
            self.close()
            self.open(i + 1, True)
            self.consumed.add(i)
            return True
        if line[0] == "=" and _CLOSE_RE.fullmatch(line):
            if self.cur is not None:
                self.consumed.add(i)
                self.close()
            return True
        if (
            line[:2] == "--"
            and line[-2:] == "--"
            and len(line) <= 200
            and _SECTION_RE.fullmatch(line)
        ):
            if self.cur is not None:
                self.consumed.add(i)
            return True
        return "|" in line and set(line) <= _RULE_CHARS  # a markdown table's |---|---| rule

    def row(self, i: int, line: str) -> None:
        parsed = _row(line)
        if parsed is None:
            self.close()  # text that is not a row ends a table (a truncated paste, a log line)
            return
        label, value = parsed
        key = label_key(label)
        if self.cur is not None and self.cur.has(key):
            self.close()  # the same row again: the next result, pasted without its header
        cur = self.cur
        if cur is None:
            if key in PREAMBLE_KEYS:
                self.preamble[key] = value
                self.preamble_lines.append(i)
                self.consumed.add(i)
                return
            if not _known(key):
                return  # a "label: value" line outside any table (log text, prose)
            cur = self.open(i + 1, False)
        elif not _known(key) and not cur.headered:
            self.close()  # a headerless table ends at the first line that is not one of its rows
            return
        cur.rows.append(_Row(i + 1, label, key, value))
        self.consumed.add(i)


def parse_tables(lines: list[str], skip: set[int]) -> tuple[list[BenchResult], set[int], list[str]]:
    """Every summary table in ``lines`` (0-based indices in ``skip`` are already read as
    something else). Returns the results, the indices read, and file-level notes."""
    scan = _Scan()
    for i, raw in enumerate(lines):
        if i in skip:
            scan.close()
            continue
        line = _clean(raw)
        if line and not scan.frame(i, line):
            scan.row(i, line)
    scan.close()
    consumed = scan.consumed
    if scan.preamble_lines:
        consumed -= set(scan.preamble_lines)  # a preamble with no table after it is not a result
    return scan.results, consumed, scan.notes


def _tool(table: _Table) -> tuple[str, str]:
    keys = {r.key for r in table.rows}
    labels = {r.label for r in table.rows}
    sglang = sum(k in keys for k in _SGLANG_MARKERS) + ("Total token throughput (tok/s)" in labels)
    vllm = sum(k in keys for k in _VLLM_MARKERS) + ("Total Token throughput (tok/s)" in labels)
    if sglang > vllm:
        return "sglang-bench-table", "sglang bench_serving"
    if vllm > sglang:
        return "vllm-bench-table", "vllm benchmark_serving"
    return "bench-table", "unknown benchmark tool (bench_serving-style table)"


def _result(table: _Table) -> BenchResult:
    fmt, tool = _tool(table)
    r = BenchResult(format=fmt, tool=tool, line=table.line, preamble=dict(table.preamble))
    for row in table.rows:
        r.values.setdefault(row.key, row.value)
        where = f"line {row.line} ({row.label!r})"
        metric = metric_for_key(row.key, table=True)
        if metric is not None:
            n = number(row.value)
            if n is None and row.value is not None:
                r.not_understood.append(f"{where}: {row.value!r} is not a number")
            elif metric not in r.metrics or r.metrics[metric] is None:
                r.metrics[metric] = n
            elif r.metrics[metric] != n:
                r.not_understood.append(
                    f"{where}: a second value for {metric} ({r.metrics[metric]} was read first)"
                )
        elif row.key in TABLE_POINT:
            _point_row(r, TABLE_POINT[row.key], row.value, where)
        elif row.key in CONTEXT_KEYS:
            r.context[CONTEXT_KEYS[row.key]] = row.value
        elif row.key in EXTRA_KEYS or is_stat_key(row.key):
            r.extra[row.key] = row.value
        else:
            r.not_understood.append(f"{where}: not a row ServeLab knows; kept as read")
    # vLLM prints the traffic settings before its table.
    pre = table.preamble
    if "request_rate" not in r.point and "traffic_request_rate" in pre:
        _point_row(r, "request_rate", pre["traffic_request_rate"], "preamble")
    if "concurrency" not in r.point and "max_request_concurrency" in pre:
        _point_row(r, "concurrency", pre["max_request_concurrency"], "preamble")
    if "burstiness_factor" in pre:
        r.extra.setdefault("burstiness_factor", pre["burstiness_factor"])
    r.derive_counts()
    return r


def _point_row(r: BenchResult, name: str, value: Any, where: str) -> None:
    if name == "request_rate":
        parsed = rate(value)
        if parsed is None:
            r.not_understood.append(
                f"{where}: request rate {value!r} is not requests/s or "
                "inf (ServeLab cannot place it)"
            )
        else:
            r.point["request_rate"] = parsed
    elif name == "concurrency":
        if value is None:
            r.point["concurrency"] = None  # "not set": unbounded
        elif (c := count(value)) is not None:
            r.point["concurrency"] = c
        else:
            r.not_understood.append(f"{where}: concurrency {value!r} is not a whole number")
