"""Take results anywhere: CSV and Parquet tables, a self-contained HTML report, PNG charts.

A *selection* is one run, a comparison (two or more runs, the first the baseline unless
told otherwise) or an experiment (``exp-...``: its runs with their arm and trial). From it:

* ``table_files``: ``summaries`` (one row per run and point, ServeLab's metric names,
  imported runs with their origin and ``unknown`` list), ``records`` (every per-request
  record, with ``run_id``/``point_index`` and TTFT/E2E in ms), ``config`` (every compared
  field per run), and for two or more runs ``deltas`` and ``config_diff``; for an
  experiment ``arm_stats``. As CSV or Parquet.
* ``html_report``: one HTML file that opens from disk with no network: the tables, the
  plotly charts (plotly.js inlined once), the configuration diff, a verdict line, and the
  provenance (launch commands, engine and ServeLab versions, hosts).
* ``write_pngs``: each chart as PNG through kaleido driving Debian's chromium
  (``/usr/bin/chromium``, or ``BROWSER_PATH``), falling back to a Playwright screenshot.
"""

from __future__ import annotations

import html
import io
import json
import math
import os
import platform
import re
import subprocess
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import pandas as pd
import plotly.graph_objects as go
import pyarrow as pa
import pyarrow.parquet as pq

from core.compare import (
    HEADLINE_METRICS,
    RunView,
    config_diff,
    confounders,
    flatten_config,
    has_records,
    latency_samples,
    load_run,
    match_points,
    memory_headroom,
    metric_deltas,
    no_records_note,
    run_labels,
    unknown_fields,
)
from core.errors import ConfigError, ServeLabError
from core.figures import cdf_figure, memory_headroom_figure, metric_vs_concurrency
from core.metrics import DEFINITION
from core.run_folder import RunFolder, read_json
from core.settings import Settings

__all__ = [
    "EXPORT_FORMATS",
    "ExportError",
    "Selection",
    "bundle",
    "figures",
    "html_report",
    "records_table",
    "select",
    "summaries_frame",
    "table_files",
    "verdict_lines",
    "write_export",
    "write_pngs",
]

EXPORT_FORMATS = ("csv", "parquet", "html", "png")
REPO = Path(__file__).resolve().parent.parent
DEFAULT_CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
PNG_WIDTH, PNG_HEIGHT = 1000, 420
_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_VERDICT_METRICS = ("output_throughput", "median_ttft_ms", "median_itl_ms")


class ExportError(ServeLabError):
    """An export could not be produced (for PNG: no working browser)."""


# --- what to export ---------------------------------------------------------------------------


@dataclass
class Selection:
    """The runs to export, in order (the baseline first for a comparison)."""

    views: list[RunView]
    kind: Literal["run", "comparison", "experiment"]
    name: str
    baseline: int = 0
    run_meta: dict[str, dict[str, Any]] = field(default_factory=dict)
    experiment: dict[str, Any] | None = None
    settings: Settings | None = None

    @property
    def labels(self) -> list[str]:
        return run_labels(self.views)


def _experiment(settings: Settings, exp_id: str) -> dict[str, Any] | None:
    data = read_json(settings.data_dir / "experiments" / exp_id / "experiment.json")
    return data if isinstance(data, dict) else None


def select(settings: Settings, ids: Sequence[str], baseline: str | None = None) -> Selection:
    """Run ids (``RUN_ID``) and experiment ids (``exp-...``) -> a Selection. One run is a
    run export, several a comparison, one experiment id its runs with arm and trial."""
    if not ids:
        raise ConfigError("RUN_ID", "name at least one run (or an experiment exp-...)")
    views: list[RunView] = []
    meta: dict[str, dict[str, Any]] = {}
    experiment: dict[str, Any] | None = None
    for ident in ids:
        if not _ID_RE.fullmatch(ident) or ".." in ident:
            raise ConfigError("RUN_ID", f"{ident[:60]!r} is not a run or experiment id")
        record = _experiment(settings, ident) if ident.startswith("exp-") else None
        if record is not None:
            experiment = record if len(ids) == 1 else None
            for r in record.get("runs", []):
                rid = str(r.get("run_id"))
                if (settings.runs_dir / rid / "spec.json").is_file():
                    views.append(load_run(RunFolder(settings.runs_dir / rid)))
                    meta[rid] = {"experiment_id": ident, "arm": r.get("arm"),
                                 "trial": r.get("trial")}
            continue
        path = settings.runs_dir / ident
        if not (path / "spec.json").is_file():
            raise ConfigError("RUN_ID", f"no run or experiment {ident}; `python -m core runs` "
                                        "lists runs")
        views.append(load_run(RunFolder(path)))
    if not views:
        raise ConfigError("RUN_ID", f"{', '.join(ids)}: no runs to export")
    base = 0
    if baseline:
        ids_in = [v.run_id for v in views]
        if baseline not in ids_in:
            raise ConfigError("--baseline", f"{baseline} is not one of the exported runs")
        base = ids_in.index(baseline)
    if experiment is not None:
        kind: Literal["run", "comparison", "experiment"] = "experiment"
        name = str(experiment.get("experiment_id"))
    elif len(views) == 1:
        kind, name = "run", views[0].run_id
    else:
        kind = "comparison"
        name = "compare-" + "-vs-".join(v.run_id for v in views[:3])
        if len(views) > 3:
            name += f"-and-{len(views) - 3}-more"
    return Selection(views=views, kind=kind, name=name[:150], baseline=base, run_meta=meta,
                     experiment=experiment, settings=settings)


def selection_of(views: Sequence[RunView], baseline: int = 0) -> Selection:
    """A Selection of already-loaded views (the portal's pages)."""
    views = list(views)
    kind: Literal["run", "comparison", "experiment"] = ("run" if len(views) == 1
                                                        else "comparison")
    name = views[0].run_id if len(views) == 1 else "compare-" + "-vs-".join(
        v.run_id for v in views[:3])
    return Selection(views=views, kind=kind, name=name[:150], baseline=baseline)


# --- origin -----------------------------------------------------------------------------------


def origin_of(view: RunView) -> dict[str, Any] | None:
    """The import block of an imported run; None for a run ServeLab launched."""
    if not view.imported:
        return None
    block = view.spec.get("import")
    return block if isinstance(block, dict) else {}


def _origin_text(view: RunView) -> str:
    origin = origin_of(view)
    if origin is None:
        return "launched by ServeLab"
    return f"imported from {origin.get('source_file')} ({origin.get('format')})"


# --- tables -----------------------------------------------------------------------------------


def _cell(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return "; ".join(str(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True, default=str)
    return value


def _rate(value: Any) -> float | None:
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None


def summaries_frame(sel: Selection) -> pd.DataFrame:
    """One row per run and point: who, how, the load, every metric (ServeLab names)."""
    rows: list[dict[str, Any]] = []
    for label, v in zip(sel.labels, sel.views, strict=True):
        origin = origin_of(v)
        server = v.spec.get("server") or {}
        base = {"run_id": label, **sel.run_meta.get(v.run_id, {}),
                "origin": "import" if origin is not None else "launched",
                "source_file": (origin or {}).get("source_file"),
                "source_format": (origin or {}).get("format"),
                "state": v.status.get("state"), "engine": server.get("engine"),
                "engine_version": v.facts.get("engine_version"), "model": server.get("model"),
                "tags": "; ".join(str(t) for t in v.spec.get("tags") or [])}
        if not v.points:
            rows.append(base)
        for s in v.points:
            p = s.get("point") or {}
            m = s.get("metrics") or {}
            rows.append({
                **base, "point_index": s.get("index"), "point": s.get("label"),
                "concurrency": p.get("concurrency"), "request_rate": _rate(p.get("request_rate")),
                "input_len": p.get("input_len"), "output_len": p.get("output_len"),
                "num_prompts": p.get("num_prompts"),
                "has_records": has_records(v, s.get("index")),
                "prompts_digest": s.get("prompts_digest"),
                **{k: _cell(val) for k, val in m.items()},
                "unknown": "; ".join(s.get("unknown") or []) if origin is not None else None,
            })
    return pd.DataFrame(rows)


_DERIVED = ("ttft_ms", "e2e_ms", "n_chunks")


def records_table(sel: Selection) -> pa.Table:
    """Every per-request record of every point, with ``run_id``, ``point_index``,
    ``point`` and TTFT/E2E in ms. Imported runs have none (their summaries say so)."""
    from core.records import RECORD_SCHEMA

    parts: list[pa.Table] = []
    for label, v in zip(sel.labels, sel.views, strict=True):
        if v.path is None:
            continue
        folder = RunFolder(v.path)
        for s in v.points:
            idx = s.get("index")
            if not has_records(v, idx):
                continue
            t = folder.read_table(f"points/{idx:03d}/records.parquet")
            if t is None or t.num_rows == 0:
                continue
            rows = t.to_pylist()
            ttft = [(r["chunk_s"][0] - r["send_s"]) * 1000.0 if r.get("chunk_s") else None
                    for r in rows]
            e2e = [(r["end_s"] - r["send_s"]) * 1000.0 if r.get("end_s") is not None else None
                   for r in rows]
            n = t.num_rows
            t = t.add_column(0, "point", pa.array([s.get("label")] * n, pa.string()))
            t = t.add_column(0, "point_index", pa.array([idx] * n, pa.int32()))
            t = t.add_column(0, "run_id", pa.array([label] * n, pa.string()))
            t = t.append_column("ttft_ms", pa.array(ttft, pa.float64()))
            t = t.append_column("e2e_ms", pa.array(e2e, pa.float64()))
            t = t.append_column("n_chunks", pa.array([len(r.get("chunk_s") or [])
                                                      for r in rows], pa.int32()))
            parts.append(t)
    if not parts:
        fields = [pa.field("run_id", pa.string()), pa.field("point_index", pa.int32()),
                  pa.field("point", pa.string()), *RECORD_SCHEMA,
                  pa.field("ttft_ms", pa.float64()), pa.field("e2e_ms", pa.float64()),
                  pa.field("n_chunks", pa.int32())]
        return pa.schema(fields).empty_table()
    return pa.concat_tables(parts, promote_options="default")


def config_frame(sel: Selection) -> pd.DataFrame:
    """Every compared field (spec, facts, launch argv) per run."""
    flats = [flatten_config(v) for v in sel.views]
    fields: list[str] = []
    for flat in flats:
        fields += [f for f in flat if f not in fields]
    rows = [{"field": f, **{lab: flat.get(f) for lab, flat in zip(sel.labels, flats,
                                                                  strict=True)}}
            for f in fields]
    return pd.DataFrame(rows, columns=["field", *sel.labels], dtype=object)


def _arm_stats(sel: Selection) -> pd.DataFrame | None:
    settings = sel.settings
    if sel.experiment is None or settings is None:
        return None
    from core.experiments import experiment_runs
    from core.stats import arm_stats

    arms = [a.get("label") for a in (sel.experiment.get("spec") or {}).get("arms", [])]
    runs = experiment_runs(settings, sel.experiment)
    if not runs or not arms:
        return None
    base = (sel.experiment.get("spec") or {}).get("baseline") or arms[-1]
    return arm_stats(runs, str(base))


def _frames(sel: Selection) -> dict[str, Any]:
    frames: dict[str, Any] = {"summaries": summaries_frame(sel), "records": records_table(sel),
                              "config": config_frame(sel)}
    if len(sel.views) >= 2:
        frames["deltas"] = metric_deltas(sel.views, baseline=sel.baseline)
        frames["config_diff"] = config_diff(sel.views)
    stats = _arm_stats(sel)
    if stats is not None:
        frames["arm_stats"] = stats
    return frames


def _arrow_safe(df: pd.DataFrame) -> pd.DataFrame:
    """Object columns Parquet can store: all-numeric -> float, mixed -> text."""
    out = df.copy()
    for col in out.columns:
        if out[col].dtype != object:
            continue
        values = [v for v in out[col] if v is not None and not (isinstance(v, float)
                                                                and math.isnan(v))]
        if values and all(isinstance(v, int | float) and not isinstance(v, bool)
                          for v in values):
            out[col] = pd.to_numeric(out[col], errors="coerce").astype("float64")
        elif values and all(isinstance(v, bool) for v in values):
            continue
        elif values and not all(isinstance(v, str) for v in values):
            out[col] = [None if v is None or (isinstance(v, float) and math.isnan(v))
                        else str(_cell(v)) for v in out[col]]
    out.columns = [str(c) for c in out.columns]
    return out


def _csv_records(table: pa.Table) -> bytes:
    df = table.to_pandas()
    for col in df.columns:
        if df[col].dtype == object and any(isinstance(v, list | tuple) or hasattr(v, "tolist")
                                           for v in df[col].head(50)):
            df[col] = [None if v is None else json.dumps(list(v)) for v in df[col]]
    text: str = df.to_csv(index=False)
    return text.encode()


def table_files(sel: Selection, fmt: Literal["csv", "parquet"]) -> dict[str, bytes]:
    """File name -> bytes for every table of the selection."""
    if fmt not in ("csv", "parquet"):
        raise ConfigError("--format", f"{fmt!r}: tables export as csv or parquet")
    out: dict[str, bytes] = {}
    for name, frame in _frames(sel).items():
        buf = io.BytesIO()
        if isinstance(frame, pa.Table):
            if fmt == "csv":
                out[f"{name}.csv"] = _csv_records(frame)
                continue
            pq.write_table(frame, buf)
        elif fmt == "csv":
            frame.to_csv(buf, index=False)
        else:
            pq.write_table(pa.Table.from_pandas(_arrow_safe(frame), preserve_index=False), buf)
        out[f"{name}.{fmt}"] = buf.getvalue()
    return out


def bundle(sel: Selection, fmt: Literal["csv", "parquet"]) -> bytes:
    """The tables as one zip (the portal's download buttons)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, content in table_files(sel, fmt).items():
            zf.writestr(f"{sel.name}/{name}", content)
    return buf.getvalue()


# --- verdict and figures ----------------------------------------------------------------------


def _fmt(value: float) -> str:
    return f"{value:,.4g}" if abs(value) < 1e5 else f"{value:,.0f}"


def verdict_lines(sel: Selection) -> list[str]:
    """One sentence per non-baseline run: the headline metrics at the heaviest load all
    runs share, better/worse by each metric's direction, and why it may not hold."""
    views = sel.views
    if sel.experiment is not None:
        return _experiment_verdict(sel)
    if len(views) < 2:
        v = views[0]
        last = v.points[-1] if v.points else None
        if last is None:
            return [f"Single run {v.run_id} ({v.status.get('state')}): no benchmark points."]
        m = last.get("metrics") or {}
        parts = [f"{k} {_fmt(m[k])}" for k in _VERDICT_METRICS
                 if isinstance(m.get(k), int | float)]
        return [f"Single run {v.run_id} at {last.get('label')}: "
                + (", ".join(parts) or "no headline metric known") + "."]
    labels = sel.labels
    complete = [mp for mp in match_points(views) if mp.complete]
    if not complete:
        return ["No load point is common to all runs, so no point-by-point verdict: the runs "
                "were measured at different loads (an imported run may not state its load; "
                "give it at import with --concurrency/--input-len/--output-len)."]
    head = complete[-1]
    deltas = metric_deltas(views, baseline=sel.baseline, metrics=_VERDICT_METRICS)
    rows = deltas[deltas["point"] == head.label]
    base = labels[sel.baseline]
    lines = []
    conf = confounders(views)
    for i, lab in enumerate(labels):
        if i == sel.baseline:
            continue
        parts = []
        for _, r in rows.iterrows():
            rel, verdict = r[f"rel_{lab}"], r[f"verdict_{lab}"]
            if verdict is None or pd.isna(r[lab]):
                parts.append(f"{r['metric']} unknown")
            elif pd.isna(rel):
                parts.append(f"{r['metric']} {_fmt(r[lab])} ({verdict})")
            else:
                parts.append(f"{r['metric']} {rel:+.1%} ({verdict})")
        line = f"{lab} vs {base} at {head.label}: " + ", ".join(parts) + "."
        if conf:
            line = ("Inconclusive: more than the intended knob differs ("
                    + ", ".join(conf[:6]) + ("…" if len(conf) > 6 else "") + "). " + line)
        lines.append(line)
    return lines


def _experiment_verdict(sel: Selection) -> list[str]:
    exp = sel.experiment or {}
    spec = exp.get("spec") or {}
    if sel.settings is None:
        return [f"Experiment {exp.get('experiment_id')}."]
    try:
        from core.experiments import experiment_runs
        from core.stats import arm_stats, verdict

        settings = sel.settings
        arms = [a.get("label") for a in spec.get("arms", [])]
        runs = experiment_runs(settings, exp)
        base = spec.get("baseline") or arms[-1]
        return [str(verdict(str(spec.get("name")), arm_stats(runs, str(base)), runs,
                            str(base), None))]
    except Exception as exc:  # the experiment tools are optional for a report
        return [f"Experiment {exp.get('experiment_id')}: no verdict ({type(exc).__name__})."]


def _headline_point(sel: Selection) -> tuple[str, list[tuple[str, RunView, Any]]] | None:
    """The heaviest load the baseline measured, and each run's index there."""
    base = sel.views[sel.baseline]
    if not base.points:
        return None
    label = str(base.points[-1].get("label"))
    out = []
    for lab, v in zip(sel.labels, sel.views, strict=True):
        idx = next((s.get("index") for s in v.points if s.get("label") == label), None)
        out.append((lab, v, idx))
    return label, out


def figures(sel: Selection) -> tuple[dict[str, go.Figure], list[str]]:
    """The charts of a run, comparison or experiment, and notes on what could not be drawn
    (imported runs have no per-request records, hence no CDF)."""
    figs: dict[str, go.Figure] = {}
    notes: list[str] = []
    views = sel.views
    figs["output_throughput_vs_concurrency"] = metric_vs_concurrency(views,
                                                                     "output_throughput")
    figs["median_ttft_vs_concurrency"] = metric_vs_concurrency(views, "median_ttft_ms")
    figs["median_itl_vs_concurrency"] = metric_vs_concurrency(views, "median_itl_ms")
    head = _headline_point(sel)
    if head is not None:
        label, per_run = head
        series: dict[str, list[float]] = {}
        missing = []
        for lab, v, idx in per_run:
            if idx is not None and has_records(v, idx) and v.path is not None:
                series[lab] = latency_samples(RunFolder(v.path), idx, "ttft")
            else:
                missing.append(lab)
        for lab, v, _ in per_run:
            if lab in missing:
                notes.append(f"No TTFT distribution at {label}: {no_records_note(v)}")
        if series:
            figs["ttft_cdf"] = cdf_figure(series, f"TTFT (ms) at {label}")
    head_df = memory_headroom(views if sel.experiment is None else _first_per_arm(sel))
    figs["memory_headroom"] = memory_headroom_figure(head_df)
    return figs, notes


def _first_per_arm(sel: Selection) -> list[RunView]:
    seen: dict[Any, RunView] = {}
    for v in sel.views:
        seen.setdefault(sel.run_meta.get(v.run_id, {}).get("arm", v.run_id), v)
    return list(seen.values())


# --- HTML -------------------------------------------------------------------------------------

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;
max-width:1200px;color:#222;padding:0 16px}
h1{font-size:1.6em;margin-bottom:4px}h2{margin-top:32px;border-bottom:1px solid #ddd}
.verdict{font-size:1.1em;background:#f4f7fb;border-left:4px solid #4c78a8;padding:8px 12px}
.warn{background:#fff7e6;border-left:4px solid #f0a000;padding:6px 12px;margin:6px 0}
.note{color:#555;font-size:.92em}
table{border-collapse:collapse;font-size:.86em;margin:8px 0;display:block;overflow-x:auto}
th,td{border:1px solid #ddd;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#f0f0f0}td.better{background:#d4edda}td.worse{background:#f8d7da}
code{font-size:.9em;white-space:pre-wrap;word-break:break-all}
"""


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _num_text(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, float):
        return _fmt(value)
    return str(value)


def _deltas_html(df: pd.DataFrame) -> str:
    if df.empty:
        return "<p class='note'>No matched points.</p>"
    head = "".join(f"<th>{_e(c)}</th>" for c in df.columns)
    body = []
    for _, row in df.iterrows():
        cells = []
        for col in df.columns:
            v = row[col]
            cls = ""
            if str(col).startswith("verdict_") and v in ("better", "worse"):
                cls = f" class='{v}'"
            if str(col).startswith("rel_"):
                text = "–" if v is None or pd.isna(v) else f"{v:+.1%}"
            else:
                text = _num_text(v)
            cells.append(f"<td{cls}>{_e(text)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _frame_html(df: pd.DataFrame) -> str:
    if df.empty:
        return "<p class='note'>(empty)</p>"
    shown = df.map(_num_text) if hasattr(df, "map") else df
    return str(shown.to_html(index=False, escape=True, na_rep="–", border=0))


def _git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                             capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() or "unknown"


def _provenance(sel: Selection) -> str:
    rows = []
    for lab, v in zip(sel.labels, sel.views, strict=True):
        launch = v.launch or {}
        argv = launch.get("argv")
        command = launch.get("command") or (" ".join(map(str, argv))
                                            if isinstance(argv, list) else None)
        gpus = v.facts.get("gpus")
        gpu_text = ", ".join(str(g.get("name")) for g in gpus if isinstance(g, dict)) \
            if isinstance(gpus, list) else None
        server = v.spec.get("server") or {}
        meta = sel.run_meta.get(v.run_id, {})
        rows.append(
            f"<tr><td>{_e(lab)}</td><td>{_e(v.status.get('state'))}</td>"
            f"<td>{_e(_origin_text(v))}</td>"
            f"<td>{_e(meta.get('arm'))}{' / trial ' + _e(meta.get('trial')) if meta else ''}"
            f"</td><td>{_e(server.get('engine'))} {_e(v.facts.get('engine_version') or '')}</td>"
            f"<td>{_e(server.get('model'))}</td>"
            f"<td><code>{_e(command or '(no launch command recorded)')}</code></td>"
            f"<td>{_e(gpu_text or 'none recorded')}</td>"
            f"<td>{_e(v.facts.get('facts_source'))}</td>"
            f"<td>{_e(v.spec.get('created_at'))}<br>{_e(v.status.get('finished_at'))}</td></tr>")
    host = (sel.experiment or {}).get("host")
    return (
        "<table><thead><tr><th>run</th><th>state</th><th>origin</th><th>arm</th>"
        "<th>engine</th><th>model</th><th>command</th><th>GPUs</th><th>facts from</th>"
        "<th>created / finished</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
        + (f"<p>Experiment host: {_e(host)}</p>" if host else "")
        + "<p class='note'>Report generated "
        + _e(datetime.now(UTC).isoformat(timespec="seconds"))
        + f" on {_e(platform.node())} by ServeLab {_e(_git_commit())}, Python "
        + _e(platform.python_version()) + f", plotly {_e(_plotly_version())}. Metric "
        + f"definitions: {_e(DEFINITION)} (docs/METRICS.md).</p>")


def _plotly_version() -> str:
    import plotly

    return str(getattr(plotly, "__version__", "?"))


def _origin_notes(sel: Selection) -> list[str]:
    notes = []
    for lab, v in zip(sel.labels, sel.views, strict=True):
        origin = origin_of(v)
        if origin is None:
            continue
        unknown = sorted({u for s in v.points for u in s.get("unknown") or []
                          if u in HEADLINE_METRICS or u.startswith("point.")})
        notes.append(f"{lab} is {_origin_text(v)}: no per-request records"
                     + (f"; not stated: {', '.join(unknown)}" if unknown else "") + ".")
    return notes


def html_report(sel: Selection) -> str:
    """The whole report as one HTML string: no external file, script or font."""
    views = sel.views
    labels = sel.labels
    if sel.kind == "comparison":
        title = (f"ServeLab comparison: {' vs '.join(labels[:4])}"
                 + (" …" if len(labels) > 4 else ""))
    elif sel.kind == "experiment":
        spec = (sel.experiment or {}).get("spec") or {}
        title = f"ServeLab experiment {sel.name}: {spec.get('name', '')}"
    else:
        title = f"ServeLab run {labels[0]}"
    parts = [f"<!doctype html><html lang='en'><head><meta charset='utf-8'>"
             f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>",
             f"<h1>{_e(title)}</h1>"]
    if len(views) > 1:
        parts.append(f"<p class='note'>Baseline: {_e(labels[sel.baseline])}. Deltas are "
                     "against it; better/worse follows each metric's direction.</p>")
    parts += [f"<p class='verdict'><b>Verdict:</b> {_e(line)}</p>" for line in
              verdict_lines(sel)]
    conf = confounders(views) if len(views) > 1 else []
    if conf:
        parts.append(f"<p class='warn'>More than the intended knob differs: "
                     f"{_e(', '.join(conf))}.</p>")
    for lab, fields in (unknown_fields(views) if len(views) > 1 else {}).items():
        parts.append(f"<p class='warn'>{_e(lab)} does not state {len(fields)} compared "
                     f"field(s), so they cannot be checked: {_e(', '.join(fields[:12]))}"
                     f"{' …' if len(fields) > 12 else ''}.</p>")
    parts += [f"<p class='warn'>{_e(n)}</p>" for n in _origin_notes(sel)]

    parts.append("<h2>Metrics</h2>")
    if len(views) > 1:
        parts.append(_deltas_html(metric_deltas(views, baseline=sel.baseline)))
    summ = summaries_frame(sel)
    cols = [c for c in ("run_id", "arm", "trial", "point", "origin", "completed",
                        "num_requests", *HEADLINE_METRICS, "concurrency")
            if c in summ.columns]
    parts.append("<h3>Per run and point</h3>" + _frame_html(summ[cols].loc[
        :, ~pd.Index(cols).duplicated()]))
    stats = _arm_stats(sel)
    if stats is not None:
        parts.append("<h3>Per arm (mean over trials, interval)</h3>" + _frame_html(stats))

    parts.append("<h2>Charts</h2>")
    figs, notes = figures(sel)
    parts += [f"<p class='note'>{_e(n)}</p>" for n in notes]
    first = True
    for name, fig in figs.items():
        div = fig.to_html(full_html=False, include_plotlyjs=first, div_id=f"chart-{name}",
                          config={"displaylogo": False, "responsive": True})
        parts.append(f"<div class='chart' data-chart='{_e(name)}'>{div}</div>")
        first = False

    parts.append("<h2>Configuration</h2>")
    if len(views) > 1:
        diff = config_diff(views)
        parts.append("<p>Fields that differ:</p>" + (
            _frame_html(diff.astype(str)) if not diff.empty
            else "<p>The configurations are identical.</p>"))
    parts.append("<details><summary>Every field</summary>"
                 + _frame_html(config_frame(sel).astype(str)) + "</details>")
    parts.append("<h2>Provenance</h2>" + _provenance(sel))
    parts.append("</body></html>")
    return "\n".join(parts)


# --- PNG --------------------------------------------------------------------------------------


def chromium_path() -> str | None:
    """Debian's chromium (or ``BROWSER_PATH``): kaleido and Playwright never download one."""
    env = os.environ.get("BROWSER_PATH")
    if env:
        return env
    return DEFAULT_CHROMIUM if Path(DEFAULT_CHROMIUM).exists() else None


def _kaleido_pngs(figs: dict[str, go.Figure], out_dir: Path) -> list[Path]:
    import kaleido

    paths = [out_dir / f"{name}.png" for name in figs]
    items = [{"fig": fig, "path": str(path),
              "opts": {"format": "png", "width": PNG_WIDTH, "height": PNG_HEIGHT}}
             for fig, path in zip(figs.values(), paths, strict=True)]
    kopts: dict[str, Any] = {"mathjax": False}  # the default MathJax is a CDN URL
    if (browser := chromium_path()) is not None:
        kopts["path"] = browser
    kaleido.write_fig_from_object_sync(items, kopts=kopts)
    missing = [p.name for p in paths if not p.is_file() or p.stat().st_size == 0]
    if missing:
        raise ExportError(f"kaleido wrote no {', '.join(missing)}")
    return paths


def _playwright_pngs(figs: dict[str, go.Figure], out_dir: Path) -> list[Path]:
    from playwright.sync_api import sync_playwright

    browser_path = chromium_path()
    if browser_path is None:
        raise ExportError("no chromium: install Debian's chromium or set BROWSER_PATH")
    paths = []
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=browser_path, headless=True,
                                     args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": PNG_WIDTH + 40,
                                              "height": PNG_HEIGHT + 40})
            for name, fig in figs.items():
                page_path = Path(tmp) / f"{name}.html"
                fig.write_html(page_path, include_plotlyjs="directory", full_html=True,
                               default_width=f"{PNG_WIDTH}px", default_height=f"{PNG_HEIGHT}px")
                page.goto(page_path.as_uri())
                page.wait_for_selector(".main-svg", timeout=30_000)
                out = out_dir / f"{name}.png"
                page.locator(".plotly-graph-div").first.screenshot(path=str(out))
                paths.append(out)
        finally:
            browser.close()
    return paths


def write_pngs(figs: dict[str, go.Figure], out_dir: Path) -> tuple[list[Path], str]:
    """Each figure as ``<name>.png``; returns the paths and which renderer drew them
    (kaleido first; a Playwright screenshot where kaleido cannot start the browser)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        return _kaleido_pngs(figs, out_dir), "kaleido"
    except Exception as exc:  # kaleido missing, or it could not drive the browser
        kaleido_error = f"{type(exc).__name__}: {exc}"
    try:
        return _playwright_pngs(figs, out_dir), f"playwright (kaleido failed: {kaleido_error})"
    except Exception as exc:
        raise ExportError(f"no PNG renderer worked. kaleido: {kaleido_error}; playwright: "
                          f"{type(exc).__name__}: {exc}") from exc


# --- one call ---------------------------------------------------------------------------------


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

