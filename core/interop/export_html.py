"""The HTML report of a selection (``core.interop.selection``): one file that opens from disk with
no network: the verdict and summary card (the same story as the pages), the tables, the
plotly charts (plotly.js inlined once), the configuration diff and the provenance (launch
commands, engine and ServeLab versions, hosts)."""

from __future__ import annotations

import html
import platform
import subprocess
from datetime import UTC, datetime
from typing import Any

import pandas as pd

from core.analysis.card import card_grid, regression_lines
from core.analysis.diff import config_diff, confounders, unknown_fields
from core.analysis.points import HEADLINE_METRICS, metric_deltas
from core.interop.export_charts import figures
from core.interop.export_tables import arm_stats_frame, config_frame, effects_of, summaries_frame
from core.interop.selection import Selection, origin_of, origin_text, verdict_lines
from core.metrics import DEFINITION
from core.numbers import number_text, pct_text, trial_number, trial_text
from core.settings import REPO_ROOT
from core.shapes import runs_routing, shapes_line
from core.views.cells import readable_cells

__all__ = ["html_report"]

REPO = REPO_ROOT


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
    if value is None or isinstance(value, int | float):
        return number_text(value)  # "—" for None and NaN, as on the pages
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
            # single-run deltas: no interval backs a direction, so no cell is painted
            # better / worse (the summary card colours only confirmed changes)
            cls = ""
            text = pct_text(v) if str(col).startswith("rel_") else _num_text(v)
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
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() or "unknown"


def _provenance(sel: Selection) -> str:
    rows = []
    for lab, name, v in zip(sel.labels, sel.names, sel.views, strict=True):
        launch = v.launch or {}
        argv = launch.get("argv")
        command = launch.get("command") or (
            " ".join(map(str, argv)) if isinstance(argv, list) else None
        )
        gpus = v.facts.get("gpus")
        gpu_text = (
            ", ".join(str(g.get("name")) for g in gpus if isinstance(g, dict))
            if isinstance(gpus, list)
            else None
        )
        server = v.spec.get("server") or {}
        meta = sel.run_meta.get(v.run_id, {})
        rows.append(
            f"<tr><td>{_e(name)}<br><span class='note'>{_e(lab)}</span></td>"
            f"<td>{_e(v.status.state)}</td>"
            f"<td>{_e(origin_text(v))}</td>"
            f"<td>{_e(meta.get('arm'))}{' / ' + _e(trial_text(meta.get('trial'))) if meta else ''}"
            f"</td><td>{_e(server.get('engine'))} {_e(v.facts.get('engine_version') or '')}</td>"
            f"<td>{_e(server.get('model'))}</td>"
            f"<td><code>{_e(command or '(no launch command recorded)')}</code></td>"
            f"<td>{_e(gpu_text or 'none recorded')}</td>"
            f"<td>{_e(v.facts.get('facts_source'))}</td>"
            f"<td>{_e(v.spec.get('created_at'))}<br>{_e(v.status.finished_at)}</td></tr>"
        )
    host = sel.experiment.host if sel.experiment is not None else None
    return (
        "<table><thead><tr><th>run</th><th>state</th><th>origin</th><th>arm</th>"
        "<th>engine</th><th>model</th><th>command</th><th>GPUs</th><th>facts from</th>"
        "<th>created / finished</th></tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table>"
        + (f"<p>Experiment host: {_e(host)}</p>" if host else "")
        + "<p class='note'>Report generated "
        + _e(datetime.now(UTC).isoformat(timespec="seconds"))
        + f" on {_e(platform.node())} by ServeLab {_e(_git_commit())}, Python "
        + _e(platform.python_version())
        + f", plotly {_e(_plotly_version())}. Metric "
        + f"definitions: {_e(DEFINITION)} (docs/METRICS.md).</p>"
    )


def _plotly_version() -> str:
    import plotly

    return str(getattr(plotly, "__version__", "?"))


def _origin_notes(sel: Selection) -> list[str]:
    notes = []
    for lab, v in zip(sel.names, sel.views, strict=True):
        origin = origin_of(v)
        if origin is None:
            continue
        unknown = sorted(
            {
                u
                for s in v.points
                for u in s.get("unknown") or []
                if u in HEADLINE_METRICS or u.startswith("point.")
            }
        )
        notes.append(
            f"{lab} is {origin_text(v)}: no per-request records"
            + (f"; not stated: {', '.join(unknown)}" if unknown else "")
            + "."
        )
    return notes


def _card_html(sel: Selection) -> str:
    """The summary card, as on the pages: regressions in words, then per arm a grid of
    metric x concurrency with the change, its interval and better / worse / noise."""
    story = sel.story
    if story is None or not story.card:
        return ""
    out = [
        "<h2>Summary</h2>",
        f"<p class='note'>Baseline: {_e(story.baseline)}. {_e(story.noise)}</p>",
    ]
    if story.family:  # which contrasts may read better / worse, and under which rule
        out.append(f"<p class='note'>{_e(story.family)}</p>")
    regs = regression_lines(story.card)
    if regs:
        out.append(
            "<p class='warn'><b>Regressions</b><br>" + "<br>".join(_e(r) for r in regs) + "</p>"
        )
    if story.caveats:  # suspect points, as on the pages
        out.append(
            "<p class='warn'><b>Read with care</b><br>"
            + "<br>".join(_e(c.sentence()) for c in story.caveats)
            + "</p>"
        )
    for arm in dict.fromkeys(r.arm for r in story.card):
        text, verdicts = card_grid(story.card, arm)
        head = "".join(f"<th>{_e(c)}</th>" for c in text.columns)
        body = []
        for metric, row in text.iterrows():
            cells = []
            for col in text.columns:
                word = verdicts.loc[metric, col]
                cls = {"better": " class='better'", "worse": " class='worse'"}.get(str(word), "")
                cells.append(f"<td{cls}>{_e('' if pd.isna(row[col]) else row[col])}</td>")
            body.append(f"<tr><th>{_e(metric)}</th>{''.join(cells)}</tr>")
        out.append(
            f"<h3>{_e(arm)} vs {_e(story.baseline)}</h3><table><thead><tr><th></th>"
            f"{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
        )
    return "\n".join(out)


def _title(sel: Selection) -> str:
    labels = sel.names
    if sel.kind == "comparison":
        return f"ServeLab comparison: {' vs '.join(labels[:4])}" + (" …" if len(labels) > 4 else "")
    if sel.kind == "experiment":
        name = sel.experiment.name if sel.experiment is not None else None
        return f"ServeLab experiment {sel.name}: {name or ''}"
    return f"ServeLab run {labels[0]}"


def _warning_parts(sel: Selection) -> list[str]:
    """What makes the comparison less than clean: confounders, unstated fields, origins."""
    views = sel.views
    parts: list[str] = []
    conf = confounders(views) if len(views) > 1 else []
    if conf:
        parts.append(
            f"<p class='warn'>More than the intended knob differs: {_e(', '.join(conf))}.</p>"
        )
    unknown = unknown_fields(views) if len(views) > 1 else {}
    for lab, fields in (
        (dict(zip(sel.labels, sel.names, strict=True)).get(k, k), f) for k, f in unknown.items()
    ):
        parts.append(
            f"<p class='warn'>{_e(lab)} does not state {len(fields)} compared "
            f"field(s), so they cannot be checked: {_e(', '.join(fields[:12]))}"
            f"{' …' if len(fields) > 12 else ''}.</p>"
        )
    parts += [f"<p class='warn'>{_e(n)}</p>" for n in _origin_notes(sel)]
    routed = runs_routing(v.launch for v in views)
    if shape_line := shapes_line([v.spec for v in views], routed):  # dummy weights
        parts.append(f"<p class='warn'>{_e(shape_line)}</p>")
    return parts


def _summary_table(sel: Selection) -> pd.DataFrame:
    summ = summaries_frame(sel)
    cols = [
        c
        for c in (
            "name",
            "run_id",
            "arm",
            "trial",
            "point",
            "origin",
            "completed",
            "num_requests",
            *HEADLINE_METRICS,
            "concurrency",
        )
        if c in summ.columns
    ]
    shown = summ[cols].loc[:, ~pd.Index(cols).duplicated()]
    if "trial" in shown:  # counted from 1, as on the pages (the CSV keeps the stored index)
        shown = shown.assign(trial=shown["trial"].map(trial_number))
    return shown


def _metric_parts(sel: Selection) -> list[str]:
    views = sel.views
    parts = ["<h2>Metrics</h2>"]
    if len(views) > 1 and sel.experiment is None:  # an experiment's are per arm, below
        parts.append(_deltas_html(metric_deltas(views, baseline=sel.baseline, names=sel.names)))
    parts.append("<h3>Per run and point</h3>" + _frame_html(_summary_table(sel)))
    stats = arm_stats_frame(sel)
    if stats is not None:
        parts.append("<h3>Per arm (mean over trials, interval)</h3>" + _frame_html(stats))
    if (effects := effects_of(sel)) is not None:  # a knob grid: which knob did it
        parts.append(
            "<h3>Attribution (log-ratio effects, OLS with trial blocks)</h3>"
            + "".join(f"<p>{_e(line)}</p>" for line in effects[0])
            + _frame_html(effects[1])
        )
    return parts


def _chart_parts(sel: Selection) -> list[str]:
    parts = ["<h2>Charts</h2>"]
    figs, notes = figures(sel)
    parts += [f"<p class='note'>{_e(n)}</p>" for n in notes]
    first = True
    for name, fig in figs.items():
        div = fig.to_html(
            full_html=False,
            include_plotlyjs=first,
            div_id=f"chart-{name}",
            config={"displaylogo": False, "responsive": True},
        )
        parts.append(f"<div class='chart' data-chart='{_e(name)}'>{div}</div>")
        first = False
    return parts


def _config_parts(sel: Selection) -> list[str]:
    parts = ["<h2>Configuration</h2>"]
    if len(sel.views) > 1:
        diff = config_diff(sel.views, sel.names)
        parts.append(
            "<p>Fields that differ:</p>"
            + (
                _frame_html(readable_cells(diff))
                if not diff.empty
                else "<p>The configurations are identical.</p>"
            )
        )
    parts.append(
        "<details><summary>Every field</summary>"
        + _frame_html(config_frame(sel).astype(str))
        + "</details>"
    )
    return parts


def html_report(sel: Selection) -> str:
    """The whole report as one HTML string: no external file, script or font."""
    title = _title(sel)
    parts = [
        f"<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
    ]
    if sel.story is not None:  # an experiment's baseline is an arm, a comparison's a run
        parts.append(
            f"<p class='note'>Baseline: {_e(sel.story.baseline)}. Changes are "
            "against it; better/worse follows each metric's direction.</p>"
        )
    parts += [f"<p class='verdict'><b>Verdict:</b> {_e(line)}</p>" for line in verdict_lines(sel)]
    parts.append(_card_html(sel))
    parts += _warning_parts(sel)
    parts += _metric_parts(sel)
    parts += _chart_parts(sel)
    parts += _config_parts(sel)
    parts.append("<h2>Provenance</h2>" + _provenance(sel))
    parts.append("</body></html>")
    return "\n".join(parts)
