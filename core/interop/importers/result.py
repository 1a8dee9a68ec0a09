"""One benchmark result as read from a file: what it says, in its own words and in ServeLab's."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["POINT_FIELDS", "BenchResult"]

POINT_FIELDS: tuple[str, ...] = (
    "concurrency",
    "request_rate",
    "input_len",
    "output_len",
    "num_prompts",
)


@dataclass
class BenchResult:
    """One ``bench_serving`` / ``benchmark_serving`` invocation's result.

    ``values`` holds every row or key exactly as read (label keys as in the fixtures'
    convention, ``inf`` as ``"inf"``); ``metrics`` the ones with a ServeLab name, under that
    name; ``point`` only the load fields the text states (a stated ``None`` concurrency is
    "unbounded"; an absent one is unknown); ``extra`` what is understood but has no ServeLab
    name; ``not_understood`` one sentence per thing that was not read.
    """

    format: str
    tool: str
    line: int
    values: dict[str, Any] = field(default_factory=dict)
    preamble: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    point: dict[str, Any] = field(default_factory=dict)
    context: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    server_info: dict[str, Any] | None = None
    not_understood: list[str] = field(default_factory=list)

    def derive_counts(self) -> None:
        """``num_requests``/``error_rate`` (and the point's ``num_prompts``) where the text
        states both the successes and the failures: arithmetic, not a guess."""
        done, failed = self.metrics.get("completed"), self.metrics.get("failed")
        if isinstance(done, int) and isinstance(failed, int) and done >= 0 and failed >= 0:
            total = done + failed
            self.metrics["num_requests"] = total
            self.metrics["error_rate"] = failed / total if total else None
            if total > 0:
                self.point.setdefault("num_prompts", total)
