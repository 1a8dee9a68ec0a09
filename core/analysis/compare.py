"""Comparisons between run folders, for the portal's Run and Compare pages.

Pure functions over ``RunFolder``s: no Streamlit, no catalog. Every table is a pandas
DataFrame, and "unknown" stays ``None``/NaN, never 0.

* ``flatten_config`` lists every field a comparison must check (spec, resolved server
  facts, the launch argv with the random port masked);
* ``config_diff`` shows the fields that differ; ``confounders`` names the ``server.*``/
  ``plan.*`` differences the comparison did not intend, and ``derived_differences`` the
  ``facts.*``/``launch.*`` ones (consequences of the knobs, or of the host);
* ``metric_deltas`` pairs points by their load (concurrency, rate, input and output
  length), never by position, and flags points measured on different prompts;
* ``memory_headroom`` and ``latency_samples`` feed the memory and CDF figures.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from core.config import knob_text
from core.metrics import LATENCY_FAMILIES, STAT_NAMES, TokenSource, latency_arrays
from core.run_folder import RunFolder

__all__ = [
    "FIELD_GROUPS",
    "HEADLINE_METRICS",
    "INERT_FIELDS",
    "METRIC_DIRECTIONS",
    "SAME_THRESHOLD",
    "MatchedPoint",
    "PointKey",
    "RunView",
    "arm_names",
    "baseline_index",
    "config_diff",
    "confounders",
    "control_of",
    "declared_intended",
    "derived_differences",
    "differing_fields",
    "find_runs",
    "first_points",
    "flatten_config",
    "has_records",
    "headline_point",
    "is_run_id",
    "knob_fields",
    "latency_samples",
    "load_run",
    "match_points",
    "memory_headroom",
    "metric_deltas",
    "no_records_note",
    "peak_gpu_mib_by_point",
    "point_key",
    "prompt_check",
    "readable_cells",
    "run_labels",
    "unknown_fields",
]

# Display and sort order of the field groups in a config diff.
FIELD_GROUPS = ("server", "plan", "facts", "launch")
# Fields that differ without changing what is measured (a fixed port vs a free one).
INERT_FIELDS = frozenset({"server.port"})
# |relative change| below this reads as "same".
SAME_THRESHOLD = 0.005

Direction = Literal["higher", "lower"]
Verdict = Literal["better", "worse", "same", "changed"]

METRIC_DIRECTIONS: dict[str, Direction] = {
    "request_throughput": "higher",
    "input_throughput": "higher",
    "output_throughput": "higher",
    "total_throughput": "higher",
    "max_output_tokens_per_s": "higher",
    "error_rate": "lower",
    **{f"{stat}_{fam}_ms": "lower" for fam in LATENCY_FAMILIES for stat in STAT_NAMES},
}

# What metric_deltas shows when no metric list is given.
HEADLINE_METRICS = (
    "output_throughput",
    "request_throughput",
    "total_throughput",
    "median_ttft_ms",
    "p99_ttft_ms",
    "median_itl_ms",
    "p99_itl_ms",
    "median_tpot_ms",
    "median_e2e_ms",
    "p99_e2e_ms",
    "error_rate",
)

_PORT_VALUE = "<port>"


# --- loading ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunView:
    """Everything the comparison pages read from one run folder (JSON artifacts only;
    tables are read on demand through ``path``)."""

    run_id: str
    spec: dict[str, Any]
    status: dict[str, Any]
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
        status=folder.status(),
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


# --- configuration ----------------------------------------------------------------------------


def _rate(value: Any) -> float | None:
    """request_rate as stored: a number, or "inf"/"Infinity" (JSON has no infinity)."""
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _point_text(p: dict[str, Any]) -> str:
    rate = _rate(p.get("request_rate"))
    rate_s = "?" if rate is None else ("inf" if math.isinf(rate) else f"{rate:g}")
    conc = p.get("concurrency")
    conc_s = "?" if "concurrency" not in p else ("unbounded" if conc is None else conc)
    return (
        f"c={conc_s} rate={rate_s} "
        f"in={p.get('input_len', '?')} out={p.get('output_len', '?')} "
        f"n={p.get('num_prompts', '?')}"
    )


def _scalar(value: Any) -> Any:
    """A comparable, displayable cell: lists become one string, scalars stay."""
    if isinstance(value, list | tuple):
        return " ".join(str(_scalar(v)) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k}={_scalar(v)}" for k, v in sorted(value.items()))
    return value


def _flatten(prefix: str, data: Any, out: dict[str, Any]) -> None:
    if isinstance(data, dict):
        for key, value in data.items():
            name = f"{prefix}.{key}"
            if name == "plan.points":
                points = value if isinstance(value, list) else []
                out["plan.points.count"] = len(points)
                for i, p in enumerate(points):
                    out[f"plan.points[{i}]"] = _point_text(p) if isinstance(p, dict) else _scalar(p)
            elif isinstance(value, dict):
                _flatten(name, value, out)
            else:
                out[name] = _scalar(value)
    else:
        out[prefix] = _scalar(data)


def _gpu_names(gpus: Any) -> str | None:
    if gpus is None:
        return None
    if not isinstance(gpus, list):
        return str(gpus)
    if not gpus:
        return "none"
    names = Counter(str(g.get("name", "?")) if isinstance(g, dict) else str(g) for g in gpus)
    return ", ".join(name if n == 1 else f"{n}x {name}" for name, n in names.items())


def _mask_port(argv: list[Any]) -> list[str]:
    out: list[str] = []
    mask_next = False
    for item in (str(a) for a in argv):
        if mask_next:
            out.append(_PORT_VALUE)
            mask_next = False
        elif item == "--port":
            out.append(item)
            mask_next = True
        elif item.startswith("--port="):
            out.append(f"--port={_PORT_VALUE}")
        else:
            out.append(item)
    return out


def flatten_config(view: RunView) -> dict[str, Any]:
    """Every field a comparison must check, by dotted name: ``server.*`` and ``plan.*``
    from spec.json (``plan.points[i]`` one readable string per point, ``plan.probe.*``),
    the resolved server facts (``facts.*``, None where the engine does not report them)
    and the launch argv (``launch.argv``, the ``--port`` value masked)."""
    out: dict[str, Any] = {}
    for group in ("server", "plan"):
        section = view.spec.get(group)
        if section is None:
            continue
        _flatten(group, section, out)
    facts = view.facts
    for key in (
        "engine_version",
        "kv_cache_tokens",
        "mem_fraction_static",
        "cuda_graph_enabled",
        "cuda_graph_batch_sizes",
        "attention_backend",
    ):
        value = facts.get(key)
        if key == "cuda_graph_batch_sizes" and isinstance(value, list):
            value = ",".join(str(b) for b in value)
        out[f"facts.{key}"] = value
    out["facts.gpu"] = _gpu_names(facts.get("gpus"))
    argv = view.launch.get("argv")
    out["launch.argv"] = " ".join(_mask_port(argv)) if isinstance(argv, list) else None
    return out


def _group_rank(field: str) -> int:
    head = re.split(r"[.\[]", field, maxsplit=1)[0]
    return FIELD_GROUPS.index(head) if head in FIELD_GROUPS else len(FIELD_GROUPS)


def _equal(a: Any, b: Any) -> bool:
    # True == 1 in Python; a bool and a number are still different settings.
    if isinstance(a, bool) != isinstance(b, bool):
        return False
    return bool(a == b)


def _same(values: list[Any]) -> bool:
    return all(_equal(values[0], v) for v in values[1:])


def differing_fields(views: Sequence[RunView]) -> list[str]:
    """The flattened fields whose values are not all equal, ``server.*`` first, then
    ``plan.*``, ``facts.*``, ``launch.*`` (spec order within a group). A field one run
    lacks reads as None there."""
    flats = [flatten_config(v) for v in views]
    fields: list[str] = []
    for flat in flats:
        fields += [f for f in flat if f not in fields]
    diff = [f for f in fields if not _same([flat.get(f) for flat in flats])]
    return sorted(diff, key=_group_rank)


def config_diff(views: Sequence[RunView], names: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per differing field: ``field`` then one column per run id (or name)."""
    labels = list(names) if names is not None else run_labels(views)
    flats = [flatten_config(v) for v in views]
    rows = [
        {"field": f, **{lab: flat.get(f) for lab, flat in zip(labels, flats, strict=True)}}
        for f in differing_fields(views)
    ]
    return pd.DataFrame(rows, columns=["field", *labels], dtype=object)


def readable_cells(frame: pd.DataFrame) -> pd.DataFrame:
    """A table as a reader sees it (pages, the HTML report): on / off for booleans, "—"
    where unset, numbers to the precision their unit deserves (the column's suffix: ``_gb``
    2 decimals, ``_mib`` and ``tokens`` whole and grouped), every other value as it is, in
    full (a model path is not shortened here: two paths may share their last part).
    Exports keep the raw values."""

    def cell(value: Any, column: str) -> str:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return "—"
        if isinstance(value, bool):
            return knob_text(value)
        if isinstance(value, int | float):
            if column.endswith("_gb"):
                return f"{value:,.2f}"
            if column.endswith(("_mib", "tokens")):
                return f"{value:,.0f}"
        return str(value)

    return frame.apply(lambda col: col.map(lambda v: cell(v, str(col.name))))


def declared_intended(views: Iterable[RunView]) -> set[str]:
    """The union of the runs' declared intended differences (spec ``intended_diff``)."""
    out: set[str] = set()
    for v in views:
        declared = v.spec.get("intended_diff") or []
        if isinstance(declared, str):
            declared = [declared]
        out |= {str(d) for d in declared}
    return out


def _is_intended(field: str, intended: set[str]) -> bool:
    for name in intended:
        candidates = [name]
        if _group_rank(name) == len(FIELD_GROUPS):  # a bare knob name: "cuda_graphs"
            candidates = [f"server.{name}", f"plan.{name}"]
        for c in candidates:
            if field == c or field.startswith((f"{c}.", f"{c}[")):
                return True
    return False


def confounders(views: Sequence[RunView], intended: set[str] | None = None) -> list[str]:
    """Differing ``server.*``/``plan.*`` fields the comparison did not intend.

    ``intended`` None reads the runs' declared ``intended_diff`` (their union). An intended
    name covers the fields under it (``plan.probe`` covers ``plan.probe.expect``). With
    nothing intended, a single differing field is the comparison itself; with more than
    one, every one of them is a confounder. ``server.port`` never is (INERT_FIELDS).
    ``facts.*`` and ``launch.*`` are reported by ``derived_differences`` instead: whether
    the intended knob explains them cannot be checked from the folders.
    """
    if intended is None:
        intended = declared_intended(views)
    flats = [flatten_config(v) for v in views]
    spec_diff = [
        f
        for f in differing_fields(views)
        if _group_rank(f) < 2 and f not in INERT_FIELDS and _known_difference(f, views, flats)
    ]
    if not intended:
        return spec_diff if len(spec_diff) > 1 else []
    return [f for f in spec_diff if not _is_intended(f, intended)]


def derived_differences(views: Sequence[RunView]) -> list[str]:
    """Differing ``facts.*`` and ``launch.*`` fields: what the server resolved or was
    started with. Expected when a knob changed; a warning sign when none did."""
    flats = [flatten_config(v) for v in views]
    return [
        f
        for f in differing_fields(views)
        if _group_rank(f) in (2, 3) and _known_difference(f, views, flats)
    ]


def _stated(view: RunView, flat: dict[str, Any], field: str) -> bool:
    return not (view.imported and flat.get(field) is None)


def _point_parts(text: Any, imported: bool) -> dict[str, str] | None:
    """``c=4 rate=inf in=16 ...`` as a dict; an imported run's unstated parts left out."""
    if not isinstance(text, str):
        return None
    parts = dict(t.split("=", 1) for t in text.split() if "=" in t)
    return {k: v for k, v in parts.items() if not (imported and v in ("?", "None"))}


def _known_difference(
    field: str, views: Sequence[RunView], flats: Sequence[dict[str, Any]]
) -> bool:
    """The field differs among the runs that state it (an imported run's missing field is
    unknown, so it is neither a confounder nor a derived difference). A point compares
    on the load parts every run states."""
    if field.startswith("plan.points[") and any(v.imported for v in views):
        parts = [
            _point_parts(flat.get(field), v.imported) for v, flat in zip(views, flats, strict=True)
        ]
        if all(p is not None for p in parts):
            shared = set.intersection(*(set(p) for p in parts if p is not None))
            return any(len({p[k] for p in parts if p is not None}) > 1 for k in shared)
    known = [
        flat.get(field) for v, flat in zip(views, flats, strict=True) if _stated(v, flat, field)
    ]
    return len(known) > 1 and not _same(known)


def unknown_fields(views: Sequence[RunView]) -> dict[str, list[str]]:
    """Per imported run (by label): the differing fields its source does not state. They
    stay in ``config_diff`` (as None) but cannot be checked, so they are listed apart."""
    labels = run_labels(views)
    flats = [flatten_config(v) for v in views]
    out: dict[str, list[str]] = {}
    for f in differing_fields(views):
        for lab, v, flat in zip(labels, views, flats, strict=True):
            if not _stated(v, flat, f):
                out.setdefault(lab, []).append(f)
    return out


# --- points and metrics -----------------------------------------------------------------------

PointKey = tuple[int | None, float | None, int | None, int | None]


def point_key(summary: dict[str, Any]) -> PointKey:
    """(concurrency, request_rate, input_len, output_len) of one point summary."""
    p = summary.get("point") or {}
    return (
        p.get("concurrency"),
        _rate(p.get("request_rate")),
        p.get("input_len"),
        p.get("output_len"),
    )


def first_points(view: RunView) -> Iterator[tuple[PointKey, dict[str, Any]]]:
    """Each load setting's first point summary in a run (a plan may repeat a point)."""
    seen: set[PointKey] = set()
    for s in view.points:
        key = point_key(s)
        if key not in seen:
            seen.add(key)
            yield key, s


@dataclass(frozen=True)
class MatchedPoint:
    """One load setting across runs: per run the summary (None where that run has no
    such point)."""

    key: PointKey
    occurrence: int  # the n-th point with this key in a run (a plan may repeat a point)
    label: str
    summaries: tuple[dict[str, Any] | None, ...]

    @property
    def indices(self) -> tuple[int | None, ...]:
        return tuple(None if s is None else s.get("index") for s in self.summaries)

    @property
    def complete(self) -> bool:
        return all(s is not None for s in self.summaries)

    @property
    def same_prompts(self) -> bool | None:
        """All runs sent the same prompts; None when a run lacks the point or a digest."""
        digests = [None if s is None else s.get("prompts_digest") for s in self.summaries]
        if any(d is None for d in digests):
            return None
        return len(set(digests)) == 1


def match_points(views: Sequence[RunView]) -> list[MatchedPoint]:
    """Points paired by their load, in order of first appearance (runs in order). A point
    repeated within a run pairs with the same repetition in the others."""
    keyed: list[dict[tuple[PointKey, int], dict[str, Any]]] = []
    order: list[tuple[PointKey, int]] = []
    for v in views:
        seen: Counter[PointKey] = Counter()
        by_key: dict[tuple[PointKey, int], dict[str, Any]] = {}
        for s in v.points:
            k = point_key(s)
            by_key[(k, seen[k])] = s
            if (k, seen[k]) not in order:
                order.append((k, seen[k]))
            seen[k] += 1
        keyed.append(by_key)
    out = []
    for k, n in order:
        summaries = tuple(by_key.get((k, n)) for by_key in keyed)
        first = next(s for s in summaries if s is not None)
        label = str(first.get("label") or _point_text(first.get("point") or {}))
        out.append(MatchedPoint(k, n, label if n == 0 else f"{label} #{n + 1}", summaries))
    return out


def prompt_check(views: Sequence[RunView]) -> pd.DataFrame:
    """Per matched point: each run's prompts digest and whether they all agree
    (``same_prompts`` None where a run lacks the point or a digest)."""
    labels = run_labels(views)
    rows = []
    for mp in match_points(views):
        row: dict[str, Any] = {"point": mp.label}
        for lab, s in zip(labels, mp.summaries, strict=True):
            row[lab] = None if s is None else s.get("prompts_digest")
        row["same_prompts"] = mp.same_prompts
        rows.append(row)
    return pd.DataFrame(rows, columns=["point", *labels, "same_prompts"], dtype=object)


def _metric(summary: dict[str, Any] | None, metric: str, source: TokenSource) -> float:
    if summary is None:
        return math.nan
    block = summary.get("metrics_retokenized" if source == "retokenized" else "metrics") or {}
    value = block.get(metric)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return math.nan
    return float(value)


def _verdict(
    base: float, value: float, direction: Direction | None
) -> tuple[float, float, Verdict | None]:
    if math.isnan(base) or math.isnan(value):
        return math.nan, math.nan, None
    delta = value - base
    rel = delta / abs(base) if base != 0 else (0.0 if delta == 0 else math.nan)
    if delta == 0 or (not math.isnan(rel) and abs(rel) < SAME_THRESHOLD):
        return delta, rel, "same"
    if direction is None:
        return delta, rel, "changed"
    better = delta > 0 if direction == "higher" else delta < 0
    return delta, rel, "better" if better else "worse"


def metric_deltas(
    views: Sequence[RunView],
    baseline: int = 0,
    metrics: Sequence[str] | None = None,
    source: TokenSource = "server",
    names: Sequence[str] | None = None,
) -> pd.DataFrame:
    """One row per (matched point, metric): ``point``, ``metric``, ``direction``, one value
    column per run, then per non-baseline run ``delta_<id>`` (absolute), ``rel_<id>``
    (fraction of the baseline; NaN when the baseline is 0) and ``verdict_<id>`` ("better",
    "worse", "same" below 0.5 %, "changed" for a metric without a direction, None when a
    value is missing), and ``same_prompts`` (False: the runs were sent different prompts
    at this point; None: not checkable). A point one run lacks gives NaN there. ``names``
    (e.g. ``arm_names``) replaces the run ids in the column names."""
    if not views:
        raise ValueError("no runs to compare")
    if not 0 <= baseline < len(views):
        raise ValueError(f"baseline {baseline} is not one of the {len(views)} runs")
    labels = list(names) if names is not None else run_labels(views)
    others = [i for i in range(len(views)) if i != baseline]
    columns = ["point", "metric", "direction", *labels]
    for i in others:
        columns += [f"delta_{labels[i]}", f"rel_{labels[i]}", f"verdict_{labels[i]}"]
    columns.append("same_prompts")
    rows = []
    for mp in match_points(views):
        for metric in metrics or HEADLINE_METRICS:
            direction = METRIC_DIRECTIONS.get(metric)
            values = [_metric(s, metric, source) for s in mp.summaries]
            row: dict[str, Any] = {"point": mp.label, "metric": metric, "direction": direction}
            row.update(zip(labels, values, strict=True))
            for i in others:
                delta, rel, verdict = _verdict(values[baseline], values[i], direction)
                row[f"delta_{labels[i]}"] = delta
                row[f"rel_{labels[i]}"] = rel
                row[f"verdict_{labels[i]}"] = verdict
            row["same_prompts"] = mp.same_prompts
            rows.append(row)
    # object first, so a missing verdict stays None (a str column would make it NaN)
    df = pd.DataFrame(rows, columns=columns, dtype=object)
    numeric = [*labels, *(f"{p}_{labels[i]}" for i in others for p in ("delta", "rel"))]
    df[numeric] = df[numeric].astype("float64")
    return df


# --- memory -----------------------------------------------------------------------------------


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return None if math.isnan(value) else value


def _peak_gpu_used_mib(path: Path | None) -> float | None:
    """The peak over the whole run (NVML, MiB, the busiest GPU); None without samples."""
    if path is None:
        return None
    peaks = _gpu_peaks(path)
    return peaks[0] if peaks else None


def peak_gpu_mib_by_point(path: Path | None) -> dict[int, float]:
    """Per point index: the peak GPU memory used while it ran (NVML, MiB, the busiest GPU);
    empty on a CPU host or without samples."""
    if path is None:
        return {}
    peaks = _gpu_peaks(path)
    return dict(peaks[1]) if peaks else {}


def _gpu_peaks(path: Path) -> tuple[float, dict[int, float]] | None:
    """(run peak, per-point peaks) of ``samples.parquet``, read once per file version: the
    card, the headroom table and the figure all ask, on every rerun of a page."""
    file = path / "samples.parquet"
    try:
        stat = file.stat()
    except OSError:
        return None
    return _read_gpu_peaks(str(file), stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=256)
def _read_gpu_peaks(file: str, _mtime_ns: int, _size: int) -> tuple[float, dict[int, float]] | None:
    try:
        table = pq.read_table(file)
    except (OSError, pa.ArrowInvalid):  # being written, or cut short: no peaks, not a crash
        return None
    if table.num_rows == 0 or "name" not in table.column_names:
        return None
    gpu = table.filter(pc.equal(table["name"], "gpu_used_mib"))
    if gpu.num_rows == 0:
        return None
    peak = pc.max(gpu["value"]).as_py()
    if peak is None:
        return None
    by_point: dict[int, float] = {}
    if "point" in gpu.column_names:
        for point, value in zip(gpu["point"].to_pylist(), gpu["value"].to_pylist(), strict=True):
            if point is None or value is None or int(point) < 0:
                continue
            by_point[int(point)] = max(by_point.get(int(point), 0.0), float(value))
    return float(peak), by_point


def _gpu_total_gb(gpus: Any) -> float | None:
    if not isinstance(gpus, list):
        return None
    totals = [_num(g.get("total_mib")) for g in gpus if isinstance(g, dict)]
    known = [t for t in totals if t is not None]
    return max(known) / 1024 if known else None


def memory_headroom(views: Sequence[RunView], names: Sequence[str] | None = None) -> pd.DataFrame:
    """Per run: the server's memory facts (GB as SGLang reports them, i.e. GiB, per GPU)
    and the peak GPU memory used while points ran (NVML, MiB, the busiest GPU). None where
    unknown (not SGLang, facts missing, CPU host), never 0. ``headroom_gb``: the server's
    free memory after start-up, else (no memory facts) the GPU's total minus the NVML
    peak. ``names`` replaces the run ids in ``run_id``."""
    rows = []
    labels = list(names) if names is not None else run_labels(views)
    for lab, v in zip(labels, views, strict=True):
        f = v.facts
        free = _num(f.get("available_gpu_mem_gb"))
        total = _gpu_total_gb(f.get("gpus"))
        peak = _peak_gpu_used_mib(v.path)
        headroom = (
            free
            if free is not None
            else (total - peak / 1024 if total is not None and peak is not None else None)
        )
        rows.append(
            {
                "run_id": lab,
                "kv_cache_tokens": _num(f.get("kv_cache_tokens")),
                "weight_mem_gb": _num(f.get("weight_mem_gb")),
                "kv_cache_gb": _num(f.get("kv_cache_gb")),
                "graph_mem_gb": _num(f.get("graph_mem_gb")),
                "available_gpu_mem_gb": free,
                "gpu_total_gb": total,
                "peak_gpu_used_mib": peak,
                "headroom_gb": headroom,
                "headroom_from": (
                    "server facts"
                    if free is not None
                    else "NVML peak"
                    if headroom is not None
                    else None
                ),
            }
        )
    columns = [
        "run_id",
        "kv_cache_tokens",
        "weight_mem_gb",
        "kv_cache_gb",
        "graph_mem_gb",
        "available_gpu_mem_gb",
        "gpu_total_gb",
        "peak_gpu_used_mib",
        "headroom_gb",
        "headroom_from",
    ]
    return pd.DataFrame(rows, columns=columns, dtype=object)


# --- per-request latencies --------------------------------------------------------------------


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


# --- who is who: run ids, arm names, the baseline, the headline point ---------------------------

_RUN_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def is_run_id(text: str) -> bool:
    """A run or experiment id as ServeLab writes them (no path separator, no ``..``): the
    one check every page and export applies to an id it was given."""
    return bool(_RUN_ID_RE.fullmatch(text)) and ".." not in text


def find_runs(runs_dir: Path, ids: Iterable[str]) -> tuple[list[RunFolder], list[str]]:
    """The run folders named by ``ids`` (in order, duplicates once) and the ids that name
    no run (malformed, or no such folder)."""
    found: list[RunFolder] = []
    unknown: list[str] = []
    for rid in dict.fromkeys(i.strip() for i in ids if i.strip()):
        if is_run_id(rid) and (runs_dir / rid / "spec.json").is_file():
            found.append(RunFolder(runs_dir / rid))
        else:
            unknown.append(rid)
    return found, unknown


def _arm_tag(view: RunView) -> str | None:
    """The experiment arm a run belongs to (tag ``arm:<label>``, spaces written as -)."""
    for tag in view.spec.get("tags") or []:
        if isinstance(tag, str) and tag.startswith("arm:") and len(tag) > 4:
            return tag[4:].replace("-", " ")
    return None


def knob_fields(views: Sequence[RunView]) -> list[str]:
    """The knobs under test: the declared intended fields that differ, else every
    ``server.*``/``plan.*`` field that differs (a port never counts)."""
    if len(views) < 2:
        return []
    flats = [flatten_config(v) for v in views]
    spec_diff = [
        f
        for f in differing_fields(views)
        if _group_rank(f) < 2 and f not in INERT_FIELDS and _known_difference(f, views, flats)
    ]
    intended = declared_intended(views)
    chosen = [f for f in spec_diff if _is_intended(f, intended)] if intended else []
    return chosen or spec_diff


def _short(field: str) -> str:
    return field.split(".", 1)[1] if _group_rank(field) < 2 else field


def arm_names(views: Sequence[RunView]) -> list[str]:
    """One display name per run, what a reader tells the runs apart by, never an id
    alone: the experiment arm, else the knob values that differ (``cuda_graphs=on``),
    else where an imported run came from. A name several runs share (trials of one arm,
    identical configurations) gets each run's short id appended."""
    if len(views) == 1:
        arm = _arm_tag(views[0])
        return [arm or views[0].run_id]
    knobs = knob_fields(views)
    flats = [flatten_config(v) for v in views]
    mixed = any(v.imported for v in views) and not all(v.imported for v in views)
    names = []
    for v, flat in zip(views, flats, strict=True):
        arm = _arm_tag(v)
        if arm is not None and all(_arm_tag(o) is not None for o in views):
            names.append(arm)
        elif v.imported and (mixed or len(knobs) > 2):
            origin = v.spec.get("import") or {}
            names.append(f"imported {Path(str(origin.get('source_file') or '?')).name}")
        elif mixed:  # beside an import, what tells them apart is who measured
            names.append(f"ServeLab {v.run_id[-6:]}")
        elif knobs:
            parts = [f"{_short(f)}={knob_text(flat.get(f))}" for f in knobs[:2]]
            names.append(", ".join(parts) + (" …" if len(knobs) > 2 else ""))
        else:
            names.append(v.run_id)
    counts = Counter(names)
    out = [
        n if counts[n] == 1 or n == v.run_id else f"{n} · {v.run_id[-6:]}"
        for n, v in zip(names, views, strict=True)
    ]
    again = Counter(out)  # short ids that collide: the whole id
    return [
        n if again[n] == 1 else f"{n.rsplit(' · ', 1)[0]} · {v.run_id}"
        for n, v in zip(out, views, strict=True)
    ]


def _control_rank(value: Any) -> tuple[int, float, str]:
    """How much a knob value reads as the control: off/default first, then the lower
    number, then on; any other text (a model path, a backend name) last."""
    if (
        value is None
        or value is False
        or (
            isinstance(value, str)
            and value.lower() in ("off", "false", "none", "default", "disabled", "")
        )
    ):
        return (0, 0.0, "")
    if isinstance(value, int | float) and not isinstance(value, bool):
        return (1, float(value), "")
    if value is True or (isinstance(value, str) and value.lower() in ("on", "true", "enabled")):
        return (2, 0.0, "")
    return (3, 0.0, "")


def control_of(values: Sequence[Any]) -> int:
    """THE baseline rule: the index of the control among the knob values of the arms
    (or runs): the knob's off / default / lower value. Ties, and values none of which
    reads as a control (two model paths), keep the first: the order the user gave."""
    if not values:
        return 0
    ranks = [_control_rank(v) for v in values]
    return ranks.index(min(ranks))


def baseline_index(views: Sequence[RunView]) -> int:
    """The baseline run of a comparison: the control (``control_of``) on the first knob
    under test; the first run when nothing differs."""
    knobs = knob_fields(views)
    if not knobs:
        return 0
    return control_of([flatten_config(v).get(knobs[0]) for v in views])


def headline_point(views: Sequence[RunView]) -> MatchedPoint | None:
    """THE headline point of a comparison: the heaviest load every run measured (highest
    concurrency, then request rate; the last such point of the plan on a tie). None when
    no load is common to all runs."""
    complete = [mp for mp in match_points(views) if mp.complete]
    if not complete:
        return None

    def weight(item: tuple[int, MatchedPoint]) -> tuple[float, float, int]:
        i, mp = item
        conc, rate = mp.key[0], mp.key[1]
        return (math.inf if conc is None else float(conc), math.inf if rate is None else rate, i)

    return max(enumerate(complete), key=weight)[1]
