"""The answer at a glance: the summary card at the top of the Compare and Experiment pages
and of the HTML report.

For each arm against the baseline, at each concurrency: output throughput, TTFT (median,
p99), ITL and TPOT (median), the peak GPU memory and the memory headroom, plus the KV pool
(a start-up fact, one value per run). Each cell holds the change, its 95% interval
(``core.analysis.stats.paired_log_ratio``: paired by trial, log scale, never below -100%)
and its word (``core.analysis.words``: better / worse, equivalent within ±M, inconclusive,
unconfirmed; its rows: ``core.analysis.card_row``). The family is declared
(``core.analysis.verdict_family`` over the rules of ``core.analysis.family``): the
confirmatory contrasts are each knob's arm × each headline metric at the headline point,
under Holm; every other cell is exploratory and is coloured only where Benjamini–Hochberg
confirms it. What a knob is meant to consume (``KnobSpec.meant_cost``: reserved or graph
memory) reads "cost", never worse. Regressions come first, in words (``regressions``):
confirmed confirmatory ones only. Points whose numbers are suspect (cut short by a cancel,
the load generator saturated or its timestamps late, not steady state:
``core.metrics.point_caveats``) are named too (``caveats``), in the card and the verdict
alike.

An arm is a list of runs: the trials of an experiment arm, or one run of a comparison.
With fewer than 3 runs per arm there is no interval and the change is unconfirmed, whatever
its size. The host's run-to-run noise is shown (``noise_note``), never a threshold.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from core.analysis.card_row import CARD_METRICS, COST, MEMORY_METRICS, CardRow
from core.analysis.diff import confounders
from core.analysis.drift import Drift, drift_findings
from core.analysis.knob_checks import (
    idle_knobs,
    knob_change,
    knob_checks,
    knob_sentence,
    single_knob_arms,
    untested_arms,
)
from core.analysis.ledger import MemoryLedger, arm_ledgers, knob_cost
from core.analysis.memory import gpu_total_gb, headroom_gb, memory_headroom, peak_gpu_mib_by_point
from core.analysis.noise import runs_fingerprint
from core.analysis.points import (
    different_prompts,
    first_points,
    metric_deltas,
)
from core.analysis.power import host_noise, noise_text
from core.analysis.roles import field_name, headline_point
from core.analysis.runs import RunView
from core.analysis.same_answers import AnswersVerdict, answers_lines, answers_of_runs
from core.analysis.sequential import look_level, progress_text
from core.analysis.stats import (
    NOT_TESTED,
    RunOfArm,
    arm_stats,
    paired_log_ratio,
    runs_phrase,
    verdict,
)
from core.analysis.trials import closing_runs, experiment_runs
from core.analysis.verdict_family import (
    confirmatory_arms,
    declare_family,
    family_line,
    no_interval_text,
    regression_lines,
    regressions,
    regressions_paragraph,
    worse_alone_lines,
)
from core.analysis.words import (
    BETTER_ALONE,
    EQUIVALENT,
    INCONCLUSIVE,
    UNCONFIRMED,
    WORSE_ALONE,
    margin_of,
    read_difference,
)
from core.config import same_value
from core.engines.registry import find_engine
from core.experiments.design import DEFAULT_MARGIN, ExperimentSpec, baseline_arm
from core.experiments.records import ExperimentRecord
from core.metrics import (
    CAVEAT_KINDS,
    CAVEAT_MEANING,
    VERDICT_METRICS,
    Caveat,
    as_number,
    headline_index,
    metric_label,
    point_caveats,
)
from core.numbers import (
    number_text,
    pct_text,
    share_text,
)
from core.settings import Settings
from core.shapes import model_label

__all__ = [
    "CARD_METRICS",
    "DIFFERENT_PROMPTS",
    "UNCONFIRMED",
    "CardRow",
    "PointCaveat",
    "ReadWithCare",
    "Story",
    "arm_table",
    "card_frame",
    "card_grid",
    "caveat_line",
    "caveats",
    "comparison_story",
    "experiment_story",
    "family_line",
    "no_interval_text",
    "noise_note",
    "regression_lines",
    "regressions",
    "regressions_paragraph",
    "shared_experiment",
    "succeeded_by_arm",
    "summary_card",
    "worse_alone_lines",
]

# the card metrics a knob meant to consume memory moves on purpose (its cost)
_COST_METRICS = {
    "reserved_memory_kv_tokens": ("peak_gpu_mib", "headroom_gb"),
    "graph_memory": ("peak_gpu_mib", "headroom_gb"),
}


def _point_values(
    views: Sequence[RunView], trials: Sequence[int]
) -> dict[tuple[Any, ...], dict[str, dict[int, float]]]:
    """Per point key: per card metric, trial → value (a run's first point at that key)."""
    out: dict[tuple[Any, ...], dict[str, dict[int, float]]] = {}
    for v, trial in zip(views, trials, strict=True):
        peaks = peak_gpu_mib_by_point(v.path)
        total_gb = gpu_total_gb(v.facts.get("gpus"))
        free_gb = as_number(v.facts.get("available_gpu_mem_gb"))
        for key, s in first_points(v):
            cell = out.setdefault(key, {})
            metrics = s.get("metrics") or {}
            for m in CARD_METRICS:
                value = as_number(metrics.get(m)) if m not in MEMORY_METRICS else None
                if m == "peak_gpu_mib":
                    value = peaks.get(int(s.get("index", -1)))
                elif m == "headroom_gb" and free_gb is None:
                    # no memory facts from the server: the GPU's total minus the NVML peak
                    value = headroom_gb(None, total_gb, peaks.get(int(s.get("index", -1))))
                if value is not None:
                    cell.setdefault(m, {}).setdefault(trial, value)
    return out


def summary_card(
    arms: Mapping[str, Sequence[RunView]],
    baseline: str,
    trials: Mapping[str, Sequence[int]] | None = None,
    level: float = 0.95,
    margin: float = DEFAULT_MARGIN,
) -> list[CardRow]:
    """The card's rows for every arm other than ``baseline`` (arms in order; the views of
    an arm are its succeeded runs), each read by ``core.analysis.words`` against the
    equivalence ``margin`` and corrected for its family (``declare_family``); the host's
    run-to-run noise never decides a word (``noise_note``). ``trials``: per
    arm, the trial of each view, so that arms pair by trial (``paired_log_ratio``); without
    it (plain runs, one each) the views pair by position. ``level``: the intervals'
    coverage."""
    if baseline not in arms:
        return []
    trial_of = {
        arm: list(trials[arm]) if trials and arm in trials else list(range(len(views)))
        for arm, views in arms.items()
    }
    per_arm = {arm: _point_values(views, trial_of[arm]) for arm, views in arms.items()}
    keys = _sorted_keys({k for values in per_arm.values() for k in values})
    shapes = {k[1:] for k in keys}
    head = _headline_key(keys, per_arm)
    confirm = confirmatory_arms(arms, baseline)
    costs = _cost_metrics(arms, baseline)
    rows: list[CardRow] = []
    for arm, views in arms.items():
        if arm == baseline:
            continue
        for metric in CARD_METRICS:
            if metric == "kv_cache_tokens":
                a = _facts(views, metric, trial_of[arm])
                b = _facts(arms[baseline], metric, trial_of[baseline])
                rows.append(_row(metric, None, "start-up", arm, baseline, a, b, level, margin))
                continue
            for key in keys:
                a = per_arm[arm].get(key, {}).get(metric, {})
                b = per_arm[baseline].get(key, {}).get(metric, {})
                if not a and not b:
                    continue
                row = _row(
                    metric, key[0], _point_label(key, shapes), arm, baseline, a, b, level, margin
                )
                if metric in costs.get(arm, ()):
                    row = replace(row, verdict=COST)
                elif arm in confirm and metric in VERDICT_METRICS and key == head:
                    row = replace(row, family="confirmatory")
                rows.append(row)
    # the KV pool and the headroom from server facts are whole-run: drop empty ones
    return declare_family([r for r in rows if r.mean is not None or r.base_mean is not None])


def _headline_key(
    keys: Sequence[tuple[Any, ...]], per_arm: Mapping[str, Mapping[tuple[Any, ...], Any]]
) -> tuple[Any, ...] | None:
    """THE headline point (``core.metrics.headline_index``) among the points every arm
    measured."""
    common = [k for k in keys if all(k in values for values in per_arm.values())]
    index = headline_index([{"concurrency": k[0]} | _rest_of(k) for k in common])
    return None if index is None else common[index]


def _rest_of(key: tuple[Any, ...]) -> dict[str, Any]:
    return {"request_rate": key[1]} if len(key) > 1 else {}


def _cost_metrics(
    arms: Mapping[str, Sequence[RunView]], baseline: str
) -> dict[str, tuple[str, ...]]:
    """Per arm: the card metrics that move because a knob it changes is meant to consume
    memory (``KnobSpec.meant_cost``, the engine's declaration): its cost, not a regression."""
    base = dict(arms[baseline][0].spec.get("server") or {}) if arms.get(baseline) else {}
    out: dict[str, tuple[str, ...]] = {}
    for arm, views in arms.items():
        if arm == baseline or not views:
            continue
        server = dict(views[0].spec.get("server") or {})
        engine = find_engine(server.get("engine"))
        if engine is None:
            continue
        changed = [
            k for k in base.keys() | server.keys() if not same_value(base.get(k), server.get(k))
        ]
        metrics = [
            m
            for k in changed
            if (spec := engine.knob(k)) is not None
            for m in _COST_METRICS.get(spec.meant_cost, ())
        ]
        if metrics:
            out[arm] = tuple(dict.fromkeys(metrics))
    return out


def _sorted_keys(keys: set[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return sorted(keys, key=lambda k: tuple(math.inf if x is None else float(x) for x in k))


# A caveat of the comparison, not of one run: the arms' workload or prompts digests differ.
DIFFERENT_PROMPTS = "DIFFERENT PROMPTS"
_DIFFERENT_MEANING = (
    "the arms were not sent the same prompts here: this is not a prompt-for-prompt "
    "comparison, and a difference may be the workload's, not the knob's"
)


def _point_label(key: tuple[Any, ...], shapes: set[tuple[Any, ...]]) -> str:
    """``c=64``, plus the rest of the load where the points differ in more than that."""
    return f"c={key[0]}" if len(shapes) == 1 else f"c={key[0]} {key[1:]}"


@dataclass(frozen=True)
class PointCaveat:
    """A point whose numbers are suspect in some runs: where, why (the worst run's figures)
    and in how many of each arm's runs."""

    point: str
    kind: str
    detail: str
    runs: tuple[tuple[str, int, int], ...]  # (arm, runs flagged, runs that measured the point)

    def sentence(self, care: bool = True) -> str:
        """``c=64: load generator saturated (worst: client CPU 97% of a core >= 90%) in 2 of
        3 runs of graphs on — the client, not the server, may have limited these numbers``
        (``care``: with that last part, what the caveat means: core.metrics.CAVEAT_MEANING)."""
        meaning = (
            _DIFFERENT_MEANING
            if self.kind == DIFFERENT_PROMPTS
            else CAVEAT_MEANING.get(self.kind, "read with care")
        )
        return f"{self.point}: {self.kind} {self.figures()} in {runs_phrase(self.runs)}" + (
            f" — {meaning}" if care else ""
        )

    def figures(self) -> str:
        """``(worst: event-loop lag p99 7.1 ms > 5 ms)``: "worst" where several runs were
        flagged and the figures are the worst run's."""
        several = sum(k for _, k, _ in self.runs) > 1 and self.kind != DIFFERENT_PROMPTS
        return f"({'worst: ' if several else ''}{self.detail})"


def caveats(arms: Mapping[str, Sequence[RunView]]) -> list[PointCaveat]:
    """Every point whose numbers are suspect in any run of any arm (baseline included), by
    point and then by kind (``core.metrics.CAVEAT_KINDS``), naming the worst run's figures."""
    flagged: dict[tuple[tuple[Any, ...], str], dict[str, list[Caveat]]] = {}
    measured: dict[tuple[tuple[Any, ...], str], int] = {}
    sent: dict[tuple[Any, ...], dict[str, list[dict[str, Any]]]] = {}
    for arm, views in arms.items():
        for v in views:
            for key, s in first_points(v):
                measured[(key, arm)] = measured.get((key, arm), 0) + 1
                sent.setdefault(key, {}).setdefault(arm, []).append(s)
                for c in point_caveats(s, v.status):
                    flagged.setdefault((key, c.kind), {}).setdefault(arm, []).append(c)
    keys = _sorted_keys({k for k, _ in measured})
    shapes = {k[1:] for k in keys}
    out = []
    for key in keys:  # loudest first: the arms were not compared prompt for prompt
        of_arm = sent.get(key) or {}
        if len(of_arm) > 1 and different_prompts([s for ss in of_arm.values() for s in ss]):
            digests = "; ".join(
                f"{arm}: "
                + ", ".join(
                    sorted(
                        {
                            f"workload {(s.get('workload') or {}).get('digest') or '?'}"
                            f" prompts {s.get('prompts_digest') or '?'}"
                            for s in ss
                        }
                    )
                )
                for arm, ss in of_arm.items()
            )
            out.append(
                PointCaveat(
                    _point_label(key, shapes),
                    DIFFERENT_PROMPTS,
                    digests,
                    tuple((arm, len(ss), len(ss)) for arm, ss in of_arm.items()),
                )
            )
    for key in keys:
        for kind in CAVEAT_KINDS:
            by_arm = flagged.get((key, kind))
            if not by_arm:
                continue
            worst = max((c for cs in by_arm.values() for c in cs), key=lambda c: c.severity)
            out.append(
                PointCaveat(
                    _point_label(key, shapes),
                    kind,
                    worst.detail,
                    tuple((arm, len(cs), measured[(key, arm)]) for arm, cs in by_arm.items()),
                )
            )
    return out


# What a "Read with care" line names: a suspect point, or a drift (core.analysis.drift).
ReadWithCare = PointCaveat | Drift


def drift_caveats(found: Sequence[Drift], keys: Sequence[tuple[Any, ...]]) -> list[Drift]:
    """The drifts, each labelled as the card labels its point (``keys``: every point key
    of the runs, so the labels say as much as the card's columns)."""
    shapes = {k[1:] for k in {*keys, *(d.key for d in found)}}
    return [replace(d, point=_point_label(d.key, shapes)) for d in found]


def caveat_line(found: Sequence[ReadWithCare]) -> str | None:
    """The caveats (suspect points, drift) as one line of the verdict; None when there are
    none."""
    if not found:
        return None
    # One kind at several points of the same runs (a demo's single-wave points are "not
    # steady state" at every concurrency) is named once, with each point's own figures.
    groups: dict[object, list[ReadWithCare]] = {}
    for i, c in enumerate(found):
        key: object = i
        if isinstance(c, PointCaveat) and c.kind != DIFFERENT_PROMPTS:
            key = (c.kind, runs_phrase(c.runs))
        groups.setdefault(key, []).append(c)
    parts = []
    for group in groups.values():  # in the order each was first found
        if len(group) == 1:
            parts.append(group[0].sentence(care=False))
            continue
        first = group[0]
        assert isinstance(first, PointCaveat)
        *head, last = [f"{c.point} {c.figures()}" for c in group if isinstance(c, PointCaveat)]
        parts.append(f"{first.kind} at {', '.join(head)} and {last} in {runs_phrase(first.runs)}")
    return "Read with care: " + "; ".join(parts) + "."


def _facts(views: Sequence[RunView], metric: str, trials: Sequence[int]) -> dict[int, float]:
    if metric == "kv_cache_tokens":
        pairs = zip(trials, (as_number(v.facts.get(metric)) for v in views), strict=True)
    else:
        head = memory_headroom(list(views))
        pairs = zip(trials, (as_number(v) for v in head[metric]), strict=True)
    return {t: x for t, x in pairs if x is not None}


def _row(
    metric: str,
    conc: int | None,
    point: str,
    arm: str,
    baseline: str,
    a: Mapping[int, float],
    b: Mapping[int, float],
    level: float = 0.95,
    margin: float = DEFAULT_MARGIN,
) -> CardRow:
    change, low, high = paired_log_ratio(a, b, level)
    pairs = len(set(a) & set(b))
    reading = read_difference(metric, change, low, high, pairs, margin=margin, level=level)
    return CardRow(
        metric=metric,
        concurrency=conc,
        point=point,
        arm=arm,
        baseline=baseline,
        base_mean=float(np.mean(list(b.values()))) if b else None,
        mean=float(np.mean(list(a.values()))) if a else None,
        change=change,
        low=low,
        high=high,
        n=len(a),
        n_base=len(b),
        verdict=reading.word,
        confirmed=low is not None and high is not None,
        level=level,
        reading=reading,
    )


def card_frame(rows: Sequence[CardRow]) -> pd.DataFrame:
    """The card as a long table (exports): one row per metric, concurrency and arm."""
    return pd.DataFrame(
        [
            {
                "arm": r.arm,
                "baseline": r.baseline,
                "metric": r.metric,
                "name": r.name,
                "unit": r.unit,
                "concurrency": r.concurrency,
                "baseline_mean": r.base_mean,
                "mean": r.mean,
                "change": r.change,
                "change_low": r.low,
                "change_high": r.high,
                "n": r.n,
                "n_baseline": r.n_base,
                "verdict": r.verdict,
                "words": r.word_text(),
                "family": r.family,
                "confirmed": r.confirmed,
            }
            for r in rows
        ],
        columns=[
            "arm",
            "baseline",
            "metric",
            "name",
            "unit",
            "concurrency",
            "baseline_mean",
            "mean",
            "change",
            "change_low",
            "change_high",
            "n",
            "n_baseline",
            "verdict",
            "words",
            "family",
            "confirmed",
        ],
    )


def card_grid(rows: Sequence[CardRow], arm: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One arm's card as a grid: a row per metric, a column per concurrency, each cell
    ``change (interval) mark``; and the same grid of words (for colouring: only better /
    worse are coloured, and only a row's family confirms those)."""
    mine = [r for r in rows if r.arm == arm]
    columns = list(
        dict.fromkeys(
            r.point for r in sorted(mine, key=lambda r: (r.concurrency is None, r.concurrency or 0))
        )
    )
    text: dict[str, dict[str, str]] = {}
    verdicts: dict[str, dict[str, str]] = {}
    for r in mine:
        label = metric_label(r.metric)
        text.setdefault(label, {})[r.point] = r.cell_text()
        verdicts.setdefault(label, {})[r.point] = r.verdict
    index = list(text)
    # A per-point metric has no start-up cell and a start-up fact no per-point one: "—",
    # not "None" (which reads like a missing measurement).
    return (
        pd.DataFrame.from_dict(text, orient="index")
        .reindex(index=index, columns=columns)
        .fillna("—"),
        pd.DataFrame.from_dict(verdicts, orient="index")
        .reindex(index=index, columns=columns)
        .fillna(""),
    )


def noise_note(
    settings: Settings | None,
    views: Sequence[RunView],
    server: Mapping[str, Any] | None = None,
) -> str:
    """ "this host's run-to-run noise ±x % …" (``power.noise_text``) of the machine the
    runs ran on (their fingerprint, ``noise.runs_fingerprint``: never a host name) for
    ``server``'s engine and model (default: the first run's); "" where that machine has
    shown no noise. Shown beside the card; it never decides a word."""
    if settings is None or not views:
        return ""
    server = server if server is not None else views[0].spec.get("server") or {}
    found = host_noise(
        settings,
        runs_fingerprint(views),
        engine=server.get("engine"),
        model=model_label(server),
    )
    if found is None:
        return ""
    text = noise_text(found)
    return f"{text[:1].upper()}{text[1:]}; it plans trials, it never decides a word."


@dataclass(frozen=True)
class Story:
    """Everything a page or an export says about one comparison or experiment: who is the
    baseline, what each arm is called, the card and the verdict, so they never disagree."""

    baseline: str
    arms: list[str]
    card: list[CardRow]
    verdict: list[str]
    noise: str  # this host's run-to-run noise (``noise_note``), "" where none is known
    # suspect points and drift, in words (the "Read with care" line)
    caveats: list[ReadWithCare] = field(default_factory=list)
    # per knob under test: could the workload show it (core.analysis.knob_checks)
    knob_checks: list[dict[str, Any]] = field(default_factory=list)
    ledger: dict[str, MemoryLedger] = field(default_factory=dict)  # per arm
    # arms that differ from the baseline only in knobs the workload never exercised
    untested_arms: list[str] = field(default_factory=list)
    level: float = 0.95  # the intervals' level (an adaptive experiment's is adjusted)
    margin: float = DEFAULT_MARGIN  # the plan's equivalence margin (a fraction)

    @property
    def family(self) -> str | None:
        """The declared family in words (``family_line``)."""
        return family_line(self.card)

    # per arm: same / differs / broken answers against the baseline (analysis.same_answers)
    answers: dict[str, AnswersVerdict] = field(default_factory=dict)

    @property
    def costs(self) -> str | None:
        """What each knob under test costs and buys, in the ledger's units, on one line:
        ``cuda_graphs on: +0.40 GB graph memory (…); mem_fraction_static 0.92: +9.74 GB
        reserved → +454,083 KV tokens (+8.3 %)``; None where the ledger says nothing."""
        found = [str(c["cost"]) for c in self.knob_checks if c.get("cost")]
        return "; ".join(found) if found else None

    @property
    def untested_knobs(self) -> list[str]:
        """The knobs under test the workload never exercised: their parts of an attribution
        read "not tested by this workload" (``attribution.verdict_sentence(untested=…)``)."""
        return idle_knobs(self.knob_checks)

    def as_json(self) -> dict[str, Any]:
        """What scripts and CI read (``python -m core experiment --show ID --json``)."""
        return {
            "baseline": self.baseline,
            "arms": self.arms,
            "verdict": self.verdict,
            "family": self.family,
            "equivalence_margin": self.margin,
            "noise": self.noise,
            "knob_checks": self.knob_checks,
            "costs": self.costs,
            "ledger": {arm: lg.as_json() for arm, lg in self.ledger.items()},
            # the card's rows with their intervals (change, low, high: relative, paired)
            "card": [
                asdict(r) | {"name": r.name, "unit": r.unit, "words": r.word_text()}
                for r in self.card
            ],
            "caveats": [c.sentence() for c in self.caveats],
            "answers": {arm: v.as_json() for arm, v in self.answers.items()},
        }


def _headline_row(card: Sequence[CardRow], arm: str) -> CardRow | None:
    """The arm's output throughput at its highest concurrency: what a knob did, in one row."""
    rows = [r for r in card if r.arm == arm and r.metric == "output_throughput"]
    return max(rows, key=lambda r: r.concurrency or 0) if rows else None


def _knob_story(
    arms: Mapping[str, Sequence[RunView]], baseline: str, card: Sequence[CardRow]
) -> tuple[list[CardRow], list[dict[str, Any]], dict[str, MemoryLedger], list[str], set[str]]:
    """The knob checks and the ledger per arm; the card with the contrasts of a knob the
    workload never exercised reading "not tested by this workload" (never "inconclusive";
    memory rows keep theirs: what a knob costs is real either way); one sentence per knob
    under test, and the arms so relabelled. Each check also carries its knob's ``cost``
    (``core.analysis.ledger.knob_cost``: what it costs and buys in memory, or None)."""
    ledgers = arm_ledgers(arms)
    checks = [
        c | {"cost": knob_cost(c["knob"], arms, ledgers, baseline)} for c in knob_checks(arms)
    ]
    untested = set(untested_arms(arms, baseline, checks))
    rows = [
        replace(r, verdict=NOT_TESTED)
        if r.arm in untested
        and r.metric not in MEMORY_METRICS
        and r.verdict in (EQUIVALENT, INCONCLUSIVE, UNCONFIRMED, BETTER_ALONE, WORSE_ALONE)
        else r
        for r in card
    ]
    alone = {k: a for a, k in single_knob_arms(arms, baseline).items()}
    sentences = []
    for c in checks:
        row = _headline_row(rows, alone[c["knob"]]) if c["knob"] in alone else None
        word = None if row is None else row.word_text()
        others = [o["knob"] for o in checks if o is not c and o.get("exercised") is not False]
        sentences.append(
            knob_sentence(
                c,
                knob_change(c["knob"], arms, baseline),
                None if row is None else f"{row.name} {row.where} {row.change_text()}",
                c["cost"],
                word,
                others,
            )
        )
    return rows, checks, ledgers, sentences, untested


def succeeded_by_arm(
    runs: Sequence[RunOfArm], arms: Sequence[str] = ()
) -> tuple[dict[str, list[RunView]], dict[str, list[int]]]:
    """Per arm (``arms`` first, in order, even with none), the views of its succeeded runs
    and the trial of each: what the card and the knob checks read."""
    by_arm: dict[str, list[RunView]] = {a: [] for a in arms}
    trials: dict[str, list[int]] = {a: [] for a in arms}
    for r in runs:
        if r.view.status.state == "succeeded":
            by_arm.setdefault(r.arm, []).append(r.view)
            trials.setdefault(r.arm, []).append(r.trial)
    return by_arm, trials


def experiment_story(
    settings: Settings, record: ExperimentRecord, runs: Sequence[RunOfArm] | None = None
) -> Story:
    """The story of an experiment (``experiment.json`` as loaded): its baseline
    (``core.experiments.design.baseline_arm``), the card over its succeeded runs, and the
    verdict with the regressions first. ``runs``: ``experiment_runs`` already read, if at hand."""
    runs = list(runs) if runs is not None else experiment_runs(settings, record)
    base = baseline_arm(record.spec)
    arms = record.arm_labels
    by_arm, trials = succeeded_by_arm(runs, arms)
    # An adaptive experiment decided on intervals at its stop rule's adjusted level: the
    # card and the verdict show those, so the decision and the interval agree.
    level = _experiment_level(record.spec)
    margin = margin_of(record.spec)
    card = summary_card(by_arm, base, trials, level, margin) if base else []
    card, checks, ledgers, knobs, untested = _knob_story(by_arm, base, card)
    table = _table_words(arm_stats(list(runs), base, level=level), card, untested, margin, level)
    text = verdict(str(record.name), table, list(runs), base, level)
    regs_line = regressions_paragraph(card)
    fam = family_line(card)
    found: list[ReadWithCare] = [*caveats(by_arm)]
    found += drift_caveats(
        drift_findings(runs, closing_runs(settings, record), base),
        [key for views in by_arm.values() for v in views for key, _ in first_points(v)],
    )
    care = caveat_line(found)
    answers = answers_of_runs([r for r in runs if r.view.status.state == "succeeded"], base)
    if (trials_line := progress_text(record)) is not None:
        level_note = f" Intervals: {share_text(level, 1)}, adjusted for the stop rule's looks."
        text += f" Trials auto: {trials_line}." + (level_note if runs else "")
    return Story(
        baseline=base,
        arms=arms,
        card=card,
        verdict=[
            *knobs,
            *regs_line,
            text,
            *answers_lines(answers, _faster(card)),
            *([fam] if fam else []),
            *([care] if care else []),
        ],
        noise=noise_note(
            settings,
            [r.view for r in runs],
            (record.spec.get("base") or {}).get("server") or {},
        ),
        caveats=found,
        knob_checks=checks,
        ledger=ledgers,
        untested_arms=sorted(untested),
        level=level,
        margin=margin,
        answers=answers,
    )


def _faster(card: Sequence[CardRow]) -> set[str]:
    """The arms the card calls better in output throughput (a broken arm's is no win)."""
    return {r.arm for r in card if r.metric == "output_throughput" and r.verdict == "better"}


def _table_words(
    table: pd.DataFrame,
    card: Sequence[CardRow],
    untested: Collection[str],
    margin: float,
    level: float,
) -> pd.DataFrame:
    """The arm table's ``label`` in the words of ``core.analysis.words``: a cell the card
    holds as the card reads it (its family's correction included), any other at the margin;
    an arm that changed only knobs the workload never exercised "not tested by this
    workload" where its change is no finding."""
    on_card = {(r.arm, r.metric, r.concurrency): r for r in card}
    labels = []
    for _, t in table.iterrows():
        if t["arm"] not in {r.arm for r in card} and "rel" in t and pd.isna(t["rel"]):
            labels.append(t["label"])
            continue
        row = on_card.get((t["arm"], t["metric"], t["concurrency"]))
        if row is not None:
            word = row.word_text()
        else:
            low, high = (None if pd.isna(t[c]) else float(t[c]) for c in ("rel_low", "rel_high"))
            rel = None if pd.isna(t["rel"]) else float(t["rel"])
            reading = read_difference(
                str(t["metric"]), rel, low, high, int(t["n"]), margin=margin, level=level
            )
            word = reading.text()
            if t["arm"] in untested and not reading.coloured:
                word = NOT_TESTED
        labels.append(word)
    table["label"] = labels if labels else table["label"]
    return table


def arm_table(runs: Sequence[RunOfArm], story: Story) -> pd.DataFrame:
    """An experiment's per-arm table (``stats.arm_stats``) as its story reads it: at the
    story's level and margin, each difference worded as the card words it
    (``_table_words``). The pages, the CLI and the exports call this, so the table agrees
    with the verdict."""
    table = arm_stats(list(runs), story.baseline, level=story.level)
    return _table_words(table, story.card, story.untested_arms, story.margin, story.level)


def _experiment_level(spec: Mapping[str, Any]) -> float:
    """The intervals' level: 95%, or for ``trials: auto`` the stop rule's adjusted one."""
    if spec.get("trials") != "auto":
        return 0.95
    defaults = ExperimentSpec.model_fields
    return look_level(
        int(spec.get("min_trials") or defaults["min_trials"].default),
        int(spec.get("max_trials") or defaults["max_trials"].default),
    )


def _arm_line(
    name: str, base: str, point: str, rows: pd.DataFrame, untested: Collection[str]
) -> str:
    """Arm ``name`` against ``base`` at ``point``: each verdict metric's change and word (one
    run each: no interval, so ``core.analysis.words`` reads every difference unconfirmed)."""
    parts = []
    for _, r in rows.iterrows():
        rel, word = r[f"rel_{name}"], r[f"verdict_{name}"]
        if word is not None:
            change = None if pd.isna(rel) else float(rel)
            word = read_difference(str(r["metric"]), change, None, None, 1).text()
        if name in untested and word is not None:
            word = NOT_TESTED
        label = metric_label(str(r["metric"]))
        if word is None or pd.isna(r[name]):
            parts.append(f"{label} unknown")
        elif pd.isna(rel):
            parts.append(f"{label} {number_text(r[name])} ({word})")
        else:
            parts.append(f"{label} {pct_text(rel)} ({word})")
    return f"{name} vs {base} at {point}: " + ", ".join(parts) + "."


def comparison_story(
    views: Sequence[RunView],
    baseline: int,
    names: Sequence[str],
    noise: str = "",
) -> Story:
    """The story of plain runs side by side (each run its own arm, named by ``names``);
    ``noise``: the runs' host noise in words (``noise_note``), "" where none is known."""
    arms = list(names)
    by_arm = {n: [v] for n, v in zip(arms, views, strict=True)}
    card = summary_card(by_arm, arms[baseline])
    card, checks, ledgers, knobs, untested = _knob_story(by_arm, arms[baseline], card)
    lines: list[str] = []
    head = headline_point(views)
    if head is None:
        lines.append(
            "No load point is common to all runs, so no point-by-point verdict: the "
            "runs were measured at different loads (an imported run may not state "
            "its load; give it at import with --concurrency/--input-len/"
            "--output-len)."
        )
    else:
        deltas = metric_deltas(views, baseline=baseline, metrics=VERDICT_METRICS, names=arms)
        rows = deltas[deltas["point"] == head.label]
        conf = confounders(views)
        for i, name in enumerate(arms):
            if i == baseline:
                continue
            line = _arm_line(name, arms[baseline], head.label, rows, untested)
            if conf:
                line = (
                    "Inconclusive: more than the intended knob differs ("
                    + ", ".join(field_name(f) for f in conf[:6])
                    + ("…" if len(conf) > 6 else "")
                    + "). "
                    + line
                )
            lines.append(line)
    lines[:0] = regressions_paragraph(card)
    answers = answers_of_runs(
        [RunOfArm(n, 0, v) for n, v in zip(arms, views, strict=True)], arms[baseline]
    )
    lines += answers_lines(answers, _faster(card))
    found: list[ReadWithCare] = [*caveats(by_arm)]
    if care := caveat_line(found):
        lines.append(care)
    return Story(
        baseline=arms[baseline],
        arms=arms,
        card=card,
        verdict=[*knobs, *lines],
        noise=noise,
        caveats=found,
        knob_checks=checks,
        ledger=ledgers,
        answers=answers,
    )


def shared_experiment(views: Sequence[RunView]) -> str | None:
    """The experiment id (tag ``exp:<id>``) every one of the runs belongs to; None when they
    come from none or from several (Compare then offers that experiment's own comparison)."""
    ids = set()
    for v in views:
        tags = [t for t in v.spec.get("tags") or [] if isinstance(t, str) and t.startswith("exp:")]
        ids.add(tags[0][4:] if tags else None)
    return str(next(iter(ids))) if len(ids) == 1 and None not in ids else None
