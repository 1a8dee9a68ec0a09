"""From a file to run folders: detect what a text holds, plan the runs it becomes, store them.

An imported run is an ordinary run folder (``data/runs/imp-<hash>/``) marked with its origin:
``spec.json`` and ``status.json`` carry ``"origin": "import"`` and an ``import`` block
(source file, format, tool, sha256, the values the user stated); ``facts.json`` holds what
the embedded ``server_info`` and/or an SGLang start-up log state; each point's
``summary.json`` has ServeLab's metric names (None where the source does not say, every
such name listed under ``unknown``) next to the values exactly as read. There is no
``records.parquet``: the sources hold no per-request timings.

The run id is a hash of the measured values, so importing the same results again (the
same file, or the same table pasted with other whitespace) finds the run already there
instead of storing a second copy.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.engines.registry import engine_for_backend
from core.engines.sglang_log import FAILURE_REASONS, parse_sglang_log
from core.errors import StoreError
from core.interop.importers.bench_json import parse_json
from core.interop.importers.bench_table import parse_tables
from core.interop.importers.result import POINT_FIELDS, BenchResult
from core.interop.importers.vocab import METRIC_KEYS, count, rate
from core.run_folder import RunFolder, run_result, utc_now
from core.settings import Settings

__all__ = [
    "MAX_TEXT_CHARS",
    "Given",
    "ParsedFile",
    "PlannedRun",
    "parse_text",
    "plan_runs",
    "store_runs",
]

MAX_TEXT_CHARS = 64 * 2**20
IMPORT_VERSION = 1
_SAFE_NAME_RE = re.compile(r"[^\w.\-]+")
# Facts that describe the server a result was measured on (runs split where they differ).
_IDENTITY_FACTS = (
    "engine_version",
    "tp_size",
    "mem_fraction_static",
    "attention_backend",
    "cuda_graph_enabled",
    "max_total_num_tokens",
)
# Metric keys that describe rather than measure: never "unknown".
_DESCRIPTIVE = frozenset({"definition", "token_source"})


@dataclass(frozen=True)
class Given:
    """What the user states about results whose text does not say it (the load, the
    engine, the model). Used only where the file is silent; recorded as given."""

    engine: str | None = None
    model: str | None = None
    concurrency: int | None = None
    request_rate: float | str | None = None
    input_len: int | None = None
    output_len: int | None = None
    num_prompts: int | None = None
    tags: tuple[str, ...] = ()

    def point_values(self) -> dict[str, Any]:
        out = {
            "concurrency": count(self.concurrency),
            "input_len": count(self.input_len),
            "output_len": count(self.output_len),
            "num_prompts": count(self.num_prompts),
            "request_rate": rate(self.request_rate),
        }
        return {k: v for k, v in out.items() if v is not None}

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.point_values())
        if self.engine:
            out["engine"] = self.engine
        if self.model:
            out["model"] = self.model
        return out


@dataclass
class ParsedFile:
    """What one file (or pasted text) holds."""

    name: str
    sha256: str
    size: int
    results: list[BenchResult]
    log_facts: dict[str, Any] | None
    log_text: str
    not_understood: list[str]
    data: bytes = b""

    @property
    def formats(self) -> list[str]:
        out = list(dict.fromkeys(r.format for r in self.results))
        if self.log_facts is not None:
            out.append("sglang-log")
        return out

    @property
    def format(self) -> str:
        return "+".join(self.formats) or "unknown"


@dataclass
class PlannedRun:
    """One run folder's contents, ready to be stored (or shown by a dry run)."""

    run_id: str
    source_name: str
    format: str
    spec: dict[str, Any]
    status: dict[str, Any]
    facts: dict[str, Any]
    launch: dict[str, Any]
    summaries: list[dict[str, Any]]
    report: dict[str, Any]
    source: bytes
    exists: bool = False
    notes: list[str] = field(default_factory=list)

    def preview(self) -> dict[str, Any]:
        """What a dry run prints: the run and, per point, the values it would store."""
        facts = {
            k: v
            for k, v in self.facts.items()
            if v is not None and k not in ("server_info_raw", "facts_source_by_key")
        }
        return {
            "run_id": self.run_id,
            "already_imported": self.exists,
            "state": self.status.get("state"),
            "reason": self.status.get("reason") or None,
            "engine": self.spec["server"].get("engine"),
            "model": self.spec["server"].get("model"),
            "server": self.spec["server"],
            "facts": facts,
            "points": [
                {
                    "index": s["index"],
                    "label": s["label"],
                    "line": s.get("line"),
                    "point": s["point"],
                    "metrics": {
                        k: v
                        for k, v in s["metrics"].items()
                        if v is not None and k not in _DESCRIPTIVE
                    },
                    "unknown": s["unknown"],
                    "given": s.get("given", []),
                    "values_as_read": s["values_as_read"],
                    "preamble": s.get("preamble", {}),
                    "not_understood": s["not_understood"],
                }
                for s in self.summaries
            ],
            "notes": self.notes,
        }


# --- reading ----------------------------------------------------------------------------------


def _is_log(facts: dict[str, Any]) -> bool:
    return any(v not in (None, False, 0) and v != [] for v in facts.values())


def safe_name(name: str) -> str:
    base = Path(name.replace("\\", "/")).name or "pasted.txt"
    cleaned = _SAFE_NAME_RE.sub("_", base).strip("._")[:100]
    return cleaned or "pasted.txt"


def parse_text(text: str, name: str = "pasted text", data: bytes | None = None) -> ParsedFile:
    """Read everything ``text`` holds: bench_serving/vLLM tables, benchmark JSON(L) and an
    SGLang start-up log. Never raises; whatever is not read is listed in
    ``not_understood``."""
    raw = data if data is not None else text.encode("utf-8", "replace")
    notes: list[str] = []
    if len(text) > MAX_TEXT_CHARS:
        notes.append(f"only the first {MAX_TEXT_CHARS // 2**20} MiB were read")
        text = text[:MAX_TEXT_CHARS]
    norm = text.replace("\r\n", "\n").replace("\r", "\n")
    json_results, json_lines, json_notes = parse_json(norm)
    lines = norm.split("\n")
    table_results, table_lines, table_notes = parse_tables(lines, json_lines)
    log = parse_sglang_log(text)
    log_facts = log if _is_log(log) else None
    results = sorted(json_results + table_results, key=lambda r: r.line)
    notes += json_notes + table_notes
    read = json_lines | table_lines
    outside = [i for i, line in enumerate(lines) if line.strip() and i not in read]
    if outside and log_facts is None:
        first = lines[outside[0]].strip()
        notes.append(
            f"{len(outside)} line(s) are not part of any result and were not read "
            f"(the first, line {outside[0] + 1}: {first[:80]!r})"
        )
    if not results and log_facts is None:
        notes.append(
            "nothing ServeLab can import: no bench_serving/vLLM result table, no "
            "benchmark JSON and no SGLang start-up log"
        )
    return ParsedFile(
        name=name,
        sha256=hashlib.sha256(raw).hexdigest(),
        size=len(raw),
        results=results,
        log_facts=log_facts,
        log_text=text if log_facts else "",
        not_understood=notes,
        data=raw,
    )


# --- planning ---------------------------------------------------------------------------------


def _facts(server_info: dict[str, Any] | None, log_facts: dict[str, Any] | None) -> dict[str, Any]:
    """The server facts, as a launched SGLang run records them: /server_info first, each
    key it does not state filled from the log."""
    # The SGLang adapter's own reading of /server_info, so imported and launched runs name
    # every fact the same way.
    from core.engines.sglang import merge_facts, server_info_facts

    from_info = server_info_facts(server_info) if server_info else {}
    from_log = log_facts or {}
    facts, by_key = merge_facts(from_info, from_log) if (from_info or from_log) else ({}, {})
    sources = sorted(set(by_key.values()), reverse=True)
    facts["facts_source"] = "+".join(f"imported {s}" for s in sources) if sources else "none"
    facts["facts_source_by_key"] = by_key
    if server_info:
        facts["server_info_raw"] = server_info
    return facts


def _engine(
    results: Sequence[BenchResult], facts: dict[str, Any], has_log: bool, given: Given
) -> tuple[str | None, str]:
    # The start-up log and server_info this importer reads are SGLang's (parse_sglang_log);
    # which engine that is, and which backends name it, is the registry's.
    sglang = engine_for_backend("sglang-native")
    if has_log and sglang:
        return sglang, "an SGLang start-up log"
    if any(r.server_info for r in results) and sglang:
        return sglang, "the embedded SGLang server_info"
    backends = {str(r.context.get("backend")) for r in results if r.context.get("backend")}
    named = {engine_for_backend(b) for b in backends}
    if backends and len(named) == 1 and (engine := named.pop()) is not None:
        return engine, f"backend {', '.join(sorted(backends))} (bench_serving's --backend)"
    if given.engine:
        return given.engine, "given at import"
    return None, "not stated"


def _server(
    results: Sequence[BenchResult], facts: dict[str, Any], engine: str | None, given: Given
) -> dict[str, Any]:
    info = next((r.server_info for r in results if r.server_info), None) or {}
    model = next((r.context["model"] for r in results if r.context.get("model")), None)
    model = model or facts.get("model_path") or given.model
    graph_bs = info.get("cuda_graph_max_bs")
    server = {
        "engine": engine,
        "model": model,
        "tp_size": count(facts.get("tp_size")),
        "mem_fraction_static": facts.get("mem_fraction_static"),
        "attention_backend": facts.get("attention_backend"),
        "cuda_graphs": facts.get("cuda_graph_enabled"),
        "cuda_graph_max_bs": count(graph_bs),
    }
    return {k: v for k, v in server.items() if v is not None}


def _rate_text(value: Any) -> str:
    if value is None:
        return "?"
    return "inf" if value == "inf" else f"{value:g}"


def _label(point: dict[str, Any], stated: set[str]) -> str:
    conc = point.get("concurrency")
    conc_s = ("unbounded" if conc is None else str(conc)) if "concurrency" in stated else "?"
    return (
        f"c={conc_s} rate={_rate_text(point.get('request_rate'))} "
        f"in={point.get('input_len') or '?'} out={point.get('output_len') or '?'}"
    )


def _summary(index: int, r: BenchResult, given: Given) -> dict[str, Any]:
    stated = set(r.point)
    point: dict[str, Any] = {f: r.point.get(f) for f in POINT_FIELDS}
    given_fields: list[str] = []
    notes = list(r.not_understood)
    for name, value in given.point_values().items():
        if name in stated:
            if point[name] != value:
                notes.append(
                    f"point.{name}: the file says {point[name]!r}; the given {value!r} was not used"
                )
            continue
        point[name] = value
        stated.add(name)
        given_fields.append(f"point.{name}")
    metrics: dict[str, Any] = dict.fromkeys(METRIC_KEYS)
    metrics.update({k: v for k, v in r.metrics.items() if k in metrics})
    metrics["definition"] = f"{r.tool} (imported: values as the tool reported them)"
    metrics["token_source"] = f"as reported by {r.tool}"
    unknown = [k for k, v in metrics.items() if v is None and k not in _DESCRIPTIVE]
    unknown += [f"point.{f}" for f in POINT_FIELDS if f not in stated]
    unknown.append("records")
    return {
        "index": index,
        "label": _label(point, stated),
        "point": point,
        "origin": "import",
        "format": r.format,
        "tool": r.tool,
        "line": r.line,
        "token_source": metrics["token_source"],
        "metrics": metrics,
        "unknown": unknown,
        "given": given_fields,
        "values_as_read": r.values,
        "preamble": r.preamble,
        "extra": r.extra,
        "context": r.context,
        "not_understood": notes,
        "has_records": False,
        "client": {},
    }


def _point_key(r: BenchResult) -> tuple[Any, ...]:
    return tuple(
        r.point.get(f, "?") for f in ("concurrency", "request_rate", "input_len", "output_len")
    )


def _identity(r: BenchResult) -> str:
    facts = _facts(r.server_info, None) if r.server_info else {}
    ident = {
        "format": r.format,
        "backend": r.context.get("backend"),
        "model": r.context.get("model"),
        "dataset": r.context.get("dataset_name"),
        **{k: facts.get(k) for k in _IDENTITY_FACTS},
    }
    return json.dumps(ident, sort_keys=True, default=str)


def _groups(results: Sequence[BenchResult], split: bool) -> list[list[BenchResult]]:
    """Results measured on one server at different loads form one run (a sweep); a new
    run starts where the server or the tool differs, or where a load repeats (the same
    load measured again is another run: before/after, or a repeat)."""
    if split:
        return [[r] for r in results]
    groups: list[list[BenchResult]] = []
    open_by_identity: dict[str, list[BenchResult]] = {}
    for r in results:
        ident = _identity(r)
        group = open_by_identity.get(ident)
        if group is None or _point_key(r) in {_point_key(g) for g in group}:
            group = []
            groups.append(group)
            open_by_identity[ident] = group
        group.append(r)
    return groups


def _run_id(parsed: ParsedFile, group: Sequence[BenchResult]) -> str:
    if group:
        payload = json.dumps(
            [[r.format, r.values, r.preamble] for r in group], sort_keys=True, default=str
        )
    else:
        payload = json.dumps({"log": parsed.log_facts}, sort_keys=True, default=str)
    return "imp-" + hashlib.sha256(payload.encode()).hexdigest()[:12]


def plan_runs(
    parsed: ParsedFile,
    settings: Settings,
    given: Given | None = None,
    log: ParsedFile | None = None,
    split: bool = False,
) -> list[PlannedRun]:
    """The runs ``parsed`` becomes. ``log``: a separate SGLang start-up log whose facts
    apply to these results. ``split``: one run per result instead of one per sweep."""
    given = given or Given()
    log_file = log if log is not None and log.log_facts is not None else None
    log_facts = parsed.log_facts or (log_file.log_facts if log_file else None)
    log_name = parsed.name if parsed.log_facts else (log_file.name if log_file else None)
    src = _Source(parsed, given, log_facts, log_name, utc_now())
    groups: list[list[BenchResult]] = _groups(parsed.results, split)
    if not groups and log_facts is not None and log_file is None:
        groups = [[]]  # a start-up log alone: a run with its facts and no points
    planned: list[PlannedRun] = []
    seen: set[str] = set()
    for group in groups:
        run_id = _run_id(parsed, group)
        if run_id in seen:
            continue  # the same results twice in one file
        seen.add(run_id)
        planned.append(_plan_run(src, group, run_id, settings))
    if log_file is not None and planned:
        planned[0].notes.append(f"server facts from {log_file.name}")
    return planned


@dataclass(frozen=True)
class _Source:
    """What every run planned from one file shares."""

    parsed: ParsedFile
    given: Given
    log_facts: dict[str, Any] | None  # the SGLang start-up log's, if any
    log_name: str | None
    now: str  # the import's time


def _plan_run(
    src: _Source, group: list[BenchResult], run_id: str, settings: Settings
) -> PlannedRun:
    """One run: the results of one server at their loads (none: a start-up log alone)."""
    parsed, given, log_facts = src.parsed, src.given, src.log_facts
    info = next((r.server_info for r in group if r.server_info), None)
    facts = _facts(info, log_facts)
    engine, engine_source = _engine(group, facts, log_facts is not None, given)
    summaries = [_summary(i, r, given) for i, r in enumerate(group)]
    fmt = (
        "+".join(
            dict.fromkeys([*(r.format for r in group), *(["sglang-log"] if log_facts else [])])
        )
        or "unknown"
    )
    origin = _origin(src, group, fmt, engine_source)
    spec = {
        "run_id": run_id,
        "created_at": src.now,
        "origin": "import",
        "import": origin,
        "server": _server(group, facts, engine, given),
        "plan": {
            "points": [
                {k: v for k, v in s["point"].items() if f"point.{k}" not in s["unknown"]}
                for s in summaries
            ]
        },
        "tags": ["imported", *given.tags],
        "note": f"imported from {parsed.name}",
        "intended_diff": [],
    }
    launch = {
        "argv": None,
        "command": facts.get("launch_command"),
        "base_url": None,
        "engine": engine,
        "engine_version": facts.get("engine_version"),
        "notes": [f"imported from {parsed.name} ({fmt}): not launched by ServeLab"],
    }
    return PlannedRun(
        run_id=run_id,
        source_name=parsed.name,
        format=fmt,
        spec=spec,
        status=_import_status(src, group, run_id, origin, len(summaries)),
        facts=facts,
        launch=launch,
        summaries=summaries,
        report=_import_report(src, group, fmt),
        source=parsed.data,
        exists=(settings.runs_dir / run_id).exists(),
        notes=list(parsed.not_understood),
    )


def _origin(
    src: _Source, group: Sequence[BenchResult], fmt: str, engine_source: str
) -> dict[str, Any]:
    """Where an imported run came from: spec.json's and status.json's ``import``."""
    return {
        "origin": "import",
        "source_file": src.parsed.name,
        "format": fmt,
        "tool": "; ".join(dict.fromkeys(r.tool for r in group)) or "SGLang start-up log",
        "sha256": src.parsed.sha256,
        "imported_at": src.now,
        "lines": [r.line for r in group],
        "log_file": src.log_name,
        "engine_source": engine_source,
        "given": src.given.as_dict(),
        "import_version": IMPORT_VERSION,
    }


def _import_status(
    src: _Source, group: Sequence[BenchResult], run_id: str, origin: dict[str, Any], n_points: int
) -> dict[str, Any]:
    """status.json of an imported run: succeeded, or failed as its start-up log says."""
    failure = (src.log_facts or {}).get("failure")
    state, reason = "succeeded", ""
    if failure and not group:
        state = "failed"
        reason = f"{FAILURE_REASONS.get(failure, failure)} ({failure}; from the imported log)"
    elif failure:
        reason = f"the imported log shows a failure: {failure}"
    detail = (
        f"{n_points} point(s) from {src.parsed.name} ({origin['format']})"
        if n_points
        else f"server facts from {src.log_name} (no benchmark result)"
    )
    now = src.now
    return {
        "run_id": run_id,
        "state": state,
        "phase": "imported",
        "reason": reason,
        "origin": "import",
        "import": origin,
        "started_at": None,
        "finished_at": now,
        "updated_at": now,
        "steps": [
            {
                "step": "import",
                "outcome": "ok",
                "detail": detail,
                "started_at": now,
                "duration_s": 0.0,
            }
        ],
    }


def _import_report(src: _Source, group: Sequence[BenchResult], fmt: str) -> dict[str, Any]:
    """import.json: what was read, and what of it was not understood."""
    return {
        "source_file": src.parsed.name,
        "sha256": src.parsed.sha256,
        "format": fmt,
        "not_understood": src.parsed.not_understood,
        "log_file": src.log_name,
        "log_facts": src.log_facts,
        "given": src.given.as_dict(),
        "results": [
            {
                "line": r.line,
                "format": r.format,
                "tool": r.tool,
                "values": r.values,
                "preamble": r.preamble,
                "context": r.context,
                "extra": r.extra,
                "not_understood": r.not_understood,
            }
            for r in group
        ],
    }


# --- storing ----------------------------------------------------------------------------------


def _write(planned: PlannedRun, path: Path) -> None:
    folder = RunFolder(path)
    (path / "points").mkdir(parents=True, exist_ok=True)
    folder.write("spec.json", planned.spec)
    folder.write("facts.json", planned.facts)
    folder.write("launch.json", planned.launch)
    folder.write("import.json", planned.report)
    for s in planned.summaries:
        folder.point_dir(s["index"])
        folder.write(f"points/{s['index']:03d}/summary.json", s)
    source_dir = path / "source"
    source_dir.mkdir(exist_ok=True)
    (source_dir / safe_name(planned.source_name)).write_bytes(planned.source)
    if planned.report.get("log_file") and planned.report["log_file"] != planned.source_name:
        (source_dir / "log-facts.json").write_text(
            json.dumps(planned.report.get("log_facts"), indent=2, default=str)
        )
    folder.write("result.json", run_result(folder))
    folder.write("status.json", planned.status)  # last: a folder with a status is complete


def store_runs(planned: Sequence[PlannedRun], settings: Settings) -> list[str]:
    """Store each planned run that is not already there; return the ids stored. Each
    folder is written aside and renamed into ``runs/`` whole, then indexed."""
    from core.store import Catalog

    stored: list[str] = []
    staging_root = settings.data_dir / ".import-staging"
    for run in planned:
        target = settings.runs_dir / run.run_id
        if target.exists():
            run.exists = True
            continue
        staging = staging_root / f"{run.run_id}.{os.getpid()}.{secrets.token_hex(3)}"
        try:
            staging.mkdir(parents=True)
            settings.runs_dir.mkdir(parents=True, exist_ok=True)
            _write(run, staging)
            try:
                staging.rename(target)
            except OSError:
                if target.exists():  # imported by someone else meanwhile
                    run.exists = True
                    continue
                raise
        except OSError as exc:
            raise StoreError(
                f"cannot store imported run {run.run_id}: {exc.strerror or exc}"
            ) from exc
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
        stored.append(run.run_id)
        with contextlib.suppress(StoreError):
            Catalog(settings.catalog_path, settings.runs_dir).index_run(RunFolder(target))
    return stored
