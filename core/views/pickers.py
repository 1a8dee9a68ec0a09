"""The words of a page's picker: what a page opened without a query string offers instead of
a dead end (Run, Compare and History list the stored runs to choose from)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from core.views.cells import time_text

__all__ = ["run_options"]


def run_options(rows: Iterable[Mapping[str, Any]], states: tuple[str, ...] = ()) -> dict[str, str]:
    """Run id → "RUN_ID · succeeded · sglang qwen3-30b-a3b (dummy weights) · started …",
    newest first as the catalog lists them; ``states``: only runs in one of them."""
    out: dict[str, str] = {}
    for row in rows:
        run_id, state = str(row.get("run_id") or ""), str(row.get("state") or "")
        if not run_id or (states and state not in states):
            continue
        model = str(row.get("model") or "")
        # a folder path is long: its last part names the model
        model = Path(model).name if "/" in model else model
        parts = [run_id, state, f"{row.get('engine') or ''} {model}".strip()]
        parts.append(f"started {time_text(row.get('started_at'))}")
        out[run_id] = " · ".join(p for p in parts if p)
    return out
