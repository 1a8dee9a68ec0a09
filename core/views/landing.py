"""The landing page's answer: the seed team's question, answered from the shipped demo.

The seed team turned CUDA graphs on and raised the memory fraction in one restart, and their
throughput jumped. Which change did it? The shipped 2×2 factorial over exactly those two knobs
answers it; this module picks that experiment (the newest shipped one, so a re-run demo
replaces the answer) and words its attribution (core/analysis/attribution.py: each knob's
share of the change with its 95 % interval) in two sentences. Nothing here is a number typed
in by hand: change the demo and the page changes."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from core.analysis.attribution import (
    Attribution,
    Part,
    decompose,
    experiment_attribution,
    part_ci_text,
    part_reading,
    part_word,
)
from core.analysis.card import experiment_story, succeeded_by_arm
from core.analysis.knob_checks import idle_knobs, knob_checks
from core.analysis.noise import runs_fingerprint
from core.analysis.stats import NOT_TESTED, RunOfArm
from core.analysis.trials import experiment_runs
from core.analysis.verdict_family import too_few_trials_text
from core.experiments.design import list_experiments
from core.experiments.records import ExperimentRecord
from core.metric_info import metric_name
from core.numbers import pct_interval_text, pct_text
from core.settings import DEMO_DIR, Settings
from core.shapes import DUMMY_WEIGHTS

__all__ = ["QUESTION", "Answer", "ShapeCheck", "demo_experiment", "landing_answer", "shape_check"]

QUESTION = "CUDA graphs and the memory fraction changed together — which did it?"
# The two knobs the seed team changed at once; the demo that answers is a grid over them.
KNOBS = frozenset({"server.cuda_graphs", "server.mem_fraction_static"})
METRIC = "output_throughput"


@dataclass(frozen=True)
class Answer:
    """The answer in two sentences, the experiment they come from, and what it ran on."""

    sentences: tuple[str, str]
    experiment_id: str
    experiment_name: str
    trials: int
    shape: str | None  # a model shape run with dummy weights (core/shapes.py), or None
    gpus: str  # what it measured on: "1× NVIDIA H100 80GB HBM3"


def demo_experiment(settings: Settings) -> ExperimentRecord | None:
    """The shipped experiment that answers the question: a grid over exactly the two knobs,
    the newest of those in data/demo (installed into the data folder on first start)."""
    shipped = {p.name for p in (DEMO_DIR / "experiments").glob("exp-*")}
    found = [
        r
        for r in list_experiments(settings)  # newest first
        if r.experiment_id in shipped
        and set((r.spec.get("grid") or {}).get("knobs") or {}) == KNOBS
    ]
    return found[0] if found else None


def _main_parts(attr: Attribution, concurrency: object) -> dict[str, Part]:
    return {p.name: p for p in decompose(attr, METRIC, concurrency) if p.kind == "main"}


def _share(part: Part, trials: int, untested: Collection[str] = ()) -> str:
    word = part_word(part, METRIC, untested, trials)  # as the experiment page words it
    tail = f", {word}" if word else ""
    return f"{pct_text(part.rel)} ({part_ci_text(part)}{tail})"


def _kv_fills(runs: Sequence[RunOfArm]) -> dict[int, float]:
    """Concurrency → kv_fill for the points a ``kv_fill`` sized, as each run's point summary
    recorded it (``core.load.kv_fill.KvSizing``): the server's pool decided the concurrency,
    so only the runs know which measured concurrency is the KV-pressure point."""
    return {
        int(fill["computed"]["concurrency"]): float(fill["kv_fill"])
        for r in runs
        for point in r.view.points
        if (fill := point.get("kv_fill")) and (fill.get("computed") or {}).get("concurrency")
    }


def _point_sentence(
    attr: Attribution, fills: dict[int, float], conc: int, trials: int, untested: Collection[str]
) -> str | None:
    """At one concurrency: the knob whose share is resolved and largest "did it", then the
    other knob's share with its word (``attribution.part_word``: inconclusive, not tested
    ...); "neither" when no share is resolved there."""
    parts = _main_parts(attr, conc)
    if not parts:
        return None
    words = metric_name(METRIC)
    resolved = [p for p in parts.values() if part_reading(p, METRIC).coloured]
    lead = max(resolved, key=lambda p: abs(p.log)) if resolved else None
    others = "; ".join(
        f"{p.name} {_share(p, trials, untested)}" for p in parts.values() if p is not lead
    )
    fill = fills.get(conc)
    pressure = "" if fill is None else f" (KV pressure: {fill:g}× the KV pool in flight)"
    where = f"At concurrency {conc}{pressure}"
    if lead is None:
        return f"{where}, neither knob's share of the {words} change is resolved: {others}."
    head = f"{where}, {lead.name} did it: {words} {_share(lead, trials)}"
    return f"{head}; {others}." if others else f"{head}."


def _sentences(
    attr: Attribution, fills: dict[int, float], trials: int, untested: Collection[str] = ()
) -> tuple[str, str] | None:
    """One sentence at the lowest and one at the highest concurrency measured: each point
    answers "which did it" on its own, since a knob can decide one load and not another
    (the memory fraction matters only where the KV pool is the limit)."""
    concs = sorted(c for c, m in attr.decompositions if m == METRIC and isinstance(c, int))
    if not concs:
        return None
    low, high = concs[0], concs[-1]
    first = _point_sentence(attr, fills, low, trials, untested)
    second = _point_sentence(attr, fills, high, trials, untested) if high != low else None
    if first is None:
        return None
    return first, second or "No other load was measured."


def _gpus(runs: Sequence[RunOfArm]) -> str:
    """What the runs measured on, as the noise line says it ("1× NVIDIA H100 80GB HBM3"):
    the same change moves by a different amount on another GPU."""
    found = runs_fingerprint([r.view for r in runs])
    return found.gpus_text if found else "a machine not recorded"


def landing_answer(settings: Settings, record: ExperimentRecord | None = None) -> Answer | None:
    """The demo's answer (``record``: that experiment's instead), or None when no shipped
    experiment over the two knobs has results."""
    record = record or demo_experiment(settings)
    if record is None:
        return None
    spec = record.spec
    trials = spec.get("trials")
    trials = trials if isinstance(trials, int) else len({r.trial for r in record.runs})
    runs = experiment_runs(settings, record)  # read once: the split and the knob checks
    attr = experiment_attribution(settings, record, runs)
    if attr is None:
        return None
    # a knob the workload never exercised reads "not tested", as on the experiment's page
    untested = idle_knobs(knob_checks(succeeded_by_arm(runs)[0]))
    sentences = _sentences(attr, _kv_fills(runs), trials, untested)
    if sentences is None:
        return None
    server = (spec.get("base") or {}).get("server") or {}
    return Answer(
        sentences=sentences,
        experiment_id=record.experiment_id,
        experiment_name=str(spec.get("name") or record.experiment_id),
        trials=trials,
        shape=server.get("shape"),
        gpus=_gpus(runs),
    )


@dataclass(frozen=True)
class ShapeCheck:
    """The same change on a realistic model shape, in one sentence, and where it comes from."""

    sentence: str
    experiment_id: str
    shape: str


def _shipped_shape_change(settings: Settings) -> ExperimentRecord | None:
    """The newest shipped A/B on a model shape with an arm that changes exactly the two
    knobs at once: the seed team's change as they made it (a grid over the two knobs is the
    answer itself, not this check)."""
    shipped = {p.name for p in (DEMO_DIR / "experiments").glob("exp-*")}
    for r in list_experiments(settings):  # newest first
        server = (r.spec.get("base") or {}).get("server") or {}
        arms = r.spec.get("arms") or []
        both = any(set(a.get("changes") or {}) == KNOBS for a in arms)
        grid = bool(r.spec.get("grid"))
        if r.experiment_id in shipped and server.get("shape") and both and not grid:
            return r
    return None


def shape_check(settings: Settings) -> ShapeCheck | None:
    """The team's change measured on a realistic shape (dummy weights), worded from its
    experiment's own card and knob checks: the change at the highest concurrency with its
    interval (or why there is none), and the knobs that load never exercised."""
    record = _shipped_shape_change(settings)
    if record is None:
        return None
    runs = experiment_runs(settings, record)  # read once: the story and the GPU
    story = experiment_story(settings, record, runs)
    rows = [
        r
        for r in story.card
        if r.metric == METRIC and isinstance(r.concurrency, int) and r.change is not None
    ]
    if not rows:
        return None
    top = max(rows, key=lambda r: r.concurrency or 0)
    if top.low is not None and top.high is not None:
        interval = f"{top.level:.0%} CI {pct_interval_text(top.low, top.high)}"
    else:
        interval = too_few_trials_text(min(top.n, top.n_base))
    shape = str(record.spec["base"]["server"]["shape"])
    gpus = _gpus(runs)
    text = (
        f"On the {shape} shape ({DUMMY_WEIGHTS}) on {gpus}, the change as the team made it "
        "in one restart: "
        f"{metric_name(METRIC)} {pct_text(top.change)} at concurrency {top.concurrency} "
        f"({interval})"
    )
    idle = [k for k in idle_knobs(story.knob_checks) if f"server.{k}" in KNOBS]
    if idle:
        tested = sorted(
            k.removeprefix("server.") for k in KNOBS if k.removeprefix("server.") not in idle
        )
        text += f"; {', '.join(idle)} {NOT_TESTED}"
        if len(tested) == 1:
            text += f", so the difference is {tested[0]} or noise"
    return ShapeCheck(sentence=f"{text}.", experiment_id=record.experiment_id, shape=shape)
