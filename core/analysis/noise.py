"""The host's run-to-run noise, measured as noise: a pooled sd of per-trial log-ratios
with its degrees of freedom, keyed by the machine and software that made it.

A **fingerprint** is what makes two runs' noise comparable, read from what every run
stores (``facts.json``): the GPU model and count, the CPU model, the engine and its
installation (name and version). Never a host name: two machines called ``vm`` (a CPU box
and an H200) share a name and nothing else. The noise of a fingerprint (``core.analysis.
power.host_noise``) plans trials and is shown ("this host's run-to-run noise ±x %"); it is
never a verdict threshold: a verdict stands on its own trials' intervals, so runs on
another machine can never change it (docs/METRICS.md, "Noise measured as noise").
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from core.analysis.runs import RunView

__all__ = ["Fingerprint", "fingerprint", "runs_fingerprint"]


@dataclass(frozen=True)
class Fingerprint:
    """The machine and software a run measured on. ``gpus``: the GPU models, sorted (their
    count is its length); ``cpu``: the CPU model (None for runs older than the fact)."""

    gpus: tuple[str, ...]
    cpu: str | None
    engine: str | None
    engine_install: str | None
    engine_version: str | None

    @property
    def machine(self) -> tuple[tuple[str, ...], str | None]:
        """The hardware part: what an A/A on this machine and a run planned here share."""
        return self.gpus, self.cpu

    @property
    def key(self) -> str:
        """``fp-`` and 10 hex digits of the SHA-256 of every field (the same facts, the same
        key on every machine)."""
        raw = json.dumps(
            [list(self.gpus), self.cpu, self.engine, self.engine_install, self.engine_version]
        )
        return "fp-" + hashlib.sha256(raw.encode()).hexdigest()[:10]

    @property
    def gpus_text(self) -> str:
        """The GPUs in words: ``1× NVIDIA H200`` (``no GPU``)."""
        counts: dict[str, int] = {}
        for g in self.gpus:
            counts[g] = counts.get(g, 0) + 1
        return ", ".join(f"{n}× {g}" for g, n in counts.items()) or "no GPU"

    @property
    def text(self) -> str:
        """In words: ``1× NVIDIA H200, CPU AMD EPYC 9654, sglang 0.5.17``."""
        gpus = self.gpus_text
        cpu = f"CPU {self.cpu}" if self.cpu else "CPU not recorded"
        engine = (
            " ".join(x for x in (self.engine, self.engine_version) if x) or "engine not recorded"
        )
        install = f" (install {self.engine_install})" if self.engine_install else ""
        return f"{gpus}, {cpu}, {engine}{install}"

    def plans_for(self, other: Fingerprint) -> bool:
        """Whether this fingerprint's noise speaks for runs of ``other``: the same machine,
        engine and installation; the version too where both are known (a run not launched
        yet has none)."""
        return (
            self.machine == other.machine
            and self.engine == other.engine
            and self.engine_install == other.engine_install
            and (
                self.engine_version is None
                or other.engine_version is None
                or self.engine_version == other.engine_version
            )
        )


def _text(value: object) -> str | None:
    return str(value) if value not in (None, "") else None


def fingerprint(facts: Mapping[str, Any]) -> Fingerprint:
    """THE fingerprint of a run's stored facts (``facts.json``: ``gpus`` with their
    ``name``, ``cpu_model``, ``engine``, ``engine_install``, ``engine_version``), or of
    a machine's (``core.launch.host.machine_facts``). A missing fact is None, never a
    guess: an older run without ``cpu_model`` matches only runs without it."""
    gpus = facts.get("gpus") or []
    names = sorted(
        str(g.get("name")) if isinstance(g, Mapping) else str(g) for g in gpus if g is not None
    )
    return Fingerprint(
        gpus=tuple(names),
        cpu=_text(facts.get("cpu_model")),
        engine=_text(facts.get("engine")),
        engine_install=_text(facts.get("engine_install")),
        engine_version=_text(facts.get("engine_version")),
    )


def runs_fingerprint(views: Sequence[RunView]) -> Fingerprint | None:
    """The fingerprint of an experiment's runs: its first succeeded run that stored facts
    (the runs of one experiment run on one machine); None when none did."""
    for v in views:
        if v.status.state == "succeeded" and v.facts:
            return fingerprint(v.facts)
    return None
