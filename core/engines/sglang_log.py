"""Read the server facts an SGLang start-up log carries.

SGLang's log format changed many times between 2024 and 0.5.23 (the shared
reference sglang-interface.md §2 lists them). This parser reads every format it
knows and reports ``None`` for anything the text does not state; it never
guesses and never raises. Conventions (which rank counts, when ``tp_size`` may
be inferred, what each failure label means) follow the shared fixtures' README.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from core.scheduler_log import parse_scheduler_lines, scheduler_summary

__all__ = [
    "FAILURE_LABELS",
    "FAILURE_REASONS",
    "LOG_FACT_KEYS",
    "parse_sglang_log",
]

T = TypeVar("T")

# The keys every result has, in a stable order (the first block is the fixtures' contract).
LOG_FACT_KEYS: tuple[str, ...] = (
    "sglang_version",
    "tp_size",
    "kv_cache_tokens",
    "cuda_graph_enabled",
    "cuda_graph_batch_sizes",
    "avail_mem_gb_after_load",
    "avail_mem_gb_after_graph",
    "weight_mem_gb",
    "ready",
    "failure",
    "decode_lines",
    "last_gen_throughput",
    # extras
    "max_total_num_tokens",
    "chunked_prefill_size",
    "max_prefill_tokens",
    "max_running_requests",
    "context_len",
    "available_gpu_mem_gb_final",
    "avail_mem_gb_after_kv_pool",
    "kv_cache_gb",
    "graph_mem_gb",
    "cuda_graph_capture_s",
    "load_weight_s",
    "startup_s",
    "mem_fraction_static",
    "attention_backend",
    "dp_size",
    "model_path",
    "exit_code",
)

OOM_CAPTURE = "oom-during-cuda-graph-capture"
EXC_CAPTURE = "exception-during-cuda-graph-capture"
WARMUP_FAILED = "warmup-failed"
KV_NEGATIVE = "kv-cache-profiled-tokens-negative"
NAN_LOGITS = "nan-in-logits"
FAILURE_LABELS: tuple[str, ...] = (EXC_CAPTURE, OOM_CAPTURE, WARMUP_FAILED, KV_NEGATIVE, NAN_LOGITS)
# One sentence per label, with the usual fix, for error messages shown to a user.
FAILURE_REASONS: dict[str, str] = {
    OOM_CAPTURE: "SGLang ran out of GPU memory while capturing CUDA graphs; lower "
    "mem_fraction_static or cuda_graph_max_bs, or turn cuda_graphs off",
    EXC_CAPTURE: "SGLang failed while capturing CUDA graphs; see the log, or turn cuda_graphs off",
    WARMUP_FAILED: "SGLang's warm-up request failed after start-up; see the log",
    KV_NEGATIVE: "no GPU memory was left for the KV cache (profiled tokens <= 0); raise "
    "mem_fraction_static or use a smaller model",
    NAN_LOGITS: "SGLang detected NaN in the logits while sampling",
}

# Numbers are bounded so int()/float() can never hit Python's digit limit on odd input.
_INT = r"-?\d{1,15}"
_FLOAT = r"-?\d{1,15}(?:\.\d{1,9})?"

_ANSI_RE = re.compile(r"\x1b\[[0-9;]{0,20}[A-Za-z]")
# `[ts{.ms}{ tags}] ` (0.3 .. 0.5.23) or the 2024 `[gpu_id=N] ` form. Searched anywhere in a
# line, not only at its start: tqdm bars and uvicorn's stdout lines get glued to them.
_PREFIX_RE = re.compile(
    r"\[(?:(?P<ts>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})(?:\.(?P<ms>\d{1,6}))?"
    r"(?P<tags>(?: [A-Z][A-Z_]{0,15}\d{1,5}){0,8})"
    r"|gpu(?:_id)?=(?P<gpu>\d{1,5}))\] ?"
)
_TP_TAG_RE = re.compile(r"\bTP(\d{1,5})\b")
_DIGITS_RE = re.compile(r"\d+")

_LOAD_END_RE = re.compile(r"\bLoad weight end\b")
_KV_ALLOC_RE = re.compile(r"KV Cache is allocated\.")
# SGLANG_ENABLE_POST_CAPTURE_KV_SIZING=1: the earlier `KV Cache VA upper bound` is no pool.
_POST_KV_RE = re.compile(r"Post-capture KV sizing: KV cache allocated\.")
_MEM_POOL_END_RE = re.compile(r"\bMemory pool end\b")
_CAPTURE_BEGIN_RE = re.compile(r"\bCapture\b(?P<what>[\w ]{0,40}?) graph begin\b", re.IGNORECASE)
_CAPTURE_END_RE = re.compile(r"\bCapture\b(?P<what>[\w ]{0,40}?) graph end\b", re.IGNORECASE)
_CAPTURE_FAILED_RE = re.compile(r"\bCapture\b[\w ]{0,40}? graph failed\b", re.IGNORECASE)
_CAPTURE_BS_OLD_RE = re.compile(
    r"\bCapture cuda graph bs (?P<bs>\[[^\]]{0,20000}\])", re.IGNORECASE
)
_CAPTURING_TQDM_RE = re.compile(r"\bCapturing (?:batches|prefill shape)\b")
_ROLE_PHASE_RE = re.compile(r"^ (?P<role>target|draft) (?P<phase>decode|verify|prefill|extend)\b")
_FINAL_RE = re.compile(r"\bmax_total_num_tokens=" + _INT)
_FINAL_FIELD_RE = re.compile(
    r"\b(?P<key>max_total_num_tokens|chunked_prefill_size|max_prefill_tokens|"
    r"max_running_requests|context_len)=(?P<v>" + _INT + r")\b"
)
_FINAL_INT_KEYS = (
    "max_total_num_tokens",
    "chunked_prefill_size",
    "max_prefill_tokens",
    "max_running_requests",
    "context_len",
)
_FINAL_AVAIL_RE = re.compile(r"\bavailable_(?:gpu|cpu)_mem=(?P<v>" + _FLOAT + r") GB")
_READY_RE = re.compile(r"The server is fired up and ready to roll")
_UVICORN_RE = re.compile(r"Uvicorn running on|Application startup complete")
_BATCH_RE = re.compile(r"\b(?:Prefill|Decode) batch\b")
_SERVER_ARGS_RE = re.compile(r"\bserver_args=")
# `ServerArgs(k=v, ...)` (old repr) and `{'k': v, ...}` (0.5.23 dict); nested values are skipped.
_ARG_RE = re.compile(
    r"(?:(?<=\()|(?<=, )|(?<=\{))'?(?P<key>[a-z_][a-z0-9_]{0,60})'?(?:=|: )"
    r"(?P<val>'[^']{0,2000}'|\"[^\"]{0,2000}\"|[\w.+-]{1,100})"
)
# `python -m sglang.check_env` output; SGLang's own start-up lines never print the version.
_VERSION_RE = re.compile(r"^\s*sglang: (?P<v>\d{1,4}\.\d{1,4}[\w.+-]{0,30})\s*$")
_SCHEDULER_LINE_RE = re.compile(
    r"\b(?:Load weight (?:begin|end)|KV Cache is allocated|Memory pool end|"
    r"Init torch distributed|max_total_num_tokens=|Prefill batch|Decode batch)\b|"
    r"\bCapture\b[\w ]{0,40}? graph\b"
)
# Lines without a rank tag mean tp=1 only in logs from after SGLang stopped printing TP0
# for tp=1 (fixtures README: "mid-2025+").
_UNTAGGED_TP1_SINCE = "2025-06-01"

_AVAIL_MEM_RE = re.compile(r"\bavail mem=(?P<v>" + _FLOAT + r") GB")
_MEM_USAGE_RE = re.compile(r"\bmem usage=(?P<v>" + _FLOAT + r") GB")
_ELAPSED_RE = re.compile(r"(?:\belapsed=|Time elapsed: )(?P<v>" + _FLOAT + r") s\b")
_TOKENS_RE = re.compile(r"#tokens: (?P<v>" + _INT + r")\b")
_KV_SIZE_RE = re.compile(r"\b(?:K|V|KV) size: (?P<v>" + _FLOAT + r") GB")
_BS_LIST_RE = re.compile(r"\bbs=(?P<bs>\[[^\]]{0,20000}\])")
_EXIT_CODE_RE = re.compile(r"\bExit code: (?P<v>" + _INT + r")\b")

_OOM_RE = re.compile(r"out of memory|OutOfMemoryError", re.IGNORECASE)
_EXCEPTION_RE = re.compile(
    r"Traceback \(most recent call last\)|Scheduler hit an exception|"
    r"^\s*[\w.]{1,80}(?:Error|Exception): "
)
_WARMUP_FAILED_RE = re.compile(r"warmup error|Initialization failed\. warmup", re.IGNORECASE)
# Raised when the profiled KV pool size is <= 0 (model_runner / pool_configurator).
_KV_NEGATIVE_RE = re.compile(
    r"Not enough memory\. Please try to increase --mem-fraction-static|"
    r"max_total_num_tokens=-\d|#tokens: -\d"
)
# `--enable-nan-detection` (sampler.py): older wording says "probability".
_NAN_RE = re.compile(r"NaN in the (?:logits|probability)")


@dataclass(frozen=True)
class _Record:
    """One log message: its timestamp and rank tag (when it had a prefix) and its text."""

    ts: str | None
    rank: str  # "" (no tag), "TP3", "DP0 TP3", "GPU0" for the 2024 [gpu_id=0] form
    message: str


@dataclass
class _Scan:
    """Facts gathered per rank in one pass; picked into single values afterwards."""

    load_end: dict[str, str] = field(default_factory=dict)
    kv_lines: dict[str, list[tuple[str, int | None, float | None]]] = field(default_factory=dict)
    post_kv: dict[str, str] = field(default_factory=dict)
    pool_end: dict[str, str] = field(default_factory=dict)
    capture_ends: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    # 0.5.17 states the batch sizes on the begin line only (its end line has none).
    capture_begins: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    bs_old: dict[str, str] = field(default_factory=dict)
    final: dict[str, str] = field(default_factory=dict)
    capture_attempted: bool = False
    ready_ts: str | None = None
    ready: bool = False


def parse_sglang_log(text: str) -> dict[str, Any]:
    """Facts from an SGLang server log; every key of ``LOG_FACT_KEYS``, None where unknown."""
    try:
        return _parse(text)
    except Exception:  # a parser bug must never break a run; the facts just stay unknown
        return _empty_facts()


def _empty_facts() -> dict[str, Any]:
    facts: dict[str, Any] = dict.fromkeys(LOG_FACT_KEYS)
    facts.update(ready=False, decode_lines=0)
    return facts


def _parse(text: str) -> dict[str, Any]:
    clean = _ANSI_RE.sub("", text if isinstance(text, str) else "")
    records = _split_records(clean)
    scan = _scan(records)
    args = _server_args(records)
    facts = _empty_facts()

    facts["avail_mem_gb_after_load"] = _pick_float(scan.load_end, _AVAIL_MEM_RE)
    facts["weight_mem_gb"] = _pick_float(scan.load_end, _MEM_USAGE_RE)
    facts["load_weight_s"] = _pick_float(scan.load_end, _ELAPSED_RE)

    if scan.post_kv:
        facts["kv_cache_tokens"] = _pick(
            {r: _int_field(_TOKENS_RE, m) for r, m in scan.post_kv.items()}
        )
        facts["kv_cache_gb"] = _pick({r: _kv_gb(m) for r, m in scan.post_kv.items()})
    else:
        summaries = {r: _kv_summary(lines) for r, lines in scan.kv_lines.items()}
        facts["kv_cache_tokens"] = _pick({r: s[0] for r, s in summaries.items()})
        facts["kv_cache_gb"] = _pick({r: s[1] for r, s in summaries.items()})
    facts["avail_mem_gb_after_kv_pool"] = _pick_float(scan.pool_end, _AVAIL_MEM_RE)

    ends = scan.capture_ends
    facts["avail_mem_gb_after_graph"] = _pick(
        {r: _float_field(_AVAIL_MEM_RE, e[-1][1]) for r, e in ends.items()}
    )
    facts["graph_mem_gb"] = _pick({r: _sum_field(_MEM_USAGE_RE, e) for r, e in ends.items()})
    facts["cuda_graph_capture_s"] = _pick({r: _sum_field(_ELAPSED_RE, e) for r, e in ends.items()})
    facts["cuda_graph_batch_sizes"] = _batch_sizes(scan)

    for key in _FINAL_INT_KEYS:
        facts[key] = _pick({r: _final_int(m, key) for r, m in scan.final.items()})
    facts["available_gpu_mem_gb_final"] = _pick_float(scan.final, _FINAL_AVAIL_RE)

    facts["tp_size"] = _tp_size(records, args)
    # The scheduler lines have one parser (core.scheduler_log), shared with parse-log and
    # the server's view; counted on the primary rank, as every other fact here is.
    lines = parse_scheduler_lines(clean)
    graph_true = any(r.get("graph") is True for r in lines)
    facts["cuda_graph_enabled"] = _cuda_graph_enabled(scan, args, graph_true)
    facts["sglang_version"] = _first(_VERSION_RE.match(r.message) for r in records if not r.ts)
    facts["ready"] = scan.ready
    facts["startup_s"] = _startup_s(records, scan.ready_ts)
    facts["failure"] = _failure(records)
    batches = scheduler_summary(lines)
    facts["decode_lines"] = batches["decode_batches"]
    facts["last_gen_throughput"] = batches["last_gen_throughput_tok_s"]
    exit_codes = _EXIT_CODE_RE.findall(clean)
    facts["exit_code"] = int(exit_codes[-1]) if exit_codes else None
    facts["mem_fraction_static"] = _as_float(args.get("mem_fraction_static"))
    facts["attention_backend"] = _as_str(args.get("attention_backend"))
    facts["model_path"] = _as_str(args.get("model_path"))
    facts["dp_size"] = _as_int(args.get("dp_size"))
    return facts


def _split_records(text: str) -> list[_Record]:
    """Split on every line break SGLang uses (``\\n`` and tqdm's ``\\r``), then on each
    ``[ts TAG]`` prefix, so glued lines become separate records."""
    records: list[_Record] = []
    for line in text.splitlines():
        matches = list(_PREFIX_RE.finditer(line))
        start = matches[0].start() if matches else len(line)
        if line[:start].strip():
            records.append(_Record(None, "", line[:start]))
        for i, m in enumerate(matches):
            end = matches[i + 1].start() if i + 1 < len(matches) else len(line)
            if m["gpu"] is not None:
                ts, rank = None, f"GPU{m['gpu']}"
            else:
                ts = m["ts"] + (f".{m['ms']}" if m["ms"] else "")
                rank = (m["tags"] or "").strip()
            records.append(_Record(ts, rank, line[m.end() : end]))
    return records


def _scan(records: list[_Record]) -> _Scan:
    scan = _Scan()
    for rec in records:
        msg, rank = rec.message, rec.rank
        if _READY_RE.search(msg):
            scan.ready = True
            scan.ready_ts = scan.ready_ts or rec.ts
        elif _LOAD_END_RE.search(msg):
            scan.load_end.setdefault(rank, msg)
        elif m := _KV_ALLOC_RE.search(msg):
            label = msg[: m.start()].strip()
            scan.kv_lines.setdefault(rank, []).append(
                (label, _int_field(_TOKENS_RE, msg), _kv_gb(msg))
            )
        elif _POST_KV_RE.search(msg):
            scan.post_kv[rank] = msg  # the final pool: the last such line wins
        elif _MEM_POOL_END_RE.search(msg):
            scan.pool_end.setdefault(rank, msg)
        elif m := _CAPTURE_END_RE.search(msg):
            scan.capture_attempted = True
            scan.capture_ends.setdefault(rank, []).append((m["what"], msg))
        elif m := _CAPTURE_BS_OLD_RE.search(msg):
            scan.capture_attempted = True
            scan.bs_old.setdefault(rank, m["bs"])
        elif m := _CAPTURE_BEGIN_RE.search(msg):
            scan.capture_attempted = True
            scan.capture_begins.setdefault(rank, []).append((m["what"], msg))
        elif _CAPTURE_FAILED_RE.search(msg) or _CAPTURING_TQDM_RE.search(msg):
            scan.capture_attempted = True
        elif _FINAL_RE.search(msg):
            scan.final.setdefault(rank, msg)
    return scan


def _is_primary(rank: str) -> bool:
    """TP0 (and DP0, PP0...) or no tag at all: the rank whose numbers the README uses."""
    return all(int(d) == 0 for d in _DIGITS_RE.findall(rank))


def _pick(by_rank: Mapping[str, T | None]) -> T | None:
    """The primary rank's value; otherwise a value every rank shown agrees on; else None.
    Ranks whose line lacks the value say nothing about it."""
    known = {r: v for r, v in by_rank.items() if v is not None}
    for rank, value in known.items():
        if _is_primary(rank):
            return value
    values = list(known.values())
    if values and all(v == values[0] for v in values[1:]):
        return values[0]
    return None


def _pick_float(messages: dict[str, str], pattern: re.Pattern[str]) -> float | None:
    return _pick({r: _float_field(pattern, m) for r, m in messages.items()})


def _final_int(message: str, key: str) -> int | None:
    for m in _FINAL_FIELD_RE.finditer(message):
        if m["key"] == key:
            return int(m["v"])
    return None


def _first(matches: Iterable[re.Match[str] | None]) -> str | None:
    for m in matches:
        if m is not None:
            return m["v"]
    return None


def _float_field(pattern: re.Pattern[str], message: str | None) -> float | None:
    m = pattern.search(message) if message is not None else None
    return float(m["v"]) if m else None


def _int_field(pattern: re.Pattern[str], message: str | None) -> int | None:
    m = pattern.search(message) if message is not None else None
    return int(m["v"]) if m else None


def _sum_field(pattern: re.Pattern[str], ends: list[tuple[str, str]]) -> float | None:
    values = [v for _, msg in ends if (v := _float_field(pattern, msg)) is not None]
    return round(sum(values), 3) if values else None


def _kv_gb(message: str) -> float | None:
    """K size + V size, or the single KV size, of one KV-pool line."""
    sizes = [float(m["v"]) for m in _KV_SIZE_RE.finditer(message)]
    return round(sum(sizes), 3) if sizes else None


def _kv_summary(
    lines: list[tuple[str, int | None, float | None]],
) -> tuple[int | None, float | None]:
    """Tokens of the first pool; GB summed over differently labelled pools (hybrid models)."""
    seen: dict[str, float | None] = {}
    for label, _, gb in lines:
        seen.setdefault(label, gb)
    sizes = [gb for gb in seen.values() if gb is not None]
    return lines[0][1], (round(sum(sizes), 3) if sizes else None)


def _int_list(text: str) -> list[int] | None:
    """``[1, 2, 4]`` -> list; None if any item is not an integer (e.g. an abbreviated ``...``)."""
    items = [s.strip() for s in text.strip()[1:-1].split(",")]
    if items == [""]:
        return []
    if not all(s.isdigit() and len(s) <= 9 for s in items):
        return None
    return [int(s) for s in items]


def _batch_sizes(scan: _Scan) -> list[int] | None:
    """The decode batch sizes actually captured: 0.5.23's target decode (or verify) end line;
    0.5.17's begin line of a phase whose end line follows (the end says none, and without an
    end the capture failed); else the older separate ``Capture cuda graph bs [...]`` line."""

    def in_lines(phase: str) -> Callable[[list[tuple[str, str]]], str | None]:
        def get(lines: list[tuple[str, str]]) -> str | None:
            for what, msg in lines:
                rp = _ROLE_PHASE_RE.match(what + " ")
                if rp and rp["role"] == "target" and rp["phase"] == phase:
                    bs = _BS_LIST_RE.search(msg)
                    return bs["bs"] if bs else None
            return None

        return get

    for phase in ("decode", "verify"):
        found = {
            r: _int_list(v)
            for r, e in scan.capture_ends.items()
            if (v := in_lines(phase)(e)) is not None
        }
        if (sizes := _pick(found)) is not None:
            return sizes
        ended = {
            r
            for r, e in scan.capture_ends.items()
            if any(
                (rp := _ROLE_PHASE_RE.match(w + " "))
                and rp["role"] == "target"
                and rp["phase"] == phase
                for w, _ in e
            )
        }
        found = {
            r: _int_list(v)
            for r, b in scan.capture_begins.items()
            if r in ended and (v := in_lines(phase)(b)) is not None
        }
        if (sizes := _pick(found)) is not None:
            return sizes
    return _pick({r: _int_list(v) for r, v in scan.bs_old.items()})


def _literal(value: str) -> Any:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    if value in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[value]
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value


def _server_args(records: list[_Record]) -> dict[str, Any]:
    """Flat ``key -> value`` from the first ``server_args=`` line (first occurrence wins)."""
    for rec in records:
        if m := _SERVER_ARGS_RE.search(rec.message):
            args: dict[str, Any] = {}
            for a in _ARG_RE.finditer(rec.message, m.end()):
                args.setdefault(a["key"], _literal(a["val"]))
            return args
    return {}


def _as_int(value: Any) -> int | None:
    # bool is an int subclass; True is never a size.
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _as_float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _as_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _tp_size(records: list[_Record], args: dict[str, Any]) -> int | None:
    """``tp_size=`` from ServerArgs; else max TP rank + 1 when several ranks print; else 1
    when a recent log's scheduler lines carry no TP tag (SGLang tags TPn only if tp > 1)."""
    tp = _as_int(args.get("tp_size"))
    if tp is not None and tp >= 1:
        return tp
    ranks = {int(n) for rec in records for n in _TP_TAG_RE.findall(rec.rank)}
    if len(ranks) >= 2:
        return max(ranks) + 1
    if ranks:
        return None  # only one rank visible (e.g. just TP0): the size is not stated
    for rec in records:
        if (
            rec.ts is not None
            and rec.ts[:10] >= _UNTAGGED_TP1_SINCE
            and _SCHEDULER_LINE_RE.search(rec.message)
        ):
            return 1
    return None


def _cuda_graph_enabled(scan: _Scan, args: dict[str, Any], graph_true: bool) -> bool | None:
    """True if capture was attempted or batch lines say ``cuda graph: True``; False only when
    the server args turn graphs off (both phases on 0.5.23); otherwise unknown."""
    if scan.capture_attempted or graph_true:
        return True
    if args.get("disable_cuda_graph") is True:
        return False

    def phase_off(phase: str) -> bool:
        return (
            args.get(f"disable_{phase}_cuda_graph") is True
            or args.get(f"cuda_graph_backend_{phase}") == "disabled"
        )

    if phase_off("decode") and phase_off("prefill"):
        return False
    return None


def _timestamp(ts: str | None) -> datetime | None:
    if ts is None:
        return None
    try:
        return datetime.strptime(ts, "%Y-%m-%d %H:%M:%S.%f" if "." in ts else "%Y-%m-%d %H:%M:%S")
    except ValueError:  # e.g. month 13 in random text
        return None


def _startup_s(records: list[_Record], ready_ts: str | None) -> float | None:
    """Seconds from the first timestamped line to the ready line."""
    ready = _timestamp(ready_ts)
    first = next((t for r in records if (t := _timestamp(r.ts)) is not None), None)
    if ready is None or first is None or ready < first:
        return None
    return round((ready - first).total_seconds(), 3)


def _failure(records: list[_Record]) -> str | None:
    """The first failure the log shows. A capture exception becomes an OOM when the
    out-of-memory text follows it (the traceback usually ends with the OOM)."""
    failure: str | None = None
    capturing = 0  # capture begin lines not yet matched by an end line
    for rec in records:
        msg = rec.message
        if _CAPTURE_BEGIN_RE.search(msg):
            capturing += 1
            continue
        if _CAPTURE_END_RE.search(msg):
            capturing = max(0, capturing - 1)
            continue
        if (
            _FINAL_RE.search(msg)
            or _READY_RE.search(msg)
            or _UVICORN_RE.search(msg)
            or _BATCH_RE.search(msg)
        ):
            capturing = 0  # old versions never printed an end line; capture is over by now
        label = _failure_label(msg, capturing > 0)
        if failure is None:
            failure = label
        elif failure == EXC_CAPTURE and _OOM_RE.search(msg):
            failure = OOM_CAPTURE
    return failure


def _failure_label(msg: str, capturing: bool) -> str | None:
    if _CAPTURE_FAILED_RE.search(msg):
        return OOM_CAPTURE if _OOM_RE.search(msg) else EXC_CAPTURE
    if capturing and _OOM_RE.search(msg):
        return OOM_CAPTURE
    if capturing and _EXCEPTION_RE.search(msg):
        return EXC_CAPTURE
    if _WARMUP_FAILED_RE.search(msg):
        return WARMUP_FAILED
    if _KV_NEGATIVE_RE.search(msg):
        return KV_NEGATIVE
    if _NAN_RE.search(msg):
        return NAN_LOGITS
    return None
