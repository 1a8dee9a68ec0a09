"""latency_arrays (column-wise, for CDFs of big runs) gives exactly latency_values (the
definition the metrics use): same values, same order, every edge case."""

from __future__ import annotations

import random

import pytest

from core.metrics import LATENCY_FAMILIES, latency_arrays, latency_values
from core.records import RequestRecord, records_to_table


def _records(seed: int, n: int) -> list[RequestRecord]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        send = rng.uniform(0, 5)
        k = rng.choice([0, 1, 2, 5, 17])
        chunks = sorted(send + rng.uniform(0.01, 2) for _ in range(k))
        ok = rng.random() > 0.2
        end = None if rng.random() < 0.1 else (chunks[-1] if chunks else send) + 0.001
        out.append(
            RequestRecord(
                index=i,
                send_s=send,
                prompt_tokens=8,
                output_tokens_requested=rng.choice([1, 4, 16]),
                chunk_s=chunks,
                end_s=end,
                ok=ok,
                output_tokens_server=rng.choice([None, 0, 1, 3, k]),
                output_tokens_retokenized=rng.choice([None, 0, 2, k]),
            )
        )
    return out


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("source", ["server", "retokenized"])
def test_same_values_in_the_same_order(seed: int, source: str) -> None:
    records = _records(seed, 60)
    want = latency_values(records, source)  # type: ignore[arg-type]
    got = latency_arrays(records_to_table(records), source)  # type: ignore[arg-type]
    for fam in LATENCY_FAMILIES:
        assert got[fam].tolist() == want[fam], fam


def test_empty_table() -> None:
    got = latency_arrays(records_to_table([]))
    assert all(got[f].size == 0 for f in LATENCY_FAMILIES)
