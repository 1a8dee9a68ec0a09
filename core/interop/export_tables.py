"""A selection's tables (``core.interop.selection``) as CSV or Parquet: ``summaries`` (one row per
run and point, ServeLab's metric names, imported runs with their origin and ``unknown``
list), ``records`` (every per-request record, with ``run_id``/``point_index`` and TTFT/E2E
in ms), ``config`` (every compared field per run), and for two or more runs ``deltas``
(not for an experiment: its differences are per arm over trials), ``config_diff`` and
``summary_card`` (the card the pages show); for an experiment ``arm_stats``; ``timelines``
(the server's and the client's series per run and point, downsampled:
``core.analysis.timelines``). Tables are keyed by run id (machine-readable); ``summaries``
also carries each run's display ``name``.
"""

from __future__ import annotations

import io
import json
import math
import zipfile
from typing import Any, Literal

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from core.analysis.card import card_frame
from core.analysis.diff import config_diff, flatten_config
from core.analysis.points import metric_deltas
from core.analysis.runs import has_records
from core.analysis.timelines import run_timeline, timelines_table
from core.errors import ConfigError
from core.interop.selection import Selection, origin_of
from core.metrics import point_cancelled, point_caveats, point_error_rate, rate_value
from core.run_folder import RunFolder
from core.shapes import model_label
from core.views.answers import answers_frame

__all__ = [
    "arm_stats_frame",
    "bundle",
    "config_frame",
    "effects_of",
    "records_table",
    "summaries_frame",
    "table_files",
]


def _cell(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return "; ".join(str(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True, default=str)
    return value


def summaries_frame(sel: Selection) -> pd.DataFrame:
    """One row per run and point: who, how, the load, every metric (ServeLab names)."""
    rows: list[dict[str, Any]] = []
    for label, name, v in zip(sel.labels, sel.names, sel.views, strict=True):
        origin = origin_of(v)
        server = v.spec.get("server") or {}
        base = {
            "run_id": label,
            "name": name,
            **sel.run_meta.get(v.run_id, {}),
            "origin": "import" if origin is not None else "launched",
            "source_file": (origin or {}).get("source_file"),
            "source_format": (origin or {}).get("format"),
            "state": v.status.state,
            "engine": server.get("engine"),
            "engine_version": v.facts.get("engine_version"),
            "model": model_label(server),  # a shape run: the shape, "(dummy weights)"
            "tags": "; ".join(str(t) for t in v.spec.get("tags") or []),
        }
        if not v.points:
            rows.append(base)
        for s in v.points:
            p = s.get("point") or {}
            m = s.get("metrics") or {}
            rows.append(
                {
                    **base,
                    "point_index": s.get("index"),
                    "point": s.get("label"),
                    "concurrency": p.get("concurrency"),
                    "request_rate": rate_value(p.get("request_rate")),
                    "input_len": p.get("input_len"),
                    "output_len": p.get("output_len"),
                    "num_prompts": p.get("num_prompts"),
                    "has_records": has_records(v, s.get("index")),
                    "prompts_digest": s.get("prompts_digest"),
                    **{k: _cell(val) for k, val in m.items()},
                    "error_rate": point_error_rate(s, v.status),
                    "cancelled": point_cancelled(s, v.status),
                    "read_with_care": "; ".join(
                        f"{c.kind} ({c.detail})" for c in point_caveats(s, v.status)
                    )
                    or None,
                    "unknown": "; ".join(s.get("unknown") or []) if origin is not None else None,
                }
            )
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
            ttft = [
                (r["chunk_s"][0] - r["send_s"]) * 1000.0 if r.get("chunk_s") else None for r in rows
            ]
            e2e = [
                (r["end_s"] - r["send_s"]) * 1000.0 if r.get("end_s") is not None else None
                for r in rows
            ]
            n = t.num_rows
            t = t.add_column(0, "point", pa.array([s.get("label")] * n, pa.string()))
            t = t.add_column(0, "point_index", pa.array([idx] * n, pa.int32()))
            t = t.add_column(0, "run_id", pa.array([label] * n, pa.string()))
            t = t.append_column("ttft_ms", pa.array(ttft, pa.float64()))
            t = t.append_column("e2e_ms", pa.array(e2e, pa.float64()))
            t = t.append_column(
                "n_chunks", pa.array([len(r.get("chunk_s") or []) for r in rows], pa.int32())
            )
            parts.append(t)
    if not parts:
        fields = [
            pa.field("run_id", pa.string()),
            pa.field("point_index", pa.int32()),
            pa.field("point", pa.string()),
            *RECORD_SCHEMA,
            pa.field("ttft_ms", pa.float64()),
            pa.field("e2e_ms", pa.float64()),
            pa.field("n_chunks", pa.int32()),
        ]
        return pa.schema(fields).empty_table()
    return pa.concat_tables(parts, promote_options="default")


def config_frame(sel: Selection) -> pd.DataFrame:
    """Every compared field (spec, facts, launch argv) per run."""
    flats = [flatten_config(v) for v in sel.views]
    fields: list[str] = []
    for flat in flats:
        fields += [f for f in flat if f not in fields]
    rows = [
        {"field": f, **{lab: flat.get(f) for lab, flat in zip(sel.labels, flats, strict=True)}}
        for f in fields
    ]
    return pd.DataFrame(rows, columns=["field", *sel.labels], dtype=object)


def arm_stats_frame(sel: Selection) -> pd.DataFrame | None:
    """An experiment's per-arm means and intervals against its baseline arm."""
    settings = sel.settings
    if sel.experiment is None or settings is None or sel.story is None:
        return None
    from core.analysis.card import arm_table
    from core.analysis.trials import experiment_runs

    runs = experiment_runs(settings, sel.experiment)
    if not runs or not sel.story.baseline:
        return None
    return arm_table(runs, sel.story)


def effects_of(sel: Selection) -> tuple[list[str], pd.DataFrame] | None:
    """A grid experiment's attribution: verdict sentences and every effect
    (core/analysis/attribution)."""
    if sel.experiment is None or sel.settings is None:
        return None
    from core.analysis.attribution import experiment_effects

    story = sel.story
    return experiment_effects(
        sel.settings, sel.experiment, story.untested_knobs if story is not None else ()
    )


def _frames(sel: Selection) -> dict[str, Any]:
    frames: dict[str, Any] = {
        "summaries": summaries_frame(sel),
        "records": records_table(sel),
        "config": config_frame(sel),
    }
    if len(sel.views) >= 2:
        # an experiment's differences are per arm over trials (summary_card, arm_stats):
        # single-run deltas against one baseline run would tell another story
        if sel.experiment is None:
            frames["deltas"] = metric_deltas(sel.views, baseline=sel.baseline)
        frames["config_diff"] = config_diff(sel.views)
    if sel.story is not None:
        frames["summary_card"] = card_frame(sel.story.card)
        if sel.story.answers:  # same / differs / broken per arm (core.analysis.same_answers)
            frames["answers"] = answers_frame(sel.story.answers)
    stats = arm_stats_frame(sel)
    if stats is not None:
        frames["arm_stats"] = stats
    if (effects := effects_of(sel)) is not None:
        frames["effects"] = effects[1]
    # the server's view and the client's over time, downsampled (core.analysis.timelines)
    frames["timelines"] = timelines_table(sel.names, [run_timeline(v) for v in sel.views])
    return frames


def _arrow_safe(df: pd.DataFrame) -> pd.DataFrame:
    """Object columns Parquet can store: all-numeric -> float, mixed -> text."""
    out = df.copy()
    for col in out.columns:
        if out[col].dtype != object:
            continue
        values = [
            v for v in out[col] if v is not None and not (isinstance(v, float) and math.isnan(v))
        ]
        if values and all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            out[col] = pd.to_numeric(out[col], errors="coerce").astype("float64")
        elif values and all(isinstance(v, bool) for v in values):
            continue
        elif values and not all(isinstance(v, str) for v in values):
            out[col] = [
                None if v is None or (isinstance(v, float) and math.isnan(v)) else str(_cell(v))
                for v in out[col]
            ]
    out.columns = [str(c) for c in out.columns]
    return out


def _csv_records(table: pa.Table) -> bytes:
    df = table.to_pandas()
    for col in df.columns:
        if df[col].dtype == object and any(
            isinstance(v, list | tuple) or hasattr(v, "tolist") for v in df[col].head(50)
        ):
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
