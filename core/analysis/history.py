"""History: the runs of one configuration over time and engine versions, and the
regression band (docs/METRICS.md, "History and the regression band").

* a **series** is every succeeded run whose configuration is the same once what does not
  change the measurement is set aside: the engine installation and version, the port, the
  dates, the tags and note (experiment, arm, trial), the placement, the start-up timeout and
  the sanity probe. Its key (``series_key``) is a hash of the rest (``server.*`` and
  ``plan.*`` with their defaults filled in, and the GPUs the server ran on);
* a **point** of a series is one run's value of a headline metric
  (``core.metrics.VERDICT_METRICS``) at one load, with that run's own interval (``run_ci``);
* the **band** a run is checked against is the prediction interval that the earlier runs
  of the series make (``prediction_band``), from runs of ONE engine installation
  (``band_runs``: the checked run's own, else the newest earlier one: never a mix of
  versions), at every point of the checked run (the headline point first), each at
  ``check_level`` (99 % shared over the points, so an A/A run alerts no more often with
  more points); a value outside it on the worse side is a regression;
* its **power** in words: ``caught_drop``, the drop its earlier runs would catch 4 times
  in 5 (``CAUGHT_SHARE``).

Pure functions over run folders: no Streamlit, no catalog (a series is found by reading
the folders' spec.json and facts.json, cached per folder).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Final, Literal

import numpy as np

from core.analysis.diff import INERT_FIELDS, gpu_names
from core.analysis.drift import MIN_SLICES, SLICES, point_slices
from core.analysis.points import NO_CHANGE_THRESHOLD, PointKey, first_points
from core.analysis.runs import RunView, has_records, latency_samples, load_run
from core.analysis.stats import mean_ci, t_quantile
from core.config import BenchmarkPlan, Point, ServerConfig, Workload
from core.metric_info import higher_is_better, metric_name, metrics_for
from core.metrics import headline_index, rate_value
from core.numbers import as_number, number_text, pct_text, share_text
from core.run_folder import RunFolder, epoch_s, is_run_id
from core.shapes import model_label

__all__ = [
    "AA_ALERT_RATE",
    "BAND_LEVEL",
    "CAUGHT_SHARE",
    "HISTORY_METRICS",
    "MIN_EARLIER_RUNS",
    "SERIES_IGNORED",
    "SERIES_PREFIX",
    "Band",
    "Check",
    "History",
    "SeriesRun",
    "SeriesValue",
    "alert_text",
    "band_runs",
    "caught_drop",
    "check_level",
    "check_value",
    "installation",
    "is_series_key",
    "load_history",
    "prediction_band",
    "run_ci",
    "series_key",
    "series_of_run",
    "series_runs",
    "series_size",
]

SERIES_PREFIX: Final = "ser-"
# What a run may differ in and still be one more run of the same configuration: it does not
# change what is measured (server.engine_install is the installation a version came from;
# the version is a fact, never part of the key). Tags, note, intended_diff, placement and
# the dates are outside server/plan and never hashed.
SERIES_IGNORED: Final = frozenset(
    {*INERT_FIELDS, "server.engine_install", "server.startup_timeout_s", "plan.probe"}
)
HISTORY_METRICS: Final = metrics_for("history")  # core.metric_info: the verdict metrics
# The band: a two-sided 99 % prediction interval of the next run from the earlier ones; only
# its worse side alerts (0.5 % of A/A runs per metric). Three metrics are checked, so an A/A
# run alerts at most 3 x 0.5 % = 1.5 % of the time; the stated rate, proven by the seeded
# simulation in tests/test_history.py, is AA_ALERT_RATE.
BAND_LEVEL: Final = 0.99
AA_ALERT_RATE: Final = 0.02
MIN_EARLIER_RUNS: Final = 3
CAUGHT_SHARE: Final = 0.8  # "a drop of X % would be caught 4 times in 5"
# A run's own interval from its requests: at least this many values in each of the
# consecutive groups whose medians it averages (fewer groups than MIN_SLICES: no interval).
MIN_GROUP_VALUES = 4

Outcome = Literal["regression", "improvement", "inside", "no band"]


def is_series_key(text: str) -> bool:
    """A series key as ``series_key`` writes them: ``ser-`` and 12 hex digits."""
    tail = text.removeprefix(SERIES_PREFIX) if isinstance(text, str) else ""
    return (
        text.startswith(SERIES_PREFIX)
        and len(tail) == 12
        and all(c in "0123456789abcdef" for c in tail)
    )


_MODELS: Final = {
    "server": ServerConfig,
    "plan": BenchmarkPlan,
    "point": Point,
    "workload": Workload,
}


@lru_cache(maxsize=8)
def _default_json(name: str) -> str:
    return json.dumps(_MODELS[name]().model_dump(mode="json"))


def _defaults(name: str) -> dict[str, Any]:
    """A model's defaults as JSON values (a fresh dict: callers merge into it)."""
    loaded: dict[str, Any] = json.loads(_default_json(name))
    return loaded


def _point(p: Any) -> Any:
    if not isinstance(p, dict):
        return p
    workload = p.get("workload")
    out = {**_defaults("point"), **p}
    out["workload"] = {**_defaults("workload"), **(workload if isinstance(workload, dict) else {})}
    out["request_rate"] = rate_value(out.get("request_rate"))
    return out


def _normalized(spec: Mapping[str, Any]) -> dict[str, Any]:
    """``server`` and ``plan`` as a complete JSON-ready dict: every default filled in (a
    spec.json written before a field existed reads as that field's default), the
    ``SERIES_IGNORED`` fields left out. Built by merging, not validating: a stored spec
    (the demo's ``<checkout>`` model path, an import) need not pass today's checks."""
    server = spec.get("server") if isinstance(spec.get("server"), dict) else {}
    plan = spec.get("plan") if isinstance(spec.get("plan"), dict) else {}
    out = {
        "server": {**_defaults("server"), **(server or {})},
        "plan": {**_defaults("plan"), **(plan or {})},
    }
    out["plan"]["points"] = [_point(p) for p in (plan or {}).get("points") or []]
    for field in SERIES_IGNORED:
        group, name = field.split(".", 1)
        out[group].pop(name, None)
    return out


def _digest(data: Any, hex_digits: int) -> str:
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:hex_digits]


def series_key(spec: Mapping[str, Any], facts: Mapping[str, Any]) -> str:
    """THE series rule: ``ser-``, 8 hex digits of the SHA-256 of the run's normalized
    configuration (``_normalized``) and 4 of the GPUs its server ran on (``facts.gpus``:
    the same knobs on another GPU measure something else). Stable: JSON with sorted keys.
    Two parts, so that finding a series reads the facts of its configuration's runs only."""
    return SERIES_PREFIX + _digest(_normalized(spec), 8) + _gpu_digest(facts)


def _gpu_digest(facts: Mapping[str, Any]) -> str:
    return _digest(gpu_names(facts.get("gpus")), 4)


@lru_cache(maxsize=100_000)
def _folder_config(path: str, status_ns: int) -> tuple[str | None, bool]:
    """(configuration digest, is a member: succeeded with points) of one folder, cached
    by its status.json's mtime: a spec never changes, so a folder is read once per
    process unless its run moved on."""
    folder = RunFolder(Path(path))
    spec = folder.read("spec.json")
    if not isinstance(spec, dict):
        return None, False
    member = folder.status_or_empty().state == "succeeded" and (folder.path / "points").is_dir()
    return _digest(_normalized(spec), 8), member


@lru_cache(maxsize=100_000)
def _folder_gpu(path: str, status_ns: int) -> str:
    """The GPU part of a folder's key (its facts are written before the status that
    follows them: the status mtime keys them too)."""
    facts = RunFolder(Path(path)).read("facts.json")
    return _gpu_digest(facts if isinstance(facts, dict) else {})


def _status_ns(root: str, name: str) -> int | None:
    try:
        # os.stat on a string: a Path per folder doubles the cost of a 10,000-run scan
        return os.stat(f"{root}/{name}/status.json").st_mtime_ns  # noqa: PTH116
    except OSError:
        return None  # not a run folder, or still being created


def series_of_run(runs_dir: Path, run_id: str) -> str | None:
    """The series key of one run (None: no such run, or it has no spec.json)."""
    if not is_run_id(run_id) or (ns := _status_ns(str(runs_dir), run_id)) is None:
        return None
    path = str(runs_dir / run_id)
    config = _folder_config(path, ns)[0]
    return None if config is None else SERIES_PREFIX + config + _folder_gpu(path, ns)


def _member_ids(runs_dir: Path, key: str) -> list[str]:
    """The series' runs that succeeded with at least one point: one scandir and one stat
    per folder (as ``Catalog._scan``), the rest from the caches."""
    root = str(runs_dir)
    config, gpu = key[len(SERIES_PREFIX) : len(SERIES_PREFIX) + 8], key[len(SERIES_PREFIX) + 8 :]
    try:
        with os.scandir(root) as entries:
            names = [e.name for e in entries if not e.name.startswith(".")]
    except OSError:
        return []
    out = []
    for name in names:
        if (ns := _status_ns(root, name)) is None:
            continue
        path = f"{root}/{name}"
        if _folder_config(path, ns) == (config, True) and _folder_gpu(path, ns) == gpu:
            out.append(name)
    return out


def series_size(runs_dir: Path, key: str) -> int:
    """How many runs the series holds (what a link to its History says)."""
    return len(_member_ids(runs_dir, key))


def _started(view: RunView) -> str:
    return str(view.status.started_at or view.spec.get("created_at") or "")


def _order(view: RunView) -> tuple[float, str]:
    """When a run started (seconds since the epoch; unknown first), then its id."""
    return epoch_s(_started(view)) or 0.0, view.run_id


def series_runs(runs_dir: Path, key: str) -> list[RunView]:
    """Every succeeded run of the series with results, oldest first (by start time)."""
    views = [load_run(RunFolder(runs_dir / name)) for name in _member_ids(runs_dir, key)]
    return sorted((v for v in views if v.points), key=_order)


@dataclass(frozen=True)
class SeriesRun:
    """One run of a series: when it ran and which engine version measured it."""

    run_id: str
    started_at: str
    version: str


@dataclass(frozen=True)
class SeriesValue:
    """One run's value of one metric at one load, with that run's own interval (None
    where its requests give none: ``run_ci``)."""

    run_id: str
    point: PointKey
    point_label: str
    metric: str
    value: float
    ci_low: float | None
    ci_high: float | None


@dataclass(frozen=True)
class Band:
    """The ``BAND_LEVEL`` prediction interval of the next run from ``n`` earlier ones."""

    n: int
    mean: float
    low: float
    high: float


@dataclass(frozen=True)
class Check:
    """One metric of the checked run against the band of the earlier runs: ``change`` is
    the distance beyond the band's nearer edge, relative to that edge (0 inside)."""

    metric: str
    point_label: str
    run_id: str
    value: float
    n_earlier: int
    band: Band | None
    change: float
    outcome: Outcome


@dataclass(frozen=True)
class History:
    """A series: its runs (oldest first), every value, the headline point, and the checks
    of ``focus`` (the run checked: the newest unless asked) against the runs before it."""

    key: str
    runs: tuple[SeriesRun, ...]
    values: tuple[SeriesValue, ...]
    headline: PointKey | None
    headline_label: str
    focus: str | None
    checks: tuple[Check, ...]
    bands: Mapping[tuple[PointKey, str], Band]
    config: str
    band_from: str = ""  # the installation the band's runs share (``band_runs``)
    band_level: float = BAND_LEVEL  # each point's band (``check_level``)

    @property
    def regression(self) -> bool:
        return any(c.outcome == "regression" for c in self.checks)

    @property
    def points(self) -> list[tuple[PointKey, str]]:
        """The loads of the series in plan order, with their labels."""
        return list(dict.fromkeys((v.point, v.point_label) for v in self.values))


def prediction_band(values: Sequence[float], level: float = BAND_LEVEL) -> Band | None:
    """THE band: where the next run of a series falls with probability ``level`` if nothing
    changed. On the log scale (a ratio of 2 and of 1/2 are equally far, as in
    ``core.analysis.stats.paired_log_ratio``): mean m and spread s of the n earlier logs,
    m ± t_{n-1, 1-(1-level)/2} · s · sqrt(1 + 1/n), mapped back with exp. None with fewer
    than ``MIN_EARLIER_RUNS`` values or a value at or below 0 (no log)."""
    vals = [float(v) for v in values if v is not None and math.isfinite(v)]
    if len(vals) < MIN_EARLIER_RUNS or min(vals) <= 0:
        return None
    logs = np.log(vals)
    n = len(logs)
    m, s = float(np.mean(logs)), float(np.std(logs, ddof=1))
    half = t_quantile(1 - (1 - level) / 2, float(n - 1)) * s * math.sqrt(1 + 1 / n)
    return Band(n, math.exp(m), math.exp(m - half), math.exp(m + half))


def check_level(points: int) -> float:
    """The level of each point's band when ``points`` loads are checked: BAND_LEVEL's
    1 % outside shared over them (Bonferroni), so checking every point of a run alerts an
    A/A run no more often than checking one did (``AA_ALERT_RATE``)."""
    return 1 - (1 - BAND_LEVEL) / max(points, 1)


def caught_drop(band: Band, level: float = BAND_LEVEL, share: float = CAUGHT_SHARE) -> float:
    """The relative drop (a fraction, 0.12 = −12 %) of the next run that lands below the
    band's lower edge ``share`` of the time: on the log scale the next run minus the
    earlier mean has sd s·√(1 + 1/n) (s: the earlier runs' spread, read back from the
    band), so a drop δ is caught with probability Φ((δ − half) / (s·√(1 + 1/n))). Checked
    by a seeded simulation (tests/test_history.py)."""
    from statistics import NormalDist

    half = math.log(band.mean / band.low) if band.low > 0 else math.inf
    spread = half / t_quantile(1 - (1 - level) / 2, float(band.n - 1))  # s·√(1 + 1/n)
    return -math.expm1(-(half + NormalDist().inv_cdf(share) * spread))


def installation(view: RunView) -> str:
    """The engine installation a run measured with: its named installation, else its
    version (what ``band_runs`` never mixes)."""
    server = view.spec.get("server") or {}
    return str(server.get("engine_install") or view.facts.get("engine_version") or "")


def band_runs(views: Sequence[RunView], focus: str) -> list[str]:
    """The runs the band of ``focus`` comes from: the earlier runs of its own installation
    when there are ``MIN_EARLIER_RUNS``, else those of the newest earlier installation (a
    new version is checked against the one before it); never a mix of installations."""
    order = [v.run_id for v in views]
    earlier = views[: order.index(focus)]
    mine = installation(views[order.index(focus)])
    same = [v.run_id for v in earlier if installation(v) == mine]
    if len(same) >= MIN_EARLIER_RUNS or not earlier:
        return same
    other = next((installation(v) for v in reversed(earlier) if installation(v) != mine), None)
    if other is None:
        return same
    return [v.run_id for v in earlier if installation(v) == other]


def check_value(
    metric: str,
    value: float,
    earlier: Sequence[float],
    point_label: str = "",
    run_id: str = "",
    level: float = BAND_LEVEL,
) -> Check:
    """One value against the band of ``earlier`` (``prediction_band`` at ``level``): a
    regression when it lies beyond the band on the worse side (``metric_info.
    higher_is_better``) and at least ``NO_CHANGE_THRESHOLD`` from the earlier runs' mean (a
    band of identical runs has no width: a 0.1 % step is no finding)."""
    band = prediction_band(earlier, level)
    if band is None:
        return Check(metric, point_label, run_id, value, len(earlier), None, 0.0, "no band")
    higher_better = higher_is_better(metric)
    if value < band.low:
        change, worse = value / band.low - 1, higher_better
    elif value > band.high:
        change, worse = value / band.high - 1, not higher_better
    else:
        return Check(metric, point_label, run_id, value, band.n, band, 0.0, "inside")
    if abs(value / band.mean - 1) < NO_CHANGE_THRESHOLD:
        return Check(metric, point_label, run_id, value, band.n, band, 0.0, "inside")
    outcome: Outcome = "regression" if worse else "improvement"
    return Check(metric, point_label, run_id, value, band.n, band, change, outcome)


def _centred(value: float, slices: list[float]) -> tuple[float | None, float | None]:
    """``mean_ci`` of the slices, as a relative half-width around ``value``."""
    mean, low, high = mean_ci(slices)
    if mean is None or low is None or high is None or mean <= 0:
        return None, None
    half = (high - low) / 2 / mean
    return max(value * (1 - half), 0.0), value * (1 + half)


def run_ci(
    view: RunView, point: PointKey, summary: Mapping[str, Any], metric: str, value: float
) -> tuple[float | None, float | None]:
    """A run's own 95 % interval of one value, from its requests: batch means, with the
    experiments' estimator (``stats.mean_ci``, Student-t) over the batches. Output
    throughput: the steady window's slices (``drift.point_slices``); a latency statistic:
    its per-request values in send order, cut into up to ``SLICES`` consecutive groups of
    at least ``MIN_GROUP_VALUES``, one median each. The interval's relative width is put
    around the run's value. None without records, or fewer than ``MIN_SLICES`` batches."""
    index = summary.get("index")
    if not isinstance(index, int) or not has_records(view, index) or view.folder is None:
        return None, None
    if metric == "output_throughput":
        slices = point_slices(view).get(point)
        return _centred(value, slices) if slices else (None, None)
    if not metric.startswith("median_"):
        return None, None
    values = latency_samples(view.folder, index, metric)
    groups = min(SLICES, len(values) // MIN_GROUP_VALUES)
    if groups < MIN_SLICES:
        return None, None
    medians = [float(np.median(g)) for g in np.array_split(np.asarray(values), groups)]
    return _centred(value, medians)


def _version(view: RunView) -> str:
    engine = (view.spec.get("server") or {}).get("engine") or "engine"
    version = view.facts.get("engine_version")
    install = (view.spec.get("server") or {}).get("engine_install")
    text = f"{engine} {version}" if version else f"{engine} (version unknown)"
    # an installation named after its version says nothing more
    return f"{text} ({install})" if install and str(version) not in str(install) else text


def _point_label(summary: Mapping[str, Any]) -> str:
    p = summary.get("point") or {}
    conc = p.get("concurrency")
    rate = rate_value(p.get("request_rate"))
    text = f"c={'unbounded' if conc is None else conc}"
    return text if rate is None or math.isinf(rate) else f"{text} rate={rate:g}"


def _config(view: RunView) -> str:
    server = view.spec.get("server") or {}
    model = str(model_label(server) or "?").rstrip("/").rsplit("/", 1)[-1]
    gpu = gpu_names(view.facts.get("gpus"))
    parts = [str(server.get("engine")), model, str(server.get("device"))]
    return " · ".join([*parts, *([gpu] if gpu and gpu != "none" else [])])


def _series_values(views: Sequence[RunView]) -> list[SeriesValue]:
    """Every run's history metrics at each of its loads, with the run's own interval."""
    values: list[SeriesValue] = []
    for view in views:
        for point, s in first_points(view):
            for metric in HISTORY_METRICS:
                v = as_number((s.get("metrics") or {}).get(metric))
                if v is not None:
                    low, high = run_ci(view, point, s, metric, v)
                    values.append(
                        SeriesValue(view.run_id, point, _point_label(s), metric, v, low, high)
                    )
    return values


def _earlier(
    values: Sequence[SeriesValue], before: set[str], point: PointKey, metric: str
) -> list[float]:
    return [
        e.value for e in values if e.run_id in before and e.point == point and e.metric == metric
    ]


def _bands(
    values: Sequence[SeriesValue], before: set[str], level: float = BAND_LEVEL
) -> dict[tuple[PointKey, str], Band]:
    """Each load and metric's prediction band (at ``level``) from the runs ``before``."""
    bands: dict[tuple[PointKey, str], Band] = {}
    for point in dict.fromkeys(v.point for v in values):
        for metric in HISTORY_METRICS:
            earlier = _earlier(values, before, point, metric)
            if (band := prediction_band(earlier, level)) is not None:
                bands[(point, metric)] = band
    return bands


def load_history(runs_dir: Path, key_or_run: str, focus: str | None = None) -> History | None:
    """The history of a series key, or of the series a run id belongs to (then that run is
    the one checked, unless ``focus`` says otherwise). None: neither names a series with a
    succeeded run. The checks: the headline metrics at the headline point of ``focus``
    against the runs before it."""
    if is_series_key(key_or_run):
        key = key_or_run
    else:
        found = series_of_run(runs_dir, key_or_run)
        if found is None:
            return None
        key, focus = found, focus or key_or_run
    views = series_runs(runs_dir, key)
    if not views:
        return None
    order = [v.run_id for v in views]
    if focus not in order:
        focus = order[-1]
    values = _series_values(views)
    focus_view = views[order.index(focus)]
    loads = list(first_points(focus_view))
    index = headline_index([s.get("point") or {} for _, s in loads])
    headline = None if index is None else loads[index][0]
    before = set(band_runs(views, focus))
    # every point of the checked run, the headline point first
    points = sorted(
        dict.fromkeys(v.point for v in values if v.run_id == focus), key=lambda p: p != headline
    )
    level = check_level(len(points))
    bands = _bands(values, before, level)
    checks = tuple(
        check_value(
            metric, v.value, _earlier(values, before, v.point, metric), v.point_label, focus, level
        )
        for point in points
        for metric in HISTORY_METRICS
        for v in values
        if v.run_id == focus and v.point == point and v.metric == metric
    )
    label = next((v.point_label for v in values if v.point == headline), "")
    return History(
        key=key,
        runs=tuple(SeriesRun(v.run_id, _started(v), _version(v)) for v in views),
        values=tuple(values),
        headline=headline,
        headline_label=label,
        focus=focus,
        checks=checks,
        bands=bands,
        config=_config(views[-1]),
        band_from=next((installation(v) for v in views if v.run_id in before), ""),
        band_level=level,
    )


def _band_text(c: Check, level: float) -> str:
    assert c.band is not None
    return (
        f"{number_text(c.band.low)}–{number_text(c.band.high)}, {_level_text(level)} "
        f"prediction interval; this run {number_text(c.value)}"
    )


def _level_text(level: float) -> str:
    return share_text(level, 0 if abs(level * 100 - round(level * 100)) < 1e-9 else 1)


def power_text(history: History) -> str | None:
    """``With these 5 runs a drop of 12.3% in output throughput at c=64 would be caught 4
    times in 5.`` (``caught_drop`` of the headline band); None without a band there."""
    metric = HISTORY_METRICS[0]
    band = history.bands.get((history.headline, metric)) if history.headline else None
    if band is None:
        return None
    drop = caught_drop(band, history.band_level)
    return (
        f"With these {band.n} runs a drop of {share_text(drop, 1)} in {metric_name(metric)} "
        f"at {history.headline_label} would be caught 4 times in 5."
    )


def alert_text(history: History) -> str:
    """THE words of a series' alert, the same on the History page and in the CLI: a
    regression names each metric and point beyond the band and by how much; otherwise "No
    regression" at every point checked, or why there is no band yet. The band's
    installation is named (it never mixes versions)."""
    checks = history.checks
    if not checks or all(c.outcome == "no band" for c in checks):
        n = checks[0].n_earlier if checks else 0
        return (
            f"No band yet: {n} earlier run(s) of this configuration and installation before "
            f"{history.focus}; the band needs at least {MIN_EARLIER_RUNS}."
        )
    n = max(c.n_earlier for c in checks)
    regressions = [c for c in checks if c.outcome == "regression"]
    better = [c for c in checks if c.outcome == "improvement"]
    tail = (
        "; better than the band: "
        + ", ".join(
            f"{metric_name(c.metric)} at {c.point_label} ({pct_text(c.change)})" for c in better
        )
        if better
        else ""
    )
    of = f" of {history.band_from}" if history.band_from else ""
    if regressions:
        parts = []
        for c in regressions:
            assert c.band is not None
            side = "below" if c.change < 0 else "above"
            parts.append(
                f"{metric_name(c.metric)} at {c.point_label} "
                f"{'fell' if c.change < 0 else 'rose'} "
                f"{share_text(abs(c.value / c.band.mean - 1), 1)} {side} the mean of the "
                f"{c.n_earlier} earlier runs{of}, {share_text(abs(c.change), 1)} {side} their "
                f"band ({_band_text(c, history.band_level)})"
            )
        return f"Regression in {history.focus}: " + "; ".join(parts) + tail + "."
    names = ", ".join(
        dict.fromkeys(metric_name(c.metric) for c in checks if c.outcome != "no band")
    )
    at = ", ".join(dict.fromkeys(c.point_label for c in checks if c.outcome != "no band"))
    return (
        f"No regression: {names} of {history.focus} at {at} are within or better than the "
        f"band of the {n} earlier runs{of} ({_level_text(history.band_level)} prediction "
        f"interval each){tail}."
    )
