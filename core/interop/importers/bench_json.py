"""Benchmark results saved as JSON: SGLang ``bench_serving --output-file`` (one JSON line
appended per run, with the bare ``Infinity`` token Python writes for an infinite request
rate) and vLLM ``benchmark_serving --save-result`` / ``vllm bench serve`` (one object per
file, or one per line with ``--append-result``).

A JSON value may start at any line (JSONL, a pretty-printed object, an array of results,
results between other text); Python's decoder accepts ``Infinity``/``NaN``. An object is
a result when it holds at least two measurements ServeLab knows; any other JSON is
reported, not guessed at.
"""

from __future__ import annotations

import json
import re
from typing import Any

from core.interop.importers.result import BenchResult
from core.interop.importers.vocab import (
    EXTRA_KEYS,
    JSON_ARRAY_KEYS,
    JSON_CONTEXT_KEYS,
    count,
    is_stat_key,
    json_safe,
    metric_for_key,
    number,
    rate,
)

__all__ = ["parse_json"]

# Bytes the decoder may scan in failed attempts before the file is given up on as JSON.
_SCAN_BUDGET = 20_000_000
_MIN_MEASUREMENTS = 2
_GAP_RE = re.compile(r"[\s,]*")
_VLLM_KEYS = frozenset(
    {"model_id", "tokenizer_id", "endpoint_type", "burstiness", "date", "total_token_throughput"}
)
_SGLANG_KEYS = frozenset(
    {
        "server_info",
        "total_output_tokens_retokenized",
        "dataset_name",
        "random_input_len",
        "mean_e2e_latency_ms",
        "input_throughput",
    }
)


def _line_starts(text: str) -> list[int]:
    starts = [0]
    pos = text.find("\n")
    while pos != -1:
        starts.append(pos + 1)
        pos = text.find("\n", pos + 1)
    return starts


def _line_of(starts: list[int], offset: int) -> int:
    """0-based line index of a character offset."""
    lo, hi = 0, len(starts) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if starts[mid] <= offset:
            lo = mid
        else:
            hi = mid - 1
    return lo


def parse_json(text: str) -> tuple[list[BenchResult], set[int], list[str]]:
    """Every benchmark result held as JSON in ``text``. Returns the results, the 0-based
    indices of the lines read as JSON, and file-level notes."""
    decoder = json.JSONDecoder()
    starts = _line_starts(text)
    results: list[BenchResult] = []
    consumed: set[int] = set()
    notes: list[str] = []
    budget = _SCAN_BUDGET
    i = 0
    while i < len(starts):
        begin = starts[i]
        end_of_line = starts[i + 1] if i + 1 < len(starts) else len(text)
        line = text[begin:end_of_line]
        stripped = line.lstrip(" \t\ufeff")
        if not stripped.startswith(("{", "[")):
            i += 1
            continue
        offset = begin + (len(line) - len(stripped))
        chained = False  # a value right after the previous one (`{...}{...}`, `{...},{...}`)
        while True:
            try:
                obj, stop = decoder.raw_decode(text, offset)
            except json.JSONDecodeError as exc:
                budget -= max(exc.pos - offset, 1)
                if not chained and stripped.rstrip().endswith(("}", "]")):
                    notes.append(
                        f"line {i + 1}: looks like JSON but does not parse "
                        f"({exc.msg} at column {exc.colno})"
                    )
                break
            except (ValueError, RecursionError) as exc:  # huge integers, absurd nesting
                notes.append(f"line {i + 1}: JSON that cannot be read ({type(exc).__name__})")
                break
            first = _line_of(starts, offset)
            last = _line_of(starts, max(stop - 1, offset))
            consumed.update(range(first, last + 1))
            _collect(obj, first + 1, results, notes)
            i = last  # the outer loop moves past it
            gap = _GAP_RE.match(text, stop)
            offset = gap.end() if gap else stop
            if offset >= len(text) or text[offset] not in "{[":
                break
            chained = True
        if budget <= 0:
            notes.append("stopped looking for JSON: too much text that does not parse")
            break
        i += 1
    return results, consumed, notes


def _collect(obj: Any, line: int, results: list[BenchResult], notes: list[str]) -> None:
    items = obj if isinstance(obj, list) else [obj]
    for n, item in enumerate(items):
        where = f"line {line}" + (f", item {n + 1}" if isinstance(obj, list) else "")
        result = _result(item, line) if isinstance(item, dict) else None
        if result is None:
            what = (
                f"an object with keys {', '.join(sorted(map(str, item))[:8])}"
                if isinstance(item, dict)
                else f"a JSON {type(item).__name__}"
            )
            notes.append(f"{where}: {what}, not a benchmark result")
        else:
            results.append(result)


def _result(obj: dict[str, Any], line: int) -> BenchResult | None:
    if sum(metric_for_key(str(k), table=False) is not None for k in obj) < _MIN_MEASUREMENTS:
        return None
    keys = set(obj)
    vllm = len(keys & _VLLM_KEYS) + sum(str(k).endswith("_e2el_ms") for k in keys)
    sglang = len(keys & _SGLANG_KEYS) + sum(str(k).endswith("_e2e_latency_ms") for k in keys)
    if sglang > vllm:
        fmt, tool = "sglang-bench-jsonl", "sglang bench_serving"
    elif vllm > sglang:
        fmt, tool = "vllm-bench-json", "vllm benchmark_serving"
    else:
        fmt, tool = "bench-json", "unknown benchmark tool (bench_serving-style JSON)"
    r = BenchResult(format=fmt, tool=tool, line=line)
    unknown: list[str] = []
    arrays: list[str] = []
    for raw_key, raw_value in obj.items():
        key = str(raw_key)
        value = json_safe(raw_value)
        if key == "server_info":
            if isinstance(raw_value, dict):
                r.server_info = json_safe(raw_value)
            elif raw_value is not None:
                r.not_understood.append("server_info is not an object; ignored")
            continue
        if key in JSON_ARRAY_KEYS:
            arrays.append(key)
            continue
        r.values[key] = value
        metric = metric_for_key(key, table=False)
        if metric is not None:
            n = number(raw_value)
            if n is None and value is not None:
                r.not_understood.append(f"{key}: {value!r} is not a number")
            r.metrics.setdefault(metric, n)
        elif key in JSON_CONTEXT_KEYS:
            continue
        elif key in EXTRA_KEYS or is_stat_key(key):
            r.extra[key] = value
        else:
            unknown.append(key)
    if unknown:
        r.not_understood.append(
            f"keys ServeLab does not know, kept as read: {', '.join(sorted(unknown)[:20])}"
        )
    if arrays:
        sizes = {len(obj[k]) for k in arrays if isinstance(obj[k], list)}
        n_req = f" ({max(sizes)} requests)" if sizes else ""
        r.not_understood.append(
            f"per-request arrays {', '.join(sorted(arrays))}{n_req} not imported: they carry "
            "no send times, so no per-request records are rebuilt from them"
        )
    _context(r, obj)
    _point(r, obj)
    r.derive_counts()
    return r


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value.strip() else None


def _context(r: BenchResult, obj: dict[str, Any]) -> None:
    for key in ("backend", "dataset_name", "tag", "label", "date", "tokenizer_id"):
        if (v := _text(obj.get(key))) is not None:
            r.context[key] = v
    info = r.server_info or {}
    model = _text(obj.get("model_id")) or _text(info.get("model_path"))
    if model is not None:
        r.context["model"] = model


def _point(r: BenchResult, obj: dict[str, Any]) -> None:
    if "request_rate" in obj:
        parsed = rate(json_safe(obj["request_rate"]))
        if parsed is None:
            r.not_understood.append(
                f"request_rate {json_safe(obj['request_rate'])!r} is not requests/s or inf"
            )
        else:
            r.point["request_rate"] = parsed
    if "max_concurrency" in obj:
        value = obj["max_concurrency"]
        if value is None:
            r.point["concurrency"] = None  # not set: unbounded
        elif (c := count(value)) is not None:
            r.point["concurrency"] = c
        else:
            r.not_understood.append(f"max_concurrency {value!r} is not a whole number")
    if (n := count(obj.get("num_prompts"))) is not None:
        r.point["num_prompts"] = n
    dataset = obj.get("dataset_name")
    if dataset in ("random", "random-ids") and "random_input_len" in obj:
        ratio = number(obj.get("random_range_ratio"))
        if ratio == 1:
            for src, dst in (
                ("random_input_len", "input_len"),
                ("random_output_len", "output_len"),
            ):
                if (n := count(obj.get(src))) is not None:
                    r.point[dst] = n
        else:
            r.not_understood.append(
                f"random_range_ratio={obj.get('random_range_ratio')!r}: lengths were drawn "
                f"up to random_input_len={obj.get('random_input_len')!r} / "
                f"random_output_len={obj.get('random_output_len')!r}, not fixed, so the "
                "point's input_len/output_len stay unknown"
            )
    elif dataset == "sharegpt" and (n := count(obj.get("sharegpt_output_len"))) is not None:
        r.point["output_len"] = n
