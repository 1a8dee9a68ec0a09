"""SGLang's scheduler lines (``Prefill batch, …`` / ``Decode batch, …``) as data.

Plain parsing of one log format, kept at the top of core/ because two layers read it: the
engine (``python -m core parse-log``) and the analysis (the server's view of a stored run
whose metrics were off). Every line is split into its ``key: value`` fields instead of one
fixed regex, since the field list varies by version and model: speculative decoding inserts
``accept len``/``accept rate``, hybrid SWA/Mamba models print ``#full token``/``#swa token``,
the graph word is ``cuda``/``npu``/``cpu``/``musa``/``xpu graph``, and multi-rank servers tag
lines ``[ts TP0 DP1]``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

__all__ = ["SchedulerLineReader", "parse_scheduler_lines", "scheduler_summary"]

_ANSI_RE = re.compile(r"\x1b\[[0-9;]{0,20}[A-Za-z]")
_PREFIX_RE = re.compile(
    r"\[(?P<ts>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d{1,6})?)"
    r"(?P<tags>(?: [A-Z][A-Z_]{0,15}\d{1,5}){0,8})\] ?"
)
_BATCH_RE = re.compile(r"\b(?P<kind>Prefill|Decode) batch(?: \[(?P<iter>\d{1,15})\])?[.,] ?")
_FIELD_RE = re.compile(
    r"(?P<key>[#A-Za-z][\w \-/()#]{0,60}?): (?P<value>True|False|-?\d{1,15}(?:\.\d{1,9})?)"
)
_GRAPH_KEY_RE = re.compile(r"^(?:cuda|npu|cpu|musa|xpu|hpu) graph$")
# SGLang's field names → ours (units in the name); unknown fields are kept under their own key.
_NAMES = {
    "#running-req": "running_req",
    "#queue-req": "queue_req",
    "#token": "tokens_used",
    "#full token": "tokens_used",
    "token usage": "token_usage",
    "full token usage": "token_usage",
    "#swa token": "swa_tokens_used",
    "swa token usage": "swa_token_usage",
    "#mamba num": "mamba_used",
    "mamba usage": "mamba_usage",
    "gen throughput (token/s)": "gen_throughput_tok_s",
    "input throughput (token/s)": "input_throughput_tok_s",
    "#new-seq": "new_seq",
    "#new-token": "new_token",
    "#cached-token": "cached_token",
    "#pending-token": "pending_token",
    "#replay-token": "replay_token",
    "#retracted-req": "retracted_req",
    "accept len": "accept_len",
    "accept rate": "accept_rate",
}


def _parse_line(line: str) -> dict[str, Any] | None:
    m = _BATCH_RE.search(line)
    if m is None:
        return None
    rec: dict[str, Any] = {"kind": m["kind"].lower(), "ts": None, "rank": ""}
    prefixes = [p for p in _PREFIX_RE.finditer(line) if p.start() <= m.start()]
    if prefixes:
        rec["ts"] = prefixes[-1]["ts"]
        rec["rank"] = prefixes[-1]["tags"].strip()
    for f in _FIELD_RE.finditer(line, m.end()):
        key, raw = f["key"].strip(), f["value"]
        if _GRAPH_KEY_RE.match(key):
            rec["graph"] = raw == "True"
            continue
        value: Any = raw == "True" if raw in ("True", "False") else float(raw)
        if isinstance(value, float) and value.is_integer() and "." not in raw:
            value = int(raw)
        rec[_NAMES.get(key, key)] = value
    return rec


def parse_scheduler_lines(text: str) -> list[dict[str, Any]]:
    """Every scheduler line of a log, in order: ``kind`` (prefill|decode), ``ts`` (the
    line's stamp or None), ``rank`` and its fields under our names (``running_req``,
    ``queue_req``, ``tokens_used``, ``token_usage``, ``graph``, ``gen_throughput_tok_s``…)."""
    reader = SchedulerLineReader()
    reader.feed(text)
    return reader.finish()


@dataclass
class SchedulerLineReader:
    """Incremental: ``feed`` chunks of a growing log (a half line is kept for the next
    chunk), ``finish`` returns every line read."""

    lines: list[dict[str, Any]] = field(default_factory=list)
    _rest: str = ""

    def feed(self, chunk: str) -> list[dict[str, Any]]:
        text = self._rest + _ANSI_RE.sub("", chunk)
        *whole, self._rest = re.split(r"\r\n|\r|\n", text)
        new = [r for r in map(_parse_line, _split_glued(whole)) if r is not None]
        self.lines += new
        return new

    def finish(self) -> list[dict[str, Any]]:
        if self._rest:
            self.feed("\n")
        return self.lines


def _split_glued(lines: Iterable[str]) -> Iterator[str]:
    """Two records glued on one physical line (tqdm, uvicorn) become two."""
    for line in lines:
        starts = [p.start() for p in _PREFIX_RE.finditer(line)] or [0]
        starts[0] = 0
        for a, b in zip(starts, [*starts[1:], len(line)], strict=True):
            yield line[a:b]


def line_seconds(ts: str | None) -> float | None:
    """A line's stamp as epoch seconds (the stamp's own clock, naive); None without one."""
    if not ts:
        return None
    try:
        return datetime.fromisoformat(ts).timestamp()
    except ValueError:
        return None


def scheduler_summary(lines: list[dict[str, Any]]) -> dict[str, Any]:
    """What ``parse-log`` reports of the scheduler lines (primary rank only where ranked,
    so a TP8 server's lines are not counted eight times)."""
    ranks = {r["rank"] for r in lines}
    primary = (
        min(ranks, key=lambda r: (sum(int(d) for d in re.findall(r"\d+", r)), r)) if ranks else ""
    )
    own = [r for r in lines if r["rank"] == primary]
    decode = [r for r in own if r["kind"] == "decode"]
    prefill = [r for r in own if r["kind"] == "prefill"]
    gen = [r["gen_throughput_tok_s"] for r in decode if "gen_throughput_tok_s" in r]
    running = [r["running_req"] for r in own if isinstance(r.get("running_req"), int)]
    usage = [r["token_usage"] for r in own if isinstance(r.get("token_usage"), int | float)]
    graphs = [r["graph"] for r in decode if "graph" in r]
    return {
        "decode_batches": len(decode),
        "prefill_batches": len(prefill),
        "last_gen_throughput_tok_s": float(gen[-1]) if gen else None,
        "max_running_req": max(running) if running else None,
        "max_token_usage": float(max(usage)) if usage else None,
        "max_queue_req": max((r.get("queue_req", 0) for r in own), default=None),
        "decode_graph_share": sum(graphs) / len(graphs) if graphs else None,
    }
