"""Attribution: which knob did it, and by how much.

For an experiment whose arms set a few knobs (a factorial grid, a one-at-a-time grid, or a
plain A/B), each metric at each point is fitted by ordinary least squares (statsmodels) on
its logarithm: one indicator per non-baseline knob value (main effects), one per pair of
changed knobs (two-knob interactions) and, in a factorial with 3 or 4 knobs, the higher-order
products too, so the model has one mean per arm; plus one indicator per trial (trials are
blocks: the arms of one trial ran back to back). Coefficients are log-ratios, so
``exp(coef) - 1`` is the relative effect, and its 95% interval is the t interval of the
coefficient over the residual degrees of freedom (unknown when there are none).

The difference between the baseline arm and the "after" arm (every knob at its after value)
is then the sum of the terms active in the after arm: main effects + interactions (+ the
higher-order rest). On the log scale the parts add up to the total exactly (shown beside
the verdict), and in a balanced design the total equals the ratio of the arms' geometric
means, which is what ``core.analysis.stats`` reports for a one-knob A/B.

A run that failed, or a metric it lacks, is listed in ``failed``/``notes``, never dropped
silently; if an arm has no usable run at a point, the interactions are not estimable and
the main effects come from an additive model (the notes say so).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import statsmodels.api as sm

from core.analysis.memory import memory_headroom
from core.analysis.points import point_key
from core.analysis.stats import NOT_TESTED, RunOfArm, paired_log_ratio
from core.analysis.trials import experiment_runs
from core.analysis.words import Reading, read_difference
from core.config import knob_text, same_value
from core.experiments.design import baseline_arm
from core.experiments.records import ExperimentRecord
from core.metric_info import higher_is_better, metric_name, metrics_for, verdict_metrics
from core.numbers import as_number, pct_interval_text, pct_text
from core.settings import Settings

__all__ = [
    "ATTRIBUTION_METRICS",
    "RUN_LEVEL_METRICS",
    "Attribution",
    "Design",
    "Part",
    "attribute",
    "decompose",
    "design_of",
    "effects_table",
    "experiment_attribution",
    "experiment_effects",
    "format_attribution",
    "higher_is_better",
    "part_ci_text",
    "part_reading",
    "part_word",
    "verdict_sentence",
]

# Per point (from each point's summary) and per run (server facts, memory).
ATTRIBUTION_METRICS = metrics_for("attribution")  # core.metric_info: the one table
RUN_LEVEL_METRICS = frozenset({"kv_cache_tokens", "memory_headroom_gb"})
HIGHER_ORDER = "higher-order interactions"


@dataclass(frozen=True)
class Design:
    """Which arm sets which knob value; each knob's levels start with the baseline's."""

    knobs: tuple[str, ...]
    levels: dict[str, tuple[Any, ...]]
    arm_levels: dict[str, dict[str, Any]]
    baseline_arm: str
    after_arm: str | None
    factorial: bool

    @property
    def changed(self) -> tuple[str, ...]:
        """The knobs whose after value differs from the baseline's."""
        if self.after_arm is None:
            return ()
        base, after = self.arm_levels[self.baseline_arm], self.arm_levels[self.after_arm]
        return tuple(k for k in self.knobs if not same_value(base[k], after[k]))


def _index(values: Sequence[Any], value: Any) -> int:
    return next(i for i, v in enumerate(values) if same_value(v, value))


def _base_value(base: dict[str, Any], knob: str) -> Any:
    group, _, name = knob.partition(".")
    return (base.get(group) or {}).get(name)


def design_of(spec: dict[str, Any]) -> Design | None:
    """The design of an experiment as stored in experiment.json (``spec``): from its grid,
    or from its arms' changes (a plain A/B is a one-knob design). None without knobs."""
    arms = spec.get("arms") or []
    labels = [str(a["label"]) for a in arms]
    knobs: list[str] = []
    for a in arms:
        knobs += [k for k in a.get("changes") or {} if k not in knobs]
    if not knobs or len(arms) < 2:
        return None
    base = spec.get("base") or {}
    arm_levels = {
        str(a["label"]): {k: (a.get("changes") or {}).get(k, _base_value(base, k)) for k in knobs}
        for a in arms
    }
    baseline = baseline_arm(spec)  # the one rule for an experiment's baseline
    grid = spec.get("grid") or {}
    levels: dict[str, tuple[Any, ...]] = {}
    for k in knobs:
        seen: list[Any] = [arm_levels[baseline][k]]
        for lab in labels:
            if not any(same_value(arm_levels[lab][k], v) for v in seen):
                seen.append(arm_levels[lab][k])
        levels[k] = tuple(seen)
    wanted = (
        {
            k: (grid.get("after") or {}).get(k, (grid.get("knobs") or {}).get(k, [None])[-1])
            for k in knobs
        }
        if grid
        else None
    )
    after = None
    for lab in labels:
        lv = arm_levels[lab]
        if wanted is not None and all(same_value(lv[k], wanted[k]) for k in knobs):
            after = lab
    if after is None:  # no grid: the arm that changes the most knobs from the baseline
        changes = {
            lab: sum(not same_value(arm_levels[lab][k], arm_levels[baseline][k]) for k in knobs)
            for lab in labels
            if lab != baseline
        }
        after = max(changes, key=lambda lab: changes[lab])
    cells = {tuple(_index(levels[k], arm_levels[lab][k]) for k in knobs) for lab in labels}
    factorial = len(cells) == math.prod(len(v) for v in levels.values())
    return Design(tuple(knobs), levels, arm_levels, baseline, after, factorial)


# --- the model --------------------------------------------------------------------------------


def _level_name(knob: str, design: Design, i: int) -> str:
    return (
        f"{knob.split('.', 1)[-1]} {knob_text(design.levels[knob][0])}→"
        f"{knob_text(design.levels[knob][i])}"
    )


def _involves(term: str, knobs: Collection[str]) -> bool:
    """Whether a term ("cuda_graphs off→on" or "a 1→2 × b 3→4") involves one of ``knobs``:
    an interaction with a knob the workload could not show is not tested either."""
    return any(part.split(" ", 1)[0] in knobs for part in term.split(" × "))


@dataclass(frozen=True)
class _Term:
    name: str
    kind: str  # main, interaction, higher
    members: tuple[tuple[str, int], ...]  # (knob, level index) that must all hold


def _terms(design: Design, interactions: bool) -> list[_Term]:
    mains = [(k, i) for k in design.knobs for i in range(1, len(design.levels[k]))]
    out = [_Term(_level_name(k, design, i), "main", ((k, i),)) for k, i in mains]
    if not interactions:
        return out
    for order in range(2, len(design.knobs) + 1):
        for combo in itertools.combinations(mains, order):
            if len({k for k, _ in combo}) < order:
                continue  # two levels of one knob never hold at once
            names = " × ".join(_level_name(k, design, i) for k, i in combo)
            out.append(_Term(names, "interaction" if order == 2 else "higher", combo))
    return out


@dataclass
class _Fit:
    terms: list[_Term]
    params: dict[str, float]
    result: Any  # statsmodels RegressionResults, or None when nothing could be fitted
    names: list[str]
    df_resid: float
    additive: bool
    # per arm, trial → log value; set when every arm has its own mean (a saturated model)
    # and the same trials, so that an arm-vs-baseline contrast is the paired estimator's
    arm_logs: dict[str, dict[int, float]] | None = None
    arm_terms: dict[frozenset[str], str] | None = None
    baseline_arm: str = ""


def _design_matrix(
    obs: pd.DataFrame, design: Design, terms: list[_Term]
) -> tuple[np.ndarray, list[str]]:
    cols = [np.ones(len(obs))]
    names = ["const"]
    for t in terms:
        col = np.ones(len(obs))
        for knob, i in t.members:
            col = col * (obs[knob].to_numpy() == i)
        cols.append(col)
        names.append(t.name)
    trials = sorted(obs["trial"].unique())
    for tr in trials[1:]:
        cols.append((obs["trial"].to_numpy() == tr).astype(float))
        names.append(f"trial {tr}")
    return np.column_stack(cols), names


def _fit(obs: pd.DataFrame, design: Design) -> _Fit | None:
    for interactions in (True, False) if design.factorial else (False,):
        terms = _terms(design, interactions)
        x, names = _design_matrix(obs, design, terms)
        if np.linalg.matrix_rank(x) < x.shape[1]:
            continue
        result = sm.OLS(obs["y"].to_numpy(), x).fit()
        params = dict(zip(names, (float(p) for p in result.params), strict=True))
        return _Fit(
            terms,
            params,
            result,
            names,
            float(result.df_resid),
            additive=design.factorial and not interactions,
            **_paired_contrasts(obs, design, terms),
        )
    return None


def _paired_contrasts(obs: pd.DataFrame, design: Design, terms: list[_Term]) -> dict[str, Any]:
    """When each arm has its own mean (as many terms as arms − 1) and every arm ran the
    same trials, the sum of the terms active in an arm is exactly that arm's paired
    log-ratio to the baseline: the interval then comes from the one estimator
    (``core.analysis.stats.paired_log_ratio``), so the card and the attribution agree."""
    arms = sorted(set(obs["arm"]))
    if len(terms) != len(design.arm_levels) - 1 or len(arms) != len(design.arm_levels):
        return {}
    logs = {
        a: dict(zip(g["trial"].astype(int), g["y"].astype(float), strict=True))
        for a, g in obs.groupby("arm")
    }
    if len({frozenset(v) for v in logs.values()}) != 1 or any(
        len(v) != len(g) for v, (_, g) in zip(logs.values(), obs.groupby("arm"), strict=True)
    ):
        return {}  # unbalanced (or a trial twice): the OLS estimate is not the paired one
    by_terms: dict[frozenset[str], str] = {}
    for arm in design.arm_levels:
        if arm == design.baseline_arm:
            continue
        held = {(k, _index(design.levels[k], design.arm_levels[arm][k])) for k in design.knobs}
        by_terms[frozenset(t.name for t in terms if all(m in held for m in t.members))] = arm
    return {"arm_logs": logs, "arm_terms": by_terms, "baseline_arm": design.baseline_arm}


def _interval(fit: _Fit, weights: dict[str, float]) -> tuple[float, float | None, float | None]:
    vec = np.array([weights.get(n, 0.0) for n in fit.names])
    est = float(vec @ np.array([fit.params[n] for n in fit.names]))
    arm = (fit.arm_terms or {}).get(frozenset(weights))
    if arm is not None and fit.arm_logs and set(weights.values()) == {1.0}:
        values = {t: math.exp(y) for t, y in fit.arm_logs[arm].items()}
        base = {t: math.exp(y) for t, y in fit.arm_logs[fit.baseline_arm].items()}
        _, low, high = paired_log_ratio(values, base)
        if low is None or high is None:
            return est, None, None
        return est, math.log1p(low), math.log1p(high)
    if fit.df_resid < 1:
        return est, None, None
    low, high = (float(v) for v in np.asarray(fit.result.t_test(vec).conf_int(0.05))[0])
    return est, low, high


# --- results ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Part:
    """One piece of the difference: a log-ratio with its interval (None: unknown)."""

    name: str
    kind: str  # main, interaction, higher, total
    log: float
    log_low: float | None
    log_high: float | None

    @property
    def rel(self) -> float:
        return math.expm1(self.log)

    @property
    def covers_zero(self) -> bool | None:
        """Whether its interval holds 0 (None: no interval): no direction shown."""
        if self.log_low is None or self.log_high is None:
            return None
        return self.log_low <= 0 <= self.log_high


@dataclass
class Attribution:
    design: Design
    effects: pd.DataFrame  # one row per (point, metric, term); see effects_table
    decompositions: dict[tuple[Any, str], list[Part]]  # (concurrency, metric) → parts + total
    measured: dict[tuple[Any, str], float]  # raw geometric-mean log-ratio after vs baseline
    failed: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _observations(
    runs: Sequence[RunOfArm], metric: str
) -> dict[tuple[Any, str], list[tuple[str, int, float]]]:
    """(point key, label) → (arm, trial, value) of every succeeded run with a positive value."""
    out: dict[tuple[Any, str], list[tuple[str, int, float]]] = {}
    for r in runs:
        if r.view.status.state != "succeeded":
            continue
        if metric in RUN_LEVEL_METRICS:
            value = _run_value(r, metric)
            if value is not None:
                out.setdefault((None, "all points"), []).append((r.arm, r.trial, value))
            continue
        for s in r.view.points:
            v = as_number((s.get("metrics") or {}).get(metric))
            if v is not None and v > 0:
                key = (point_key(s), str(s.get("label", point_key(s))))
                out.setdefault(key, []).append((r.arm, r.trial, v))
    return out


def _run_value(r: RunOfArm, metric: str) -> float | None:
    if metric == "kv_cache_tokens":
        v = r.view.facts.get("kv_cache_tokens")
    else:  # memory headroom: the one rule (core.analysis.memory.headroom_gb)
        v = memory_headroom([r.view]).iloc[0]["headroom_gb"]
    x = as_number(v)
    return x if x is not None and x > 0 else None  # the log scale needs a positive value


def _failed_runs(runs: Sequence[RunOfArm]) -> list[dict[str, Any]]:
    return [
        {
            "arm": r.arm,
            "trial": r.trial,
            "run_id": r.view.run_id,
            "state": r.view.status.state,
            "reason": r.view.status.reason,
        }
        for r in runs
        if r.view.status.state != "succeeded"
    ]


def _design_frame(vals: list[tuple[str, int, float]], design: Design) -> pd.DataFrame:
    """One point's values of the design's arms, with log(value) and each knob's level index."""
    obs = pd.DataFrame(vals, columns=["arm", "trial", "value"])
    obs = obs[obs["arm"].isin(list(design.arm_levels))]
    obs["y"] = np.log(obs["value"])
    for k in design.knobs:
        obs[k] = [_index(design.levels[k], design.arm_levels[a][k]) for a in obs["arm"]]
    return obs


def attribute(
    runs: Sequence[RunOfArm], design: Design, metrics: Sequence[str] = ATTRIBUTION_METRICS
) -> Attribution:
    """Effects per point and metric, and the split of the baseline→after difference."""
    rows: list[dict[str, Any]] = []
    parts: dict[tuple[Any, str], list[Part]] = {}
    measured: dict[tuple[Any, str], float] = {}
    failed = _failed_runs(runs)
    notes = [
        f"run {f['run_id']} ({f['arm']}, trial {f['trial']}) {f['state']}"
        + (f": {f['reason']}" if f["reason"] else "")
        + " — left out of the fit"
        for f in failed
    ]
    for metric in metrics:
        for (key, label), vals in _observations(runs, metric).items():
            conc = None if key is None else key[0]
            obs = _design_frame(vals, design)
            missing = [a for a in design.arm_levels if a not in set(obs["arm"])]
            where = f"{metric_name(metric)} at {label}"
            if missing:
                notes.append(f"{where}: no value from arm(s) {', '.join(missing)}")
            fit = _fit(obs, design)
            if fit is None:
                notes.append(f"{where}: effects not estimable from the runs that succeeded")
                continue
            if fit.additive:
                notes.append(
                    f"{where}: interactions not estimable (an arm has no value); "
                    "main effects assume none"
                )
            for t in fit.terms:
                est, low, high = _interval(fit, {t.name: 1.0})
                rows.append(
                    _row(label, conc, metric, t.name, t.kind, est, low, high, fit, len(obs))
                )
            split = _decompose_fit(fit, design)
            if split is not None:
                parts[(conc, metric)] = split
                total = split[-1]
                span = (total.log, total.log_low, total.log_high)
                rows.append(_row(label, conc, metric, total.name, "total", *span, fit, len(obs)))
                raw = _measured(obs, design)
                if raw is not None:
                    measured[(conc, metric)] = raw
    return Attribution(design, pd.DataFrame(rows, columns=_COLUMNS), parts, measured, failed, notes)


_COLUMNS = [
    "point",
    "concurrency",
    "metric",
    "term",
    "kind",
    "log_effect",
    "log_low",
    "log_high",
    "rel",
    "rel_low",
    "rel_high",
    "label",
    "n_runs",
    "df_resid",
]


def _row(
    point: str,
    conc: Any,
    metric: str,
    term: str,
    kind: str,
    est: float,
    low: float | None,
    high: float | None,
    fit: _Fit,
    n: int,
) -> dict[str, Any]:
    return {
        "point": point,
        "concurrency": conc,
        "metric": metric,
        "term": term,
        "kind": kind,
        "log_effect": est,
        "log_low": low,
        "log_high": high,
        "rel": math.expm1(est),
        "rel_low": None if low is None else math.expm1(low),
        "rel_high": None if high is None else math.expm1(high),
        "label": _label(metric, est, low, high),
        "n_runs": n,
        "df_resid": fit.df_resid,
    }


def _label(metric: str, est: float, low: float | None, high: float | None) -> str:
    """An effect's word (``core.analysis.words``; ``est``, ``low``, ``high`` on the log
    scale). No trial count: an OLS effect's spread is not one contrast's."""
    if low is None or high is None:
        return read_difference(metric, math.expm1(est), None, None, 0).text()
    return read_difference(metric, math.expm1(est), math.expm1(low), math.expm1(high), 0).text()


def _decompose_fit(fit: _Fit, design: Design) -> list[Part] | None:
    """Main effects and interactions active in the after arm, then the higher-order rest
    (one part), then the total (their sum, with its own interval)."""
    if design.after_arm is None:
        return None
    after = design.arm_levels[design.after_arm]
    held = {(k, _index(design.levels[k], after[k])) for k in design.knobs}
    active = [t for t in fit.terms if all(m in held for m in t.members)]
    out = []
    for t in active:
        if t.kind != "higher":
            est, low, high = _interval(fit, {t.name: 1.0})
            out.append(Part(t.name, t.kind, est, low, high))
    higher = {t.name: 1.0 for t in active if t.kind == "higher"}
    if higher:
        est, low, high = _interval(fit, higher)
        out.append(Part(HIGHER_ORDER, "higher", est, low, high))
    est, low, high = _interval(fit, {t.name: 1.0 for t in active})
    out.append(Part("total", "total", est, low, high))
    return out


def _measured(obs: pd.DataFrame, design: Design) -> float | None:
    """log(geometric mean of the after arm / geometric mean of the baseline arm)."""
    a = obs[obs["arm"] == design.after_arm]["y"]
    b = obs[obs["arm"] == design.baseline_arm]["y"]
    return None if a.empty or b.empty else float(a.mean() - b.mean())


def decompose(attr: Attribution, metric: str, concurrency: Any = "highest") -> list[Part]:
    """The parts (and the total, last) at one concurrency; "highest" picks the largest."""
    keys = [k for k in attr.decompositions if k[1] == metric]
    if not keys:
        return []
    if concurrency == "highest":
        concs = [k[0] for k in keys]
        known = [c for c in concs if c is not None]
        concurrency = max(known) if known else None
    return attr.decompositions.get((concurrency, metric), [])


def effects_table(attr: Attribution) -> pd.DataFrame:
    """Every effect with its interval (the export's table)."""
    return attr.effects.copy()


# --- the sentence -----------------------------------------------------------------------------


def part_ci_text(p: Part) -> str:
    """A part's interval as a sentence quotes it: "95% CI -26.1…+61.1%"."""
    if p.log_low is None or p.log_high is None:
        return "interval unknown"
    return f"95% CI {pct_interval_text(math.expm1(p.log_low), math.expm1(p.log_high))}"


def _arm_text(design: Design, arm: str) -> str:
    levels = design.arm_levels[arm]
    return " + ".join(f"{k.split('.', 1)[-1]} {knob_text(levels[k])}" for k in design.changed)


def part_reading(p: Part, metric: str, pairs: int = 0) -> Reading:
    """THE word of one part of the split (``core.analysis.words``: better / worse,
    equivalent within ±5 %, inconclusive, unconfirmed), from its own interval. ``pairs``:
    the paired trials a main effect's interval stands on (a grid arm against the baseline),
    so an inconclusive part says how many trials would resolve it; 0: not said."""
    low, high = (None if x is None else math.expm1(x) for x in (p.log_low, p.log_high))
    return read_difference(metric, p.rel, low, high, pairs)


def part_word(p: Part, metric: str, untested: Collection[str] = (), pairs: int = 0) -> str:
    """The word a sentence gives one part of the split: "not tested by this workload" where
    it involves a knob the workload never exercised (``untested``), else "" for a finding
    (better / worse: the sentence's sign says it) or ``part_reading``'s word."""
    if _involves(p.name, untested):
        return NOT_TESTED
    reading = part_reading(p, metric, pairs)
    return "" if reading.coloured else reading.text()


def _part_text(p: Part, metric: str, untested: Collection[str]) -> str:
    """One part of the split: its change, interval and, where it is no finding, its word
    (``part_word``)."""
    word = part_word(p, metric, untested)
    tail = f", {word}" if word else ""
    name = (
        p.name
        if p.kind == "main"
        else f"interaction {p.name}"
        if p.kind == "interaction"
        else p.name
    )
    return f"{name} {pct_text(p.rel)} ({part_ci_text(p)}{tail})"


def verdict_sentence(
    attr: Attribution,
    metric: str = "output_throughput",
    concurrency: Any = "highest",
    untested: Collection[str] = (),
) -> str:
    """ "Of the −14% output throughput at concurrency 64 (after vs before): knob +9% (95% CI
    …), …." followed by the log-scale sum of the parts. ``untested``:
    the knobs whose resource the workload never reached (``core.analysis.knob_checks``):
    their part reads "not tested by this workload", never "inconclusive"."""
    parts = decompose(attr, metric, concurrency)
    words = metric_name(metric)
    if not parts:
        why = "; ".join(attr.notes[-3:]) or "no comparable results yet"
        return f"No attribution of {words}: {why}."
    *pieces, total = parts
    design = attr.design
    assert design.after_arm is not None
    conc = next(k[0] for k, v in attr.decompositions.items() if v is parts)
    where = "over all points" if conc is None else f"at concurrency {conc}"
    texts = [_part_text(p, metric, untested) for p in pieces]
    additive = (
        " (additive model: interactions not estimable)"
        if not any(p.kind == "interaction" for p in pieces) and len(design.changed) > 1
        else ""
    )
    head = (
        f"Of the {pct_text(total.rel)} {words} {where} "
        f"({_arm_text(design, design.after_arm)} vs "
        f"{_arm_text(design, design.baseline_arm)}; {part_ci_text(total)}): "
    )
    logs = " ".join(f"{p.log:+.3f}" for p in pieces)
    check = (
        f"On the log scale the parts add up: {logs} = {total.log:+.3f} = "
        f"ln(1 {'+' if total.rel >= 0 else '-'} {abs(total.rel) * 100:.1f}%)"
    )
    raw = attr.measured.get((conc, metric))
    if raw is not None and abs(raw - total.log) > 5e-4:
        check += f"; the arms' raw geometric means differ by {raw:+.3f} (unbalanced runs)"
    return head + ", ".join(texts) + additive + ". " + check + "."


def experiment_attribution(
    settings: Settings, record: ExperimentRecord, runs: Sequence[RunOfArm] | None = None
) -> Attribution | None:
    """The attribution of a grid experiment (experiment.json ``record``); None for an
    experiment without a grid (its A/B verdict says it all) or before any run finished.
    ``runs``: ``experiment_runs`` already read, if at hand."""
    design = design_of(record.spec) if record.spec.get("grid") else None
    if design is None:
        return None
    runs = list(runs) if runs is not None else experiment_runs(settings, record)
    if not any(r.view.status.state == "succeeded" for r in runs):
        return None
    return attribute(runs, design)


def format_attribution(
    settings: Settings,
    record: ExperimentRecord,
    untested: Collection[str] = (),
) -> list[str]:
    """Text lines for the CLI: the verdict per metric at the highest concurrency, then the
    runs left out and why (``untested``: as ``verdict_sentence``)."""
    attr = experiment_attribution(settings, record)
    if attr is None:
        return []
    out = ["", "Attribution (log-ratio effects, OLS with trial blocks):"]
    for metric in verdict_metrics():
        if decompose(attr, metric):
            out.append("  " + verdict_sentence(attr, metric, untested=untested))
    out += [f"  note: {n}" for n in attr.notes]
    return out


def experiment_effects(
    settings: Settings, record: ExperimentRecord, untested: Collection[str] = ()
) -> tuple[list[str], pd.DataFrame] | None:
    """For exports: the verdict sentences (output throughput, then TTFT) and every effect;
    None for an experiment without a grid or results. ``untested``: as ``verdict_sentence``
    (the effects' ``label`` too)."""
    attr = experiment_attribution(settings, record)
    if attr is None:
        return None
    sentences = [
        verdict_sentence(attr, m, untested=untested)
        for m in verdict_metrics()[:2]  # output throughput, then TTFT
        if decompose(attr, m)
    ]
    effects = effects_table(attr)
    if untested and not effects.empty:
        idle = effects["term"].map(lambda term: _involves(str(term), untested))
        found = effects["label"].isin(["better", "worse"])
        effects.loc[idle & ~found, "label"] = NOT_TESTED
    return sentences + [f"note: {n}" for n in attr.notes], effects
