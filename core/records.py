"""Per-request raw records: what the load generator saw, one row per request.

Times are seconds on the run process's monotonic clock (``time.perf_counter``),
relative to the start of the point, so records from one point share one axis.
Everything else (TTFT, ITL, TPOT, throughput) is derived from these rows by
``core.metrics`` — never stored pre-digested.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow as pa

__all__ = ["CANCELLED", "RECORD_SCHEMA", "RequestRecord", "records_from_table", "records_to_table"]

# The error of a request a cancel cut short (in flight, or never sent): not a server error,
# so core.metrics counts it apart (``cancelled_requests``) instead of as a failure.
CANCELLED = "cancelled"


@dataclass
class RequestRecord:
    index: int
    send_s: float  # when the request's headers started going on the wire (httpcore trace)
    prompt_tokens: int  # the prompt's length in the served model's tokenizer (dataset count)
    output_tokens_requested: int
    chunk_s: list[float] = field(default_factory=list)  # arrival of each non-empty content chunk
    end_s: float | None = None  # arrival of the last SSE line ([DONE] included)
    ok: bool = False
    status_code: int | None = None
    error: str | None = None
    prompt_tokens_server: int | None = None  # usage.prompt_tokens (includes the chat template)
    output_tokens_server: int | None = None  # usage.completion_tokens
    output_tokens_retokenized: int | None = None  # len(tokenizer.encode(generated_text))
    finish_reason: str | None = None
    generated_text: str = ""
    dispatch_s: float | None = None  # when the request was handed to the HTTP client
    # When the arrival schedule said it was due (Poisson or a trace's timestamps); None when
    # a point sends at once or as slots free. dispatch_s - scheduled_s is how late it went.
    scheduled_s: float | None = None
    session: int | None = None  # multi_turn: which conversation
    turn: int | None = None  # multi_turn: 0 = the first user turn

    @property
    def ttft_s(self) -> float | None:
        return self.chunk_s[0] - self.send_s if self.chunk_s else None

    @property
    def latency_s(self) -> float | None:
        return None if self.end_s is None else self.end_s - self.send_s

    def output_tokens(self, source: str) -> int:
        """Output length as ``bench_serving`` counts it: the server's count, falling back
        to the requested length when the server sent none (``sglang-oai-chat``), or the
        re-tokenized count."""
        if source == "retokenized":
            return self.output_tokens_retokenized or 0
        if self.output_tokens_server is not None:
            return self.output_tokens_server
        return self.output_tokens_requested


RECORD_SCHEMA = pa.schema(
    [
        ("index", pa.int32()),
        ("send_s", pa.float64()),
        ("prompt_tokens", pa.int32()),
        ("output_tokens_requested", pa.int32()),
        ("chunk_s", pa.list_(pa.float64())),
        ("end_s", pa.float64()),
        ("ok", pa.bool_()),
        ("status_code", pa.int32()),
        ("error", pa.string()),
        ("prompt_tokens_server", pa.int32()),
        ("output_tokens_server", pa.int32()),
        ("output_tokens_retokenized", pa.int32()),
        ("finish_reason", pa.string()),
        ("generated_text", pa.string()),
        ("dispatch_s", pa.float64()),
        ("scheduled_s", pa.float64()),
        ("session", pa.int32()),
        ("turn", pa.int32()),
    ]
)


def records_to_table(records: list[RequestRecord]) -> pa.Table:
    rows: list[dict[str, Any]] = [asdict(r) for r in records]
    return pa.Table.from_pylist(rows, schema=RECORD_SCHEMA)


def records_from_table(table: pa.Table) -> list[RequestRecord]:
    names = set(RECORD_SCHEMA.names)
    return [
        RequestRecord(**{k: v for k, v in row.items() if k in names}) for row in table.to_pylist()
    ]
