"""Could this workload show the knob at all? One rule per knob family, each naming the
resource the knob acts on and how much of it the arms used. A knob whose resource the
workload never reached reads "not tested by this workload", never "inconclusive".

Each arm's figure is the median over its runs of each run's peak (one odd trial does not
decide), and the highest trial is quoted beside it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from core.analysis.ledger import run_ledger
from core.analysis.runs import RunView
from core.analysis.server_view import ServerView, server_view
from core.analysis.stats import NOT_TESTED
from core.config import KV_FILL_KINDS, knob_text, same_value
from core.engines.registry import engine_names, find_engine
from core.numbers import count_text, gb_text, share_text, short_count_text

__all__ = [
    "KV_TESTED_USAGE",
    "idle_knobs",
    "knob_change",
    "knob_checks",
    "knob_lines",
    "knob_sentence",
    "knobs_under_test",
    "run_knob_checks",
    "single_knob_arms",
    "untested_arms",
]

# Under half the smaller KV pool, with no queue or retraction, the extra KV a larger memory
# fraction buys is never used: the knob cannot have moved a metric through its resource.
KV_TESTED_USAGE = 0.5


def knobs_under_test(arms: Mapping[str, Sequence[RunView]]) -> list[str]:
    """The server fields whose values differ between the arms (their specs, not labels)."""
    values: dict[str, set[str]] = {}
    for views in arms.values():
        for v in views:
            for k, x in (v.spec.get("server") or {}).items():
                values.setdefault(k, set()).add(repr(x))
    seen = {k for k, xs in values.items() if len(xs) > 1}
    if len(values.get("engine", ())) > 1:
        return []  # the engine is the knob; the rest is each arm's configuration (engines.py)
    return [k for k in _RULES if k in seen]


def _named(knob: str, arms: Mapping[str, Sequence[RunView]]) -> dict[str, Any]:
    """A check's head: the knob and the resource it acts on, as its engine declares it
    (``KnobSpec.resource``): the arms' engine first, else any engine here that declares the
    knob (an imported run's engine is not registered), else the knob's own name."""
    names = [str(_server(views, "engine")) for views in arms.values()]
    for name in dict.fromkeys([*names, *engine_names()]):
        spec = find_engine(name)
        if spec is not None and (declared := spec.knob(knob)) is not None:
            return {"knob": knob, "resource": declared.resource}
    return {"knob": knob, "resource": knob}


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def _arm_stat(
    arms: Mapping[str, Sequence[RunView]], get: Callable[[ServerView], float | None]
) -> dict[str, tuple[float | None, float | None]]:
    """Per arm: (median over runs, highest run) of one figure of each run's server view."""
    out: dict[str, tuple[float | None, float | None]] = {}
    for arm, views in arms.items():
        xs = [x for x in (get(server_view(v)) for v in views) if x is not None]
        out[arm] = (_median(xs), max(xs) if xs else None)
    return out


def _server(views: Sequence[RunView], key: str) -> Any:
    return next(((v.spec.get("server") or {}).get(key) for v in views), None)


def _check_mem_fraction(arms: Mapping[str, Sequence[RunView]]) -> dict[str, Any]:
    cap = _arm_stat(arms, lambda s: s.kv_capacity_tokens)
    known: dict[str, float] = {a: c[0] for a, c in cap.items() if c[0] is not None and c[0] > 0}
    base = _named("mem_fraction_static", arms)
    if not known:
        return base | _unknown("the server reported no KV pool size")
    small = min(known.values())
    small_arms = [a for a, c in known.items() if c == small]
    used = _arm_stat(arms, lambda s: s.kv_used_peak_tokens)
    queue = _arm_stat(arms, lambda s: s.queue_peak)
    # retracted requests over the point: the counter's delta where the version has it
    retr = _arm_stat(
        arms, lambda s: s.retracted_total if s.retracted_total is not None else s.retracted_peak
    )
    peaks = [x for x in (used[a][0] for a in small_arms) if x is not None]
    if not peaks:
        return base | _unknown("the server reported no KV tokens used")
    peak = max(peaks)
    top = max(used[a][1] or 0.0 for a in small_arms)
    q = max(queue[a][0] or 0.0 for a in small_arms)
    r = max(retr[a][0] or 0.0 for a in small_arms)
    usage = peak / small
    demand = _planned_share(arms, small)
    # A queue is KV pressure only where the load could fill the pool: with the planned
    # in-flight tokens a few % of it, requests wait for the scheduler's prefill budget
    # (64 x 256-token prompts on the H200's 670 K-token pool queued 2), not for KV room.
    queue_kv = q > 0 and (demand is None or demand >= KV_TESTED_USAGE)
    exercised = usage >= KV_TESTED_USAGE or r > 0 or queue_kv
    figures = (
        f"peak {share_text(usage, 2)} of {short_count_text(small)} tokens in {_pool(known)},"
        f" highest trial {share_text(top / small, 2)}"
    )
    if exercised:
        why = (
            f"tested: the KV cache was a limit ({figures}; up to {count_text(q)} requests queued,"
            f" {count_text(r)} retracted)"
        )
    elif q > 0:
        why = (
            f"{NOT_TESTED}: the KV cache was never the limit ({figures}; no retraction; up to"
            f" {count_text(q)} requests queued with the planned in-flight tokens at most"
            f" {share_text(demand or 0.0, 2)} of the pool: they waited for the scheduler,"
            " not for KV room)"
        )
    else:
        why = f"{NOT_TESTED}: the KV cache was never the limit ({figures}; no queue, no retraction)"
    suggest = None if exercised else _kv_suggestion(arms, small, _pool(known))
    return base | _found(peak, small, exercised, why, suggest)


def _planned_share(arms: Mapping[str, Sequence[RunView]], pool_tokens: float) -> float | None:
    """The most tokens any planned point keeps in flight (concurrency, else its prompts, x
    input + output length; a kv_fill point: its fill) as a share of the pool; None where a
    point's lengths are not in its spec (a trace's are its own)."""
    shares: list[float] = []
    for views in arms.values():
        for v in views:
            for p in (v.spec.get("plan") or {}).get("points", []):
                if isinstance(p.get("kv_fill"), int | float):
                    shares.append(float(p["kv_fill"]))
                    continue
                kind = (p.get("workload") or {}).get("kind", "fixed")
                lengths = (p.get("input_len"), p.get("output_len"))
                if kind not in KV_FILL_KINDS or not all(isinstance(x, int) for x in lengths):
                    return None
                in_flight = p.get("concurrency") or p.get("num_prompts") or 0
                shares.append(in_flight * sum(lengths) / pool_tokens)
    return max(shares) if shares else None


def _pool(capacity_by_arm: Mapping[str, float]) -> str:
    return "the smaller pool" if len(set(capacity_by_arm.values())) > 1 else "the pool"


def _kv_suggestion(arms: Mapping[str, Sequence[RunView]], pool_tokens: float, pool: str) -> str:
    """The load that would make the smaller pool the limit: in-flight tokens above it."""
    lengths = [
        float(p["input_len"]) + float(p["output_len"])
        for vs in arms.values()
        for v in vs
        for p in (v.spec.get("plan") or {}).get("points", [])
        if isinstance(p.get("input_len"), int | float)
        and isinstance(p.get("output_len"), int | float)
    ]
    text = f"a point whose in-flight tokens exceed {pool}"
    if not lengths:
        return text
    per_request = max(lengths)
    return (
        f"{text}, i.e. concurrency ≥ {count_text(math.ceil(pool_tokens / per_request))} at"
        f" {count_text(per_request)} tokens a request, or longer prompts and outputs"
    )


def _check_cuda_graphs(arms: Mapping[str, Sequence[RunView]]) -> dict[str, Any]:
    base = _named("cuda_graphs", arms)
    share = _arm_stat(arms, lambda s: s.decode_graph_share)
    on = [a for a, vs in arms.items() if _server(vs, "cuda_graphs") is True]
    shares: dict[str, float] = {a: x for a in on if (x := share[a][0]) is not None}
    if not shares:
        why = "the server did not say which decode passes ran in graphs"
        captured = _captured_text(arms, on)
        return base | _unknown(f"{why}; {captured}" if captured else why)
    low = min(shares.values())
    broken = [a for a, s in shares.items() if s == 0]
    if broken:
        why = (
            f"broken arm: {', '.join(broken)} ran 0% of decode passes in CUDA graphs"
            " although graphs were on; check the capture in its server log"
        )
        return base | _found(low, 1.0, False, why, "a graphs-on arm whose capture works")
    what = (
        "100%"
        if low >= 0.9995
        else f"{share_text(low, 1)} (the rest ran above the largest captured batch)"
    )
    who = "the graphs-on arms" if len(arms) > 1 else "it"
    why = f"tested: {who} ran {what} of decode passes in CUDA graphs"
    return base | _found(low, 1.0, True, why, None)


def _captured_text(arms: Mapping[str, Sequence[RunView]], on: Sequence[str]) -> str | None:
    """What the graphs-on arms' start-up logs say they captured, beside their largest running
    batch: all that is known where the server reports no per-pass graph use (vLLM). Graph
    memory from the ledger (the engine's declared facts), the captured sizes from vLLM's
    ``cuda_graph_capture_sizes``. None where the runs say neither."""
    views = [v for a in on for v in arms[a]]
    sizes = [
        max(s)
        for v in views
        if isinstance(s := v.facts.get("cuda_graph_capture_sizes"), list) and s
    ]
    mems = [g for v in views if (g := run_ledger(v).graph_gb) is not None]
    if not sizes and not mems:
        return None
    what = f"{gb_text(_median(mems))} of graphs" if mems else "graphs"
    text = f"at start-up the graphs-on {'arms' if len(on) > 1 else 'arm'} captured {what}"
    if not sizes:
        return text
    largest = min(sizes)  # the arm that captured least bounds what every arm could replay
    text += f" for batches up to {count_text(largest)}"
    running = _arm_stat({a: arms[a] for a in on}, lambda s: s.running_peak)
    peaks = [p for _, p in running.values() if p is not None]
    if not peaks:
        return text
    peak = max(peaks)
    where = "within them" if peak <= largest else "above them: passes that large ran without graphs"
    return f"{text}, and the largest running batch ({count_text(peak)}) was {where}"


def _check_graph_max_bs(arms: Mapping[str, Sequence[RunView]]) -> dict[str, Any]:
    base = _named("cuda_graph_max_bs", arms)
    running = _arm_stat(arms, lambda s: s.running_peak)
    caps = [_server(vs, "cuda_graph_max_bs") for vs in arms.values()]
    sizes = [float(c) for c in caps if isinstance(c, int | float)]
    peaks = [r[1] for r in running.values() if r[1] is not None]
    if not sizes or not peaks:
        return base | _unknown("the running batch or the captured sizes are unknown")
    small, peak = min(sizes), max(peaks)
    return base | _past_limit(
        peak,
        small,
        f"the largest running batch ({count_text(peak)}) exceeded the smaller max_bs "
        f"({count_text(small)})",
        f"the largest running batch ({count_text(peak)}) fits the smaller max_bs "
        f"({count_text(small)})",
        f"a concurrency above {count_text(small)}",
    )


def _check_chunked_prefill(arms: Mapping[str, Sequence[RunView]]) -> dict[str, Any]:
    base = _named("chunked_prefill_size", arms)
    chunks = []
    for vs in arms.values():
        extra = _server(vs, "extra_args") or []
        c = _server(vs, "chunked_prefill_size")
        if c is None and "--chunked-prefill-size" in extra:
            c = extra[extra.index("--chunked-prefill-size") + 1]
        if c is None:
            c = next((v.facts.get("chunked_prefill_size") for v in vs), None)
        if c is not None:
            chunks.append(float(c))
    prompts = [
        float(p["input_len"])
        for vs in arms.values()
        for v in vs
        for p in (v.spec.get("plan") or {}).get("points", [])
        if isinstance(p.get("input_len"), int | float)
    ]
    if not chunks or not prompts:
        return base | _unknown("the prompt lengths or the chunk size are unknown")
    small, longest = min(chunks), max(prompts)
    return base | _past_limit(
        longest,
        small,
        f"prompts of {count_text(longest)} tokens exceed the smaller chunk ({count_text(small)})",
        f"the longest prompt ({count_text(longest)} tokens) fits one chunk ({count_text(small)})",
        f"prompts over {count_text(small)} tokens",
    )


def _past_limit(
    used: float, limit: float, tested: str, not_tested: str, suggest: str
) -> dict[str, Any]:
    """A knob that only acts once the workload passes a limit (the smaller arm's): tested
    when the peak went past it, else not tested, with what would test it."""
    if used > limit:
        return _found(used, limit, True, f"tested: {tested}", None)
    return _found(used, limit, False, f"{NOT_TESTED}: {not_tested}", suggest)


def _found(
    used: float | None,
    capacity: float | None,
    exercised: bool | None,
    why: str,
    suggest: str | None,
) -> dict[str, Any]:
    return {
        "used_peak": used,
        "capacity": capacity,
        "exercised": exercised,
        "why": why,
        "suggest": suggest,
    }


def _unknown(why: str) -> dict[str, Any]:
    return _found(None, None, None, f"unknown: {why}", None)


_RULES: dict[str, Callable[[Mapping[str, Sequence[RunView]]], dict[str, Any]]] = {
    "mem_fraction_static": _check_mem_fraction,
    "cuda_graphs": _check_cuda_graphs,
    "cuda_graph_max_bs": _check_graph_max_bs,
    "chunked_prefill_size": _check_chunked_prefill,
}


def knob_checks(arms: Mapping[str, Sequence[RunView]]) -> list[dict[str, Any]]:
    """Per knob under test: ``{"knob", "resource", "used_peak", "capacity", "exercised",
    "why", "suggest"}`` (``exercised`` None where the server did not say; ``suggest``: the
    workload that would test a knob this one did not exercise, else None)."""
    return [_RULES[k](arms) for k in knobs_under_test(arms)]


def knob_lines(checks: Sequence[dict[str, Any]]) -> list[str]:
    """One sentence per knob, for the verdict and the card."""
    return [
        f"{c['knob']}: {c['why']}"
        + (f"; {c['suggest']} would test it" if c.get("suggest") else "")
        + "."
        for c in checks
    ]


def _server_of(views: Sequence[RunView]) -> dict[str, Any]:
    return dict(views[0].spec.get("server") or {}) if views else {}


def knob_change(knob: str, arms: Mapping[str, Sequence[RunView]], baseline: str) -> str:
    """``0.85→0.92``, ``off→on``: the knob's baseline value, then the others."""
    values = [_server_of(arms.get(baseline, ())).get(knob)]
    values += [_server_of(vs).get(knob) for vs in arms.values()]
    shown = list(dict.fromkeys(knob_text(v) for v in values))
    return f"{shown[0]}→{', '.join(shown[1:])}" if len(shown) > 1 else shown[0]


def single_knob_arms(arms: Mapping[str, Sequence[RunView]], baseline: str) -> dict[str, str]:
    """Per arm other than the baseline: the one server field it differs from the baseline
    in, where it is exactly one (the contrast that speaks for that knob alone)."""
    base = _server_of(arms.get(baseline, ()))
    out: dict[str, str] = {}
    for arm, views in arms.items():
        if arm == baseline:
            continue
        mine = _server_of(views)
        diff = [k for k in base.keys() | mine.keys() if not same_value(base.get(k), mine.get(k))]
        if len(diff) == 1:
            out[arm] = diff[0]
    return out


def idle_knobs(checks: Sequence[Mapping[str, Any]]) -> list[str]:
    """The knobs the workload never exercised (``exercised`` False; None, unknown, is not):
    what they change reads "not tested by this workload"."""
    return [str(c["knob"]) for c in checks if c.get("exercised") is False]


def untested_arms(
    arms: Mapping[str, Sequence[RunView]], baseline: str, checks: Sequence[dict[str, Any]]
) -> dict[str, str]:
    """Arm → knob, for the arms that differ from the baseline only in a knob the workload
    did not exercise: any change of theirs is "not tested by this workload", not noise."""
    idle = set(idle_knobs(checks))
    return {a: k for a, k in single_knob_arms(arms, baseline).items() if k in idle}


def knob_sentence(
    check: Mapping[str, Any],
    change: str,
    did: str | None,
    cost: str | None,
    verdict: str | None,
    others: Sequence[str] = (),
) -> str:
    """One sentence per knob under test: what it did (``did``, with its interval), what it
    cost (the ledger), whether the workload could show it (``check``) and, where it could
    not, the workload that would. ``verdict``: the word (core.analysis.words) of ``did``,
    left out for a knob the workload did not exercise (its change cannot come from it).
    ``others``: the other knobs the arms differ in that the workload did exercise."""
    idle = check.get("exercised") is False
    head = f"{check['knob']} {change}: "
    if did is None and idle and others:
        head += f"the difference is {' or '.join(others)} or noise, not this knob"
    elif did is None:
        head += "its effect is not separated here (no arm differs from the baseline in it alone)"
    else:
        head += did + (f", {verdict}" if verdict and not idle else "")
    if cost:
        head += f"; costs {cost.split(': ', 1)[-1]}"
    text = f"{head}; {check['why']}"
    if idle and did is not None:
        text += f", so the difference cannot come from what the knob acts on ({check['resource']})"
    if check.get("suggest"):
        text += f". To test it: {check['suggest']}"
    return text + "."


def run_knob_checks(view: RunView) -> list[dict[str, Any]]:
    """One run on its own: did it reach the resource each of its server settings acts on
    (its KV usage peak against its pool, its share of decode passes in graphs, its running
    batch against max_bs, its prompts against the chunk). Only for an engine that declares
    these knobs and the server metrics that show their resources (core/engines ENGINE)."""
    server = view.spec.get("server") or {}
    spec = find_engine(str(server.get("engine")))
    if spec is None or not spec.server_metrics:
        return []
    graphs = server.get("cuda_graphs") is True
    applies = {
        "mem_fraction_static": True,
        "cuda_graphs": graphs,
        "cuda_graph_max_bs": graphs and server.get("cuda_graph_max_bs") is not None,
        "chunked_prefill_size": True,
    }
    arms = {view.run_id: [view]}
    return [
        rule(arms) for knob, rule in _RULES.items() if applies[knob] and knob in spec.knob_names
    ]
