"""One run folder as the comparison pages read it: ``RunView`` (its JSON artifacts), the
labels that tell runs apart in a table, and the per-request latencies of one point.

Pure functions over ``RunFolder``s: no Streamlit, no catalog; a missing artifact reads as
empty, "unknown" stays None.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from core.metrics import LATENCY_FAMILIES, TokenSource, latency_arrays
from core.run_folder import RunFolder, RunStatus

__all__ = [
    "RunView",
    "has_records",
    "latency_samples",
    "load_run",
    "no_records_note",
    "run_labels",
]


@dataclass(frozen=True)
class RunView:
    """Everything the comparison pages read from one run folder (JSON artifacts only;
    tables are read on demand through ``path``)."""

    run_id: str
    spec: dict[str, Any]
    status: RunStatus
    facts: dict[str, Any]
    probe: dict[str, Any] | None
    launch: dict[str, Any]
    points: list[dict[str, Any]]
    path: Path | None = None

    @property
    def folder(self) -> RunFolder | None:
        return None if self.path is None else RunFolder(self.path)

    @property
    def imported(self) -> bool:
        """Imported from a file (core.interop.importers): summaries only, and the fields its source
        did not state are unknown (None), not different."""
        return self.spec.get("origin") == "import"


def load_run(folder: RunFolder) -> RunView:
    """Read one folder's JSON artifacts; a missing artifact reads as empty (a run that
    failed early still compares on what it has)."""
    facts = folder.read("facts.json") or {}
    return RunView(
        run_id=folder.run_id,
        spec=folder.read("spec.json") or {},
        status=folder.status_or_empty(),
        facts={k: v for k, v in facts.items() if k != "server_info_raw"},
        probe=folder.read("probe.json"),
        launch=folder.read("launch.json") or {},
        points=folder.point_summaries(),
        path=folder.path,
    )


def run_labels(views: Sequence[RunView]) -> list[str]:
    """One column label per run: the run id, suffixed when a run appears twice."""
    seen: Counter[str] = Counter()
    out = []
    for v in views:
        seen[v.run_id] += 1
        out.append(v.run_id if seen[v.run_id] == 1 else f"{v.run_id}#{seen[v.run_id]}")
    return out


def _family(metric: str) -> str:
    name = metric.lower()
    if name in LATENCY_FAMILIES:
        return name
    m = re.fullmatch(r"(?:[a-z0-9]+_)?(ttft|itl|tpot|e2e)(?:_ms)?", name)
    if m:
        return m[1]
    raise ValueError(f"unknown latency metric {metric!r}; use one of {', '.join(LATENCY_FAMILIES)}")


def has_records(view: RunView, point_index: Any) -> bool:
    """The point has per-request records (``records.parquet``): an imported run never does."""
    return (
        view.path is not None
        and isinstance(point_index, int)
        and (view.path / "points" / f"{point_index:03d}" / "records.parquet").exists()
    )


def no_records_note(view: RunView) -> str:
    """Why a run shows no latency distribution, in words (instead of an empty chart)."""
    if view.imported:
        origin = view.spec.get("import") or {}
        return (
            f"{view.run_id} was imported from {origin.get('source_file')} "
            f"({origin.get('format')}): it holds the tool's summary metrics only, no "
            "per-request records, so there is no latency distribution to draw."
        )
    return f"{view.run_id} has no per-request records at this point."


_LATENCY_COLUMNS = (
    "send_s",
    "chunk_s",
    "end_s",
    "ok",
    "output_tokens_requested",
    "output_tokens_server",
    "output_tokens_retokenized",
)


def latency_samples(
    folder: RunFolder, point_index: int, metric: str, source: TokenSource = "server"
) -> list[float]:
    """Every value of one latency family (``ttft``, ``itl``, ``tpot``, ``e2e``; a summary
    key such as ``median_ttft_ms`` names its family) at one point, in ms, from
    ``points/NNN/records.parquet``; empty when the point has no records."""
    family = _family(metric)
    path = folder.path / f"points/{point_index:03d}/records.parquet"
    if not path.exists():
        return []
    # Only the columns the definitions read, column-wise (no object per request/chunk).
    table: pa.Table = pq.read_table(
        path, columns=[c for c in _LATENCY_COLUMNS if c in pq.read_schema(path).names]
    )
    values: list[float] = (latency_arrays(table, source)[family] * 1000.0).tolist()
    return values
