"""Drift: did the host's speed move while an experiment measured?

Three views (docs/METRICS.md, "Drift"):

* **within a point** (``steady_slices`` + ``slice_trend``): the steady window's output
  throughput in successive slices, Mann-Kendall trend test with a Theil-Sen size;
* **across trials** (``common_trend``): each arm's value against the time it ran. The arms
  run interleaved (shuffled per trial), so a trend every arm shares is the host's, not a
  knob's: OLS of log(value) on one intercept per arm plus one common slope in minutes,
  t test on the slope;
* **a closing baseline** (``ExperimentSpec.closing_baseline``): the baseline arm once more
  after the last trial; its ratio to the baseline's first run bounds the drift. It is no
  trial: the estimator never sees it (``core.analysis.trials.experiment_runs``).

The sizes are the fitted change from the first to the last slice / trial. Pure functions
over numbers, plus the readers of run folders (``point_drift``, ``trial_drift``,
``closing_drift``) that feed them; ``core.analysis.card`` words the findings.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
from scipy import stats as sps

from core.analysis.points import PointKey, first_points
from core.analysis.runs import RunView
from core.analysis.stats import RunOfArm, runs_phrase
from core.numbers import as_number, pct_text, share_text
from core.run_folder import epoch_s

__all__ = [
    "DRIFT_ALPHA",
    "MIN_DRIFT",
    "Drift",
    "Trend",
    "closing_drift",
    "closing_shift",
    "common_trend",
    "drift_findings",
    "holm",
    "mann_kendall_p",
    "point_drift",
    "point_slices",
    "slice_trend",
    "steady_slices",
    "trial_drift",
    "trial_trend",
]

DRIFT_ALPHA = 0.05  # two-sided level of both trend tests
# A trend is worth a "Read with care" line when it is significant and at least this large
# (first → last): within a long point a 1 % trend can be significant and mean nothing.
MIN_DRIFT = 0.05
SLICES = 10
MIN_SLICES = 5
# A slice needs this many chunk arrivals, or its tok/s is mostly the count's own noise.
MIN_CHUNKS_PER_SLICE = 20

Kind = Literal["across trials", "within the point", "closing baseline"]


@dataclass(frozen=True)
class Trend:
    """A fitted trend: ``change`` is the fitted relative change from the first to the last
    x, ``p_value`` its two-sided test (None without a residual degree of freedom)."""

    change: float
    p_value: float | None
    n: int

    @property
    def significant(self) -> bool:
        return self.p_value is not None and self.p_value < DRIFT_ALPHA


def _ols_slope(design: np.ndarray, y: np.ndarray, column: int) -> tuple[float, float | None]:
    """(coefficient of ``column``, its two-sided t-test p value) of the OLS fit."""
    coef, _, rank, _ = np.linalg.lstsq(design, y, rcond=None)
    df = len(y) - int(rank)
    if rank < design.shape[1] or df < 1:
        return float(coef[column]), None
    resid = y - design @ coef
    sigma2 = float(resid @ resid) / df
    cov = sigma2 * np.linalg.inv(design.T @ design)
    se = math.sqrt(max(float(cov[column, column]), 0.0))
    if se == 0:
        return float(coef[column]), 0.0 if coef[column] != 0 else 1.0
    t = float(coef[column]) / se
    return float(coef[column]), float(2 * sps.t.sf(abs(t), df))


def slice_trend(values: Sequence[float]) -> Trend | None:
    """Mann-Kendall on successive slices (``mann_kendall_p``), with the Theil-Sen line for
    the size (fitted last slice over fitted first, minus 1). Rank-based because a slice
    can stall: on the H200 demo a c=16 slice of 0.23 s had no chunk at all (0 tok/s),
    which would steer an OLS line and has no log. None with fewer than ``MIN_SLICES``
    values or a fitted first slice at or below 0."""
    ys = np.asarray([v for v in values if math.isfinite(v)], dtype=float)
    if len(ys) < MIN_SLICES:
        return None
    xs = np.arange(len(ys), dtype=float)
    slope, intercept, _, _ = sps.theilslopes(ys, xs)
    if intercept <= 0:
        return None
    if np.ptp(ys) == 0:
        return Trend(0.0, 1.0, len(ys))
    return Trend(float(slope) * (len(ys) - 1) / float(intercept), mann_kendall_p(ys), len(ys))


def mann_kendall_p(values: np.ndarray) -> float:
    """The two-sided p value of the Mann-Kendall trend test: S = Σ sign(x_j − x_i) over
    i < j, its variance corrected for ties, with the continuity correction (Hirsch, Slack
    & Smith 1982, Water Resources Research 18(1)); without it, ten slices are flagged
    slightly above the nominal rate (5.3 % in 4,000 drift-free simulations; 4.2 % with it)."""
    n = len(values)
    diff = np.sign(values[None, :] - values[:, None])
    s = float(np.triu(diff, 1).sum())
    _, counts = np.unique(values, return_counts=True)
    var = (n * (n - 1) * (2 * n + 5) - float((counts * (counts - 1) * (2 * counts + 5)).sum())) / 18
    if var <= 0 or s == 0:
        return 1.0
    z = (abs(s) - 1) / math.sqrt(var)
    return float(2 * sps.norm.sf(z))


def common_trend(observations: Sequence[tuple[str, float, float]]) -> Trend | None:
    """The trend every arm shares: ``observations`` are (arm, time, value); OLS of
    log(value) on one intercept per arm and one common slope in time, t test on the slope
    over n − arms − 1 degrees of freedom. A knob moves its arm's intercept, never the
    common slope, because the arms ran interleaved. None when the slope cannot be fitted."""
    obs = [(a, float(t), float(v)) for a, t, v in observations if v is not None and v > 0]
    arms = list(dict.fromkeys(a for a, _, _ in obs))
    if len(obs) < len(arms) + 2:
        return None
    times = np.array([t for _, t, _ in obs])
    if np.ptp(times) == 0:
        return None
    design = np.column_stack(
        [times, *[np.array([a == arm for a, _, _ in obs], dtype=float) for arm in arms]]
    )
    slope, p = _ols_slope(design, np.log([v for _, _, v in obs]), 0)
    return Trend(math.expm1(slope * float(np.ptp(times))), p, len(obs))


def trial_trend(observations: Sequence[tuple[str, int, float, float]]) -> Trend | None:
    """The trend every arm shares, tested on **trial means**: ``observations`` are (arm,
    trial, time, value). Each arm's mean log is taken out (a knob moves its arm, never the
    host), then each trial is one unit: the mean of its runs' centred logs at the mean of
    their times (a closing baseline run: a unit of one). WLS of the unit means on time,
    weighted by runs per unit, t test on the slope over units − 2 degrees of freedom. A
    trial's runs share the host's state (the reason arms are paired by trial), so runs
    are not independent; trials are: a per-run test flags drift-free experiments above
    its level when the runs of a trial are correlated (5.7–9.4 % at a nominal 5 %,
    docs/METRICS.md). None with fewer than 3 units or no spread in time."""
    obs = [(a, k, float(t), math.log(v)) for a, k, t, v in observations if v is not None and v > 0]
    arm_mean: dict[str, list[float]] = {}
    for a, _, _, y in obs:
        arm_mean.setdefault(a, []).append(y)
    centre = {a: float(np.mean(ys)) for a, ys in arm_mean.items()}
    units: dict[int, list[tuple[float, float]]] = {}
    for a, k, t, y in obs:
        units.setdefault(k, []).append((t, y - centre[a]))
    times = np.array([np.mean([t for t, _ in u]) for u in units.values()])
    means = np.array([np.mean([y for _, y in u]) for u in units.values()])
    if len(units) < 3 or np.ptp(times) == 0:
        return None
    # weighted by runs per unit: a closing run alone is up to k times as noisy as a mean of
    # k runs (when runs share nothing); with a shared host state it is less: conservative
    size = np.array([len(u) for u in units.values()], dtype=float)
    w = np.sqrt(size / size.max())
    design = np.column_stack([times, np.ones(len(times))]) * w[:, None]
    slope, p = _ols_slope(design, means * w, 0)
    # the size over every run's span: first run to last, as the common trend says it
    span = max(t for _, _, t, _ in obs) - min(t for _, _, t, _ in obs)
    return Trend(math.expm1(slope * span), p, len(obs))


def steady_slices(
    chunk_s: np.ndarray,
    tokens: np.ndarray,
    start_s: float,
    end_s: float,
    slices: int = SLICES,
) -> list[float]:
    """Output tok/s in ``slices`` equal slices of the steady window [start_s, end_s]: each
    chunk carries its share of its request's tokens (as ``core.metrics.steady_state``
    counts them) and counts where it arrived. Fewer slices when the window has too few
    chunks for ``MIN_CHUNKS_PER_SLICE`` each; [] below ``MIN_SLICES``."""
    inside = (chunk_s >= start_s) & (chunk_s <= end_s)
    n = min(slices, int(inside.sum()) // MIN_CHUNKS_PER_SLICE)
    if n < MIN_SLICES or end_s <= start_s:
        return []
    edges = np.linspace(start_s, end_s, n + 1)
    summed, _ = np.histogram(chunk_s[inside], bins=edges, weights=tokens[inside])
    return [float(x) for x in summed / ((end_s - start_s) / n)]


def _chunk_tokens(path: Any) -> tuple[np.ndarray, np.ndarray]:
    """(chunk arrival times, tokens each chunk carries) of a point's successful requests."""
    names = pq.read_schema(path).names
    cols = [
        c
        for c in ("chunk_s", "ok", "output_tokens_server", "output_tokens_requested")
        if c in names
    ]
    table = pq.read_table(path, columns=cols)
    lengths = np.asarray(
        pc.fill_null(pc.list_value_length(table["chunk_s"]), 0).to_numpy(zero_copy_only=False)
    )
    ok = np.asarray(pc.fill_null(table["ok"], False).to_numpy(zero_copy_only=False), dtype=bool)
    requested = np.asarray(
        pc.fill_null(table["output_tokens_requested"], 0).to_numpy(zero_copy_only=False),
        dtype=float,
    )
    out_tokens = requested
    if "output_tokens_server" in names:
        server = table["output_tokens_server"]
        missing = np.asarray(pc.is_null(server).to_numpy(zero_copy_only=False), dtype=bool)
        out_tokens = np.where(
            missing, requested, np.asarray(pc.fill_null(server, 0).to_numpy(), dtype=float)
        )
    flat = np.asarray(pc.list_flatten(table["chunk_s"]).to_numpy(zero_copy_only=False))
    per_chunk = np.repeat(np.where(lengths > 0, out_tokens / np.maximum(lengths, 1), 0), lengths)
    keep = np.repeat(ok, lengths)
    return flat[keep].astype(float), per_chunk[keep].astype(float)


@lru_cache(maxsize=4096)
def _records_slices(path: str, mtime_ns: int, start: float, end: float) -> tuple[float, ...]:
    """The steady slices of one records.parquet, cached: a page redraws its story every few
    seconds while runs go on, and records are written once (``mtime_ns`` keys a rewrite)."""
    chunks, tokens = _chunk_tokens(path)
    return tuple(steady_slices(chunks, tokens, start, end))


def point_slices(view: RunView) -> dict[PointKey, list[float]]:
    """Per point of one run: output tok/s in each slice of its steady window
    (``steady_slices``); points without records, a steady window or enough chunks are
    left out. What the drift within a point and a run's own interval
    (``core.analysis.history``) are made of."""
    out: dict[PointKey, list[float]] = {}
    if view.path is None:
        return out
    for key, s in first_points(view):
        m = s.get("metrics") or {}
        start, end = as_number(m.get("steady_start_s")), as_number(m.get("steady_end_s"))
        path = view.path / "points" / f"{int(s.get('index', -1)):03d}" / "records.parquet"
        if start is None or end is None or not path.exists():
            continue
        slices = _records_slices(str(path), path.stat().st_mtime_ns, start, end)
        if slices:
            out[key] = list(slices)
    return out


def point_drift(view: RunView) -> dict[PointKey, Trend]:
    """Per point of one run: the trend of output tok/s over its steady window's slices
    (points without records, a steady window or enough chunks are left out)."""
    out: dict[PointKey, Trend] = {}
    for key, slices in point_slices(view).items():
        trend = slice_trend(slices)
        if trend is not None:
            out[key] = trend
    return out


def _observations(
    runs: Sequence[RunOfArm], metric: str
) -> dict[PointKey, list[tuple[str, int, float, float]]]:
    """Per point: (arm, trial, minutes since the first run, value) of every succeeded run.
    The time is the point's own start, else its run's; without any, the run's place in the
    experiment's order (then the slope is per run, not per minute)."""
    rows: list[tuple[PointKey, str, int, float | None, int, float]] = []
    for order, r in enumerate(runs):
        if r.view.status.state != "succeeded":
            continue
        for key, s in first_points(r.view):
            v = as_number((s.get("metrics") or {}).get(metric))
            if v is not None:
                t = epoch_s(s.get("started_at")) or epoch_s(r.view.status.started_at)
                rows.append((key, r.arm, r.trial, t, order, v))
    timed = all(t is not None for _, _, _, t, _, _ in rows)
    first = min((t for _, _, _, t, _, _ in rows if t is not None), default=0.0)
    out: dict[PointKey, list[tuple[str, int, float, float]]] = {}
    for key, arm, trial, t, order, v in rows:
        x = (t - first) / 60 if timed and t is not None else float(order)
        out.setdefault(key, []).append((arm, trial, x, v))
    return out


def trial_drift(
    runs: Sequence[RunOfArm], metric: str = "output_throughput"
) -> dict[PointKey, Trend]:
    """Per point: the trend every arm shares, on trial means (``trial_trend``) over the
    runs given (the trials, and a closing baseline run if there is one: a later unit of
    one run, weighted as such)."""
    out = {}
    for key, obs in _observations(runs, metric).items():
        trend = trial_trend(obs)
        if trend is not None:
            out[key] = trend
    return out


def closing_shift(baseline: Sequence[float], closing: float) -> Trend | None:
    """The closing baseline run judged against the baseline arm's own spread: with m and s
    the mean and sd of the baseline trials' logs (n of them), (log closing − m) /
    (s·√(1 + 1/n)) is Student-t with n − 1 degrees of freedom when the host did not move
    (the prediction interval of one more run). ``change``: closing over the trials'
    geometric mean, minus 1. None without 2 positive baseline values or a positive
    closing one; p None when the trials have no spread."""
    logs = np.log([v for v in baseline if v is not None and v > 0])
    if len(logs) < 2 or closing is None or closing <= 0:
        return None
    m, sd = float(np.mean(logs)), float(np.std(logs, ddof=1))
    shift = math.log(closing) - m
    if sd == 0:
        return Trend(math.expm1(shift), None, len(logs) + 1)
    t = shift / (sd * math.sqrt(1 + 1 / len(logs)))
    return Trend(math.expm1(shift), float(2 * sps.t.sf(abs(t), len(logs) - 1)), len(logs) + 1)


def closing_drift(
    runs: Sequence[RunOfArm],
    closing: Sequence[RunOfArm],
    baseline: str,
    metric: str = "output_throughput",
) -> dict[PointKey, Trend]:
    """Per point: the closing baseline run against the baseline arm's succeeded trials
    (``closing_shift``): what the same configuration lost or gained over the experiment,
    and whether its own spread explains it."""
    trials = [r for r in runs if r.arm == baseline and r.view.status.state == "succeeded"]
    last = next((r for r in closing if r.view.status.state == "succeeded"), None)
    if not trials or last is None:
        return {}
    before: dict[PointKey, list[float]] = {}
    for r in trials:
        for key, v in _values(r.view, metric).items():
            before.setdefault(key, []).append(v)
    out = {}
    for key, v in _values(last.view, metric).items():
        shift = closing_shift(before.get(key, []), v)
        if shift is not None:
            out[key] = shift
    return out


def _values(view: RunView, metric: str) -> Mapping[PointKey, float]:
    return {
        key: v
        for key, s in first_points(view)
        if (v := as_number((s.get("metrics") or {}).get(metric))) is not None
    }


@dataclass(frozen=True)
class Drift:
    """A drift worth reading with care, at one point. ``point`` is its label (filled in by
    the card, which labels every point the same way); ``runs``: for a drift within the
    point, (arm, runs flagged, runs measured)."""

    key: PointKey
    kind: Kind
    change: float  # relative, first → last
    p_value: float | None = None
    n: int = 0
    runs: tuple[tuple[str, int, int], ...] = ()
    tests: int = 1  # how many trends the test was one of (Holm-adjusted over them)
    point: str = ""

    def sentence(self, care: bool = True) -> str:
        """E.g. ``c=64: throughput of every arm fell 22.0% from the first to the last trial
        (common trend over 12 runs, p=0.004)``."""
        way = "fell" if self.change < 0 else "rose"
        size = share_text(abs(self.change), 1)
        where = f"{self.point}: " if self.point else ""
        if self.kind == "across trials":
            text = (
                f"{where}throughput of every arm {way} {size} from the first to the last "
                f"trial (common trend over {self.n} runs, p={self.p_value:.2g}"
                + (f", Holm-adjusted over {self.tests} points)" if self.tests > 1 else ")")
            )
            meaning = (
                "the host drifted; the paired intervals absorb what each trial shares, "
                "not a drift within a trial"
            )
        elif self.kind == "closing baseline":
            text = (
                f"{where}the baseline arm re-run after the last trial {way} {size} against "
                f"its {self.n - 1} trials (beyond their own spread, p={self.p_value:.2g}"
                + (f", Holm-adjusted over {self.tests} points)" if self.tests > 1 else ")")
            )
            meaning = "the host drifted by about that much over the experiment"
        else:
            flagged = runs_phrase(self.runs)
            text = (
                f"{where}output throughput trended within the steady window (worst: "
                f"{pct_text(self.change)} first to last slice) in {flagged}"
            )
            meaning = (
                "the server had not settled: its mean throughput depends on the point's length"
            )
        return text + (f" — {meaning}" if care else "")


def holm(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm-Bonferroni adjusted p values (Holm 1979), in the order given (None stays None):
    an experiment tests every point, so that the chance of flagging a drift-free one stays
    at ``DRIFT_ALPHA`` for the whole family, not per point."""
    known = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    out: list[float | None] = [None] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(known):
        running = max(running, min(1.0, p * (len(known) - rank)))
        out[i] = running
    return out


def drift_findings(
    runs: Sequence[RunOfArm],
    closing: Sequence[RunOfArm] = (),
    baseline: str = "",
    *,
    within: bool = True,
) -> list[Drift]:
    """The drifts worth a "Read with care" line: a common trend across the trials (on
    trial means, ``trial_trend``) and a closing baseline beyond the baseline trials' own
    spread (``closing_shift``), each significant after Holm over one family (every point,
    both tests: the chance that a drift-free experiment reads "drift" stays at
    ``DRIFT_ALPHA``) and at least ``MIN_DRIFT``; points whose steady window drifted that
    much in some run (Holm over every run's points). By point."""
    found: list[Drift] = []
    tests: list[tuple[Kind, PointKey, Trend]] = [
        *(("across trials", k, t) for k, t in trial_drift([*runs, *closing]).items()),
        *(("closing baseline", k, t) for k, t in closing_drift(runs, closing, baseline).items()),
    ]
    adjusted = holm([t.p_value for _, _, t in tests])
    for (kind, key, t), p in zip(tests, adjusted, strict=True):
        if p is not None and p < DRIFT_ALPHA and abs(t.change) >= MIN_DRIFT:
            found.append(Drift(key, kind, t.change, p, t.n, tests=len(tests)))
    if within:
        found += _within(runs)
    order = {k: i for i, k in enumerate(["across trials", "closing baseline", "within the point"])}
    return sorted(
        found,
        key=lambda d: (tuple(math.inf if x is None else float(x) for x in d.key), order[d.kind]),
    )


def _within(runs: Sequence[RunOfArm]) -> list[Drift]:
    trends = [
        (r.arm, key, t)
        for r in runs
        if r.view.status.state == "succeeded"
        for key, t in point_drift(r.view).items()
    ]
    adjusted = holm([t.p_value for _, _, t in trends])
    flagged: dict[PointKey, dict[str, list[float]]] = {}
    measured: dict[tuple[PointKey, str], int] = {}
    for (arm, key, t), p in zip(trends, adjusted, strict=True):
        measured[(key, arm)] = measured.get((key, arm), 0) + 1
        if p is not None and p < DRIFT_ALPHA and abs(t.change) >= MIN_DRIFT:
            flagged.setdefault(key, {}).setdefault(arm, []).append(t.change)
    out = []
    for key, by_arm in flagged.items():
        worst = max((c for cs in by_arm.values() for c in cs), key=abs)
        out.append(
            Drift(
                key,
                "within the point",
                worst,
                runs=tuple((arm, len(cs), measured[(key, arm)]) for arm, cs in by_arm.items()),
                tests=len(trends),
            )
        )
    return out
