"""The memory ledger of a run and of an arm: where the GPU's memory went (weights, KV cache,
CUDA graphs per phase), what the server left free at each start-up step, and what the load
then used (NVML peak) and left (headroom at the peak); and what each knob under test costs
and buys in the same units.

Each figure comes from whichever source the run has, first found wins: ``facts.json``
(for SGLang ``/get_server_info``'s ``memory_usage`` on newer versions, else the start-up
log), then the memory gauges in ``samples.parquet``. Which facts key and which gauge state
each figure is the engine's declaration (``memory_facts``, ``server_metrics``: its
``ENGINE`` in core/engines/), as is what a knob is meant to cost (``KnobSpec.meant_cost``).
None where no source says; a 0 is a measured value. SGLang's "GB" are GiB per GPU, as
NVML's MiB / 1024 are, so the figures add up.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from functools import lru_cache
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from core.analysis.memory import gpu_total_gb, headroom_gb, run_peak_gpu_mib
from core.analysis.runs import RunView
from core.engines.declare import EngineSpec
from core.engines.registry import find_engine
from core.numbers import as_number, gb_text, pct_text, signed_text

__all__ = ["MemoryLedger", "arm_ledgers", "knob_cost", "run_ledger"]


@dataclass(frozen=True)
class MemoryLedger:
    """One run's (or an arm's median) GPU memory, GB per GPU; None where unknown."""

    weights_gb: float | None = None
    kv_cache_gb: float | None = None
    kv_cache_tokens: float | None = None
    graph_gb: float | None = None
    graph_gb_by_phase: dict[str, float] = field(default_factory=dict)
    free_after_weights_gb: float | None = None
    free_after_kv_gb: float | None = None
    free_after_capture_gb: float | None = None
    free_at_ready_gb: float | None = None  # what the server left free once started
    gpu_total_gb: float | None = None
    peak_used_gb: float | None = None  # NVML, while the points ran
    headroom_at_peak_gb: float | None = None
    sources: tuple[str, ...] = ()

    def as_json(self) -> dict[str, Any]:
        return asdict(self) | {"sources": list(self.sources)}


# The ledger fields a facts.json key can state (the engine's memory_facts names which)
_FACT_FIELDS = (
    "weights_gb",
    "kv_cache_gb",
    "kv_cache_tokens",
    "graph_gb",
    "free_after_weights_gb",
    "free_after_kv_gb",
    "free_after_capture_gb",
    "free_at_ready_gb",
)
# The ledger fields a /metrics gauge can state (constants exported from start-up on); the
# engine's server_metrics names the gauge of each, and the graph gauge per phase.
_GAUGE_FIELDS = ("weights_gb", "kv_cache_gb", "kv_cache_tokens", "free_at_ready_gb")


def _engine(view: RunView) -> EngineSpec | None:
    return find_engine((view.spec.get("server") or {}).get("engine"))


def run_ledger(view: RunView) -> MemoryLedger:
    """The ledger of one run from its facts, then its gauges."""
    f = view.facts
    spec = _engine(view)
    keys = spec.memory_facts if spec is not None else {}
    got: dict[str, Any] = {
        k: as_number(f.get(keys[k])) if k in keys else None for k in _FACT_FIELDS
    }
    sources = ["facts.json"] if any(v is not None for v in got.values()) else []
    stated = f.get("graph_mem_gb_by_phase")  # /get_server_info's memory_usage.graph
    phases = (
        {str(k): x for k, v in stated.items() if (x := as_number(v)) is not None}
        if isinstance(stated, dict)
        else {}
    )
    named = {k: spec.metric_names(k) for k in (*_GAUGE_FIELDS, "graph_gb")} if spec else {}
    gauges = _gauges(view.path, tuple(n for names in named.values() for n in names))
    if gauges:
        for k in _GAUGE_FIELDS:
            name = next((n for n in named[k] if n in gauges), None)
            if got[k] is None and name is not None:
                got[k] = sum(gauges[name].values())
                sources.append("/metrics")
        graph = next((n for n in named["graph_gb"] if n in gauges), None)
        if not phases and graph is not None:
            phases = {_label(labels, "phase"): v for labels, v in gauges[graph].items() if v > 0}
    if got["graph_gb"] is None and phases:
        got["graph_gb"] = round(sum(phases.values()), 3)
    total = gpu_total_gb(f.get("gpus"))
    peak_mib = run_peak_gpu_mib(view.path)
    return MemoryLedger(
        **got,
        graph_gb_by_phase=phases,
        gpu_total_gb=total,
        peak_used_gb=None if peak_mib is None else peak_mib / 1024,
        # THE headroom rule (core.analysis.memory), asked about the peak rather than start-up
        headroom_at_peak_gb=headroom_gb(None, total, peak_mib),
        sources=tuple(dict.fromkeys(sources + (["NVML"] if peak_mib is not None else []))),
    )


def _label(labels: str, key: str) -> str:
    for part in labels.split(","):
        k, _, v = part.partition("=")
        if k == key:
            return v
    return labels


def _gauges(path: Path | None, names: tuple[str, ...]) -> dict[str, dict[str, float]]:
    if path is None or not names:
        return {}
    file = path / "samples.parquet"
    try:
        stat = file.stat()
    except OSError:
        return {}
    return _read_gauges(str(file), stat.st_mtime_ns, stat.st_size, names)


@lru_cache(maxsize=256)
def _read_gauges(
    file: str, _mtime_ns: int, _size: int, names: tuple[str, ...]
) -> dict[str, dict[str, float]]:
    """name → labels → the last value of each of the memory gauges ``names`` (constants
    after start-up)."""
    try:
        table = pq.read_table(file, columns=["t_s", "name", "labels", "value"])
    except (OSError, pa.ArrowInvalid, KeyError):
        return {}
    table = table.filter(pc.is_in(table["name"], pa.array(list(names))))
    out: dict[str, dict[str, float]] = {}
    rows = sorted(table.to_pylist(), key=lambda r: r["t_s"] or 0.0)
    for r in rows:
        if r["value"] is not None:
            out.setdefault(r["name"], {})[r["labels"] or ""] = float(r["value"])
    return out


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def arm_ledgers(arms: Mapping[str, Sequence[RunView]]) -> dict[str, MemoryLedger]:
    """Per arm: the median over its runs of each figure (one odd trial does not decide)."""
    out: dict[str, MemoryLedger] = {}
    for arm, views in arms.items():
        ledgers = [run_ledger(v) for v in views]
        values: dict[str, Any] = {}
        for f in fields(MemoryLedger):
            if f.name in ("graph_gb_by_phase", "sources"):
                continue
            values[f.name] = _median(
                [x for lg in ledgers if (x := getattr(lg, f.name)) is not None]
            )
        phases = {p for lg in ledgers for p in lg.graph_gb_by_phase}
        out[arm] = MemoryLedger(
            **values,
            graph_gb_by_phase={
                p: m
                for p in sorted(phases)
                if (m := _median([lg.graph_gb_by_phase.get(p, 0.0) for lg in ledgers]))
            },
            sources=tuple(dict.fromkeys(s for lg in ledgers for s in lg.sources)),
        )
    return out


def _mean(xs: list[float | None]) -> float | None:
    known = [x for x in xs if x is not None]
    return sum(known) / len(known) if known else None


def knob_cost(
    knob: str,
    arms: Mapping[str, Sequence[RunView]],
    ledgers: Mapping[str, MemoryLedger],
    baseline: str,
) -> str | None:
    """What the knob costs and buys in memory, from its baseline value to the other one
    (arms averaged by the knob's value): ``cuda_graphs on: +0.40 GB graph memory (prefill
    0.34, decode 0.06)``, ``mem_fraction_static 0.92: +9.74 GB reserved → +454,083 KV tokens
    (+8.3%)``. None where the ledger does not say or the knob has no memory side. What
    the knob is meant to cost is its engine's declaration (``KnobSpec.meant_cost``)."""
    engine = next((_engine(vs[0]) for vs in arms.values() if vs), None)
    declared = engine.knob(knob) if engine is not None else None
    meant = declared.meant_cost if declared is not None else ""
    value = {
        a: (vs[0].spec.get("server") or {}).get(knob) if vs else None for a, vs in arms.items()
    }
    base_value = value.get(baseline)
    others = [v for v in dict.fromkeys(map(repr, value.values())) if v != repr(base_value)]
    if baseline not in ledgers or len(others) != 1:
        return None
    new = [a for a, v in value.items() if repr(v) == others[0] and a in ledgers]
    old = [a for a, v in value.items() if repr(v) == repr(base_value) and a in ledgers]

    def diff(name: str) -> float | None:
        a = _mean([getattr(ledgers[x], name) for x in new])
        b = _mean([getattr(ledgers[x], name) for x in old])
        return None if a is None or b is None else a - b

    shown = next(repr(v) for v in value.values() if repr(v) == others[0])
    to = {"True": "on", "False": "off"}.get(shown, shown)
    if meant == "reserved_memory_kv_tokens":
        kv_gb, tokens = diff("kv_cache_gb"), diff("kv_cache_tokens")
        base_tokens = _mean([ledgers[x].kv_cache_tokens for x in old])
        if kv_gb is None and tokens is None:
            return None
        text = f"{knob} {to}: " + (
            f"{signed_text(kv_gb, 'GB', 2)} reserved" if kv_gb is not None else ""
        )
        if tokens is not None:
            pct = f" ({pct_text(tokens / base_tokens)})" if base_tokens else ""
            text += (" → " if kv_gb is not None else "") + signed_text(tokens, "KV tokens", 0) + pct
        return text
    if meant == "graph_memory":
        graph = diff("graph_gb")
        if graph is None:
            return None
        phases = {
            p: _mean([ledgers[x].graph_gb_by_phase.get(p, 0.0) for x in new])
            for p in dict.fromkeys(p for x in new for p in ledgers[x].graph_gb_by_phase)
        }
        per = ", ".join(f"{p} {gb_text(g, unit=False)}" for p, g in phases.items() if g)
        return f"{knob} {to}: {signed_text(graph, 'GB', 2)} graph memory" + (
            f" ({per})" if per else ""
        )
    return None
