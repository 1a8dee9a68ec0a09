"""Take results anywhere: one call (``write_export``) over the output kinds, each in its own
module, all starting from one *selection* (``core.interop.selection``: one run, a comparison, or an
experiment's runs with their arm and trial, and the one story told about it):

* ``core.interop.export_tables``: CSV and Parquet tables (summaries, records, config, deltas,
  config diff, summary card, arm stats);
* ``core.interop.export_html``: the self-contained HTML report (verdict and summary card as on the
  pages, tables, charts with plotly.js inlined once, configuration, provenance);
* ``core.interop.export_charts`` + ``core.interop.export_png``: the charts, and each as PNG through
  kaleido driving Debian's chromium, falling back to a Playwright screenshot.

The names below are re-exported so callers import one module.
"""

from __future__ import annotations

from pathlib import Path

from core.errors import ConfigError
from core.interop.export_charts import figures
from core.interop.export_html import html_report
from core.interop.export_png import CHROMIUM_ARGS, chromium_path, write_pngs
from core.interop.export_tables import bundle, records_table, summaries_frame, table_files
from core.interop.selection import (
    ExportError,
    Selection,
    origin_of,
    select,
    selection_of,
    verdict_lines,
)

__all__ = [
    "CHROMIUM_ARGS",
    "EXPORT_FORMATS",
    "ExportError",
    "Selection",
    "bundle",
    "chromium_path",
    "figures",
    "html_report",
    "origin_of",
    "records_table",
    "select",
    "selection_of",
    "summaries_frame",
    "table_files",
    "verdict_lines",
    "write_export",
    "write_pngs",
]

EXPORT_FORMATS = ("csv", "parquet", "html", "png")


def write_export(sel: Selection, fmt: str, out_dir: Path) -> tuple[list[Path], str]:
    """Write the selection in ``fmt`` under ``out_dir``; returns the files and a note."""
    if fmt not in EXPORT_FORMATS:
        raise ConfigError("--format", f"{fmt!r}: use one of {', '.join(EXPORT_FORMATS)}")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError("--out", f"cannot create {out_dir}: {exc.strerror}") from exc
    if fmt in ("csv", "parquet"):
        files = []
        for name, data in table_files(sel, fmt).items():  # type: ignore[arg-type]
            path = out_dir / f"{sel.name}-{name}"
            path.write_bytes(data)
            files.append(path)
        return files, ""
    if fmt == "html":
        path = out_dir / f"{sel.name}.html"
        path.write_text(html_report(sel), encoding="utf-8")
        return [path], ""
    figs, notes = figures(sel)
    target = out_dir / sel.name
    paths, renderer = write_pngs(figs, target)
    return paths, "; ".join([f"rendered by {renderer}", *notes])
