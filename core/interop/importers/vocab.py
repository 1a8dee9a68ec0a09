"""The vocabulary of benchmark outputs: row labels and JSON keys, and what ServeLab calls them.

Every row of a ``Serving Benchmark Result`` table is keyed by the snake_case of its label
(the shared fixtures' convention: ``(s)``/``(ms)``/``(req/s)``/``(tok/s)`` become ``_s``,
``_ms``, ``_req_s``, ``_tok_s``; the ``reqeuest`` typo and vLLM's ``Maximum request
concurrency`` both read ``max_request_concurrency``). A key then maps to one of:

* a ServeLab metric (``core.metrics`` names: ``output_throughput``, ``median_ttft_ms``...),
* a point field (``concurrency``, ``request_rate``, ``input_len``, ``output_len``,
  ``num_prompts``),
* run context (``backend``, ``model``, ``dataset_name``...),
* a known value with no ServeLab name (kept as read, under ``extra``),
* nothing known: reported as not understood (and still kept as read).

Values are read literally: ``not set``/``None``/``null`` -> None, ``inf``/``Infinity`` ->
the string ``"inf"`` (strict JSON has no infinity), numbers as int or float, anything
else as the text. Nothing here raises.
"""

from __future__ import annotations

import math
import re
from typing import Any

from core.metrics import LATENCY_FAMILIES, STAT_NAMES, compute_point_metrics

__all__ = [
    "CONTEXT_KEYS",
    "EXTRA_KEYS",
    "JSON_ARRAY_KEYS",
    "JSON_CONTEXT_KEYS",
    "JSON_METRICS",
    "METRIC_KEYS",
    "PREAMBLE_KEYS",
    "TABLE_METRICS",
    "TABLE_POINT",
    "count",
    "is_stat_key",
    "json_safe",
    "label_key",
    "metric_for_key",
    "number",
    "parse_value",
    "rate",
]

# Every key of a launched run's point metrics, in core.metrics' order: an imported point
# has the same keys, None where the source does not state the value.
METRIC_KEYS: tuple[str, ...] = tuple(compute_point_metrics([]).keys())

# Table rows (by label key) -> ServeLab metric.
TABLE_METRICS: dict[str, str] = {
    "successful_requests": "completed",
    "failed_requests": "failed",
    "benchmark_duration_s": "duration_s",
    "total_input_tokens": "total_input_tokens",
    "total_generated_tokens": "total_output_tokens",
    "total_generated_tokens_retokenized": "total_output_tokens_retokenized",
    "request_throughput_req_s": "request_throughput",
    "input_token_throughput_tok_s": "input_throughput",
    "input_throughput_tok_s": "input_throughput",
    "output_token_throughput_tok_s": "output_throughput",
    "output_throughput_tok_s": "output_throughput",
    "total_token_throughput_tok_s": "total_throughput",
    "total_throughput_tok_s": "total_throughput",  # the old SGLang label
    "peak_output_token_throughput_tok_s": "max_output_tokens_per_s",
    "peak_concurrent_requests": "max_concurrent_requests",
    "concurrency": "concurrency",
}
# Table rows -> point field.
TABLE_POINT: dict[str, str] = {
    "traffic_request_rate": "request_rate",
    "request_rate_configured_rps": "request_rate",
    "request_rate": "request_rate",
    "max_request_concurrency": "concurrency",
}
CONTEXT_KEYS: dict[str, str] = {"backend": "backend"}
# Lines bench_serving / vLLM print before the table (``#Input tokens: N``; vLLM's traffic
# lines). Read only outside a table.
PREAMBLE_KEYS = frozenset(
    {
        "input_tokens",
        "output_tokens",
        "traffic_request_rate",
        "burstiness_factor",
        "max_request_concurrency",
    }
)
# Rows and keys that are understood but have no ServeLab metric: kept as read.
EXTRA_KEYS = frozenset(
    {
        "total_input_text_tokens",
        "total_input_vision_tokens",
        "accept_length",
        "request_goodput_req_s",
        "request_goodput",
        "burstiness_factor",
        "burstiness",
        "total_prompt_tokens",
        "total_cached_tokens",
        "cache_hit_rate_pct",
        "cache_hit_rate",
        "device_cached_tokens",
        "host_cached_tokens",
        "storage_cached_tokens",
        "goodput_slos_ms",
        "slo_attainment",
        "slo_attainment_by_metric",
        "cache_report",
        "rps_change_events",
        "ramp_up_strategy",
        "ramp_up_start_rps",
        "ramp_up_end_rps",
        "random_range_ratio",
        "sharegpt_output_len",
        "sharegpt_context_len",
        "input_tokens",
        "output_tokens",
    }
)

# JSON keys (SGLang --output-file JSONL, vLLM --save-result JSON) -> ServeLab metric.
JSON_METRICS: dict[str, str] = {
    "completed": "completed",
    "failed": "failed",
    "duration": "duration_s",
    "total_input_tokens": "total_input_tokens",
    "total_output_tokens": "total_output_tokens",
    "total_output_tokens_retokenized": "total_output_tokens_retokenized",
    "request_throughput": "request_throughput",
    "input_throughput": "input_throughput",
    "output_throughput": "output_throughput",
    "total_throughput": "total_throughput",
    "total_token_throughput": "total_throughput",
    "concurrency": "concurrency",
    "max_output_tokens_per_s": "max_output_tokens_per_s",
    "max_concurrent_requests": "max_concurrent_requests",
}
# JSON keys that describe the run or the load rather than a measurement.
JSON_CONTEXT_KEYS = frozenset(
    {
        "tag",
        "label",
        "backend",
        "endpoint_type",
        "dataset_name",
        "model_id",
        "tokenizer_id",
        "date",
        "num_prompts",
        "request_rate",
        "max_concurrency",
        "random_input_len",
        "random_output_len",
        "server_info",
    }
)
# Per-request detail arrays (--output-details / --save-detailed): not imported as records
# (they carry no send times), reported as such.
JSON_ARRAY_KEYS = frozenset(
    {"input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors"}
)

_FAMILY = {
    "ttft": "ttft",
    "tpot": "tpot",
    "itl": "itl",
    "e2e": "e2e",
    "e2el": "e2e",
    "e2e_latency": "e2e",
}
_STAT_RE = re.compile(
    r"(?P<stat>mean|median|std|max|min|p\d{1,3}(?:_\d{1,4})?)_"
    r"(?P<fam>ttft|tpot|itl|e2e_latency|e2el|e2e)_ms"
)
assert set(_FAMILY.values()) == set(LATENCY_FAMILIES)

_UNIT_SUBS = (
    ("(req/s)", " req_s "),
    ("(tok/s)", " tok_s "),
    ("(ms)", " ms "),
    ("(s)", " s "),
    ("(%)", " pct "),
    ("(rps)", " rps "),
)
_NON_WORD = re.compile(r"[^a-z0-9]+")


def label_key(label: str) -> str:
    """The snake_case key of a row label: ``Benchmark duration (s)`` ->
    ``benchmark_duration_s``; ``Max reqeuest concurrency`` and ``Maximum request
    concurrency`` -> ``max_request_concurrency``."""
    s = label.strip().lower()[:200]
    s = s.replace("reqeuest", "request")
    for old, new in _UNIT_SUBS:
        s = s.replace(old, new)
    s = _NON_WORD.sub("_", s).strip("_")
    if s == "maximum_request_concurrency":
        s = "max_request_concurrency"
    return s


def metric_for_key(key: str, table: bool) -> str | None:
    """The ServeLab metric a row key (``table``) or JSON key names; None if none does.
    Percentiles ServeLab does not compute (p50, p99.9, min) have no name."""
    direct = (TABLE_METRICS if table else JSON_METRICS).get(key)
    if direct is not None:
        return direct
    m = _STAT_RE.fullmatch(key)
    if m and m["stat"] in STAT_NAMES:
        return f"{m['stat']}_{_FAMILY[m['fam']]}_ms"
    return None


def is_stat_key(key: str) -> bool:
    """A latency statistic row/key, whether or not ServeLab has a name for it."""
    return _STAT_RE.fullmatch(key) is not None


_INT_RE = re.compile(r"[+-]?\d{1,18}")
_FLOAT_RE = re.compile(r"[+-]?(?:\d{1,18}\.\d{0,12}|\.\d{1,12}|\d{1,18})(?:[eE][+-]?\d{1,3})?")
_NUM_NOTE_RE = re.compile(r"(?P<num>[+-]?\d{1,18}(?:\.\d{0,12})?)\s*(?:\([^()]{0,80}\)|%)")
_NONE_WORDS = frozenset({"not set", "none", "null", "n/a", "na", "-", ""})
_INF_WORDS = {
    "inf": "inf",
    "+inf": "inf",
    "infinity": "inf",
    "+infinity": "inf",
    "-inf": "-inf",
    "-infinity": "-inf",
    "nan": "nan",
}


def parse_value(text: str) -> Any:
    """A table value as read: None for ``not set``/``None``; ``"inf"`` for inf/Infinity;
    int or float for a number (``1.0 (Poisson process)`` and ``12 %`` read their number);
    otherwise the text itself (stripped)."""
    s = text.strip()[:500]
    low = s.lower()
    if low in _NONE_WORDS:
        return None
    if low in _INF_WORDS:
        return _INF_WORDS[low]
    if _INT_RE.fullmatch(s):
        return int(s)
    if _FLOAT_RE.fullmatch(s):
        value = float(s)
        return value if math.isfinite(value) else ("inf" if value > 0 else "-inf")
    m = _NUM_NOTE_RE.fullmatch(s)
    if m:
        return float(m["num"]) if "." in m["num"] else int(m["num"])
    return s


def json_safe(value: Any) -> Any:
    """A parsed JSON value with non-finite floats as strings (``Infinity`` -> ``"inf"``),
    so it survives strict JSON and compares as the fixtures write it."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_safe(v) for v in value]
    return value


def number(value: Any) -> float | int | None:
    """A finite number, or None (bool, text, inf and nan are not measurements)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def rate(value: Any) -> float | str | None:
    """A request rate as stored in a point: a positive number, or ``"inf"``."""
    if value == "inf":
        return "inf"
    n = number(value)
    return float(n) if n is not None and n > 0 else None


def count(value: Any) -> int | None:
    """A positive whole count (concurrency, lengths, prompts), or None."""
    n = number(value)
    if n is None or n < 1 or (isinstance(n, float) and not n.is_integer()):
        return None
    return int(n)
