"""Import benchmark results people already have: SGLang ``bench_serving`` (its printed
summary table and its ``--output-file`` JSONL, bare ``Infinity`` included), vLLM
``benchmark_serving`` / ``vllm bench serve`` (table and JSON), and SGLang start-up logs,
alone or with a result. Each becomes an ordinary run folder marked with its origin.

    parsed = parse_text(text, "bench.txt")          # never raises; lists what it did not read
    planned = plan_runs(parsed, settings)            # the runs and values (a dry run stops here)
    stored = store_runs(planned, settings)           # ids stored; already-imported ones skipped
"""

from core.interop.importers.result import BenchResult
from core.interop.importers.runs import (
    Given,
    ParsedFile,
    PlannedRun,
    parse_text,
    plan_runs,
    safe_name,
    store_runs,
)

__all__ = [
    "BenchResult",
    "Given",
    "ParsedFile",
    "PlannedRun",
    "parse_text",
    "plan_runs",
    "safe_name",
    "store_runs",
]
