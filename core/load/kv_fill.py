"""KV pressure sized from the server: a point's ``kv_fill`` F asks for F x the KV pool in
tokens in flight, and this sizes the concurrency (lengths kept) or the lengths (concurrency
kept) that give it. Pure arithmetic over the pool and the per-request token count the server
sees; the pipeline calls it after start-up, with the pool the server reported (or the
smallest arm's: ``smallest_pool``), before the warm-up and again, with the chat template's
tokens measured on the warm-up, before the point (docs/METRICS.md, "KV pressure").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from core.config import Point, config_error
from core.errors import ConfigError
from core.records import RequestRecord

__all__ = [
    "KvSizing",
    "PoolSource",
    "length_share",
    "size_kv_fill",
    "smallest_pool",
    "template_tokens",
]

_FIELD = "plan.points.kv_fill"
MAX_CONCURRENCY = 4096  # Point.concurrency's bound


@dataclass(frozen=True)
class PoolSource:
    """A KV pool in tokens and whose it is (a run id, its arm; None = this run's server)."""

    tokens: int
    run_id: str | None = None
    arm: str | None = None
    given: bool = False  # plan.kv_pool.tokens: the user's number

    @property
    def whose(self) -> str:
        if self.given:
            return "given in plan.kv_pool"
        if self.run_id is None:
            return "this run's server"
        return f"run {self.run_id}" + (f" (arm {self.arm})" if self.arm else "")


def smallest_pool(pools: Sequence[PoolSource]) -> PoolSource:
    """THE rule for an experiment: size every arm from the smallest arm's pool, so every arm
    gets the same load and none is asked for more than its pool holds at F = 1. A tie goes to
    the first given (the order is the plan's, the same in every arm)."""
    if not pools:
        raise ConfigError(_FIELD, "no KV pool to size from")
    return min(pools, key=lambda p: p.tokens)


def length_share(point: Point) -> float:
    """The mean length of a request over its top length: 1 for fixed, about (1 + ratio) / 2
    for uniform (each length drawn in [ratio x len, len])."""
    w = point.workload
    return 1.0 if w.kind == "fixed" else (1.0 + w.range_ratio) / 2.0


def template_tokens(records: Sequence[RequestRecord]) -> int | None:
    """The chat template's tokens per request as the server counted them: the median of
    ``usage.prompt_tokens`` minus the prompt's own length (None when the server sent none)."""
    extra = sorted(
        r.prompt_tokens_server - r.prompt_tokens
        for r in records
        if r.ok and r.prompt_tokens_server is not None
    )
    if not extra:
        return None
    return max(0, extra[len(extra) // 2])


@dataclass(frozen=True)
class KvSizing:
    """What a kv_fill point asked for and what it was sized to."""

    asked: Point
    sized: Point
    pool: PoolSource
    template: int | None
    tokens_per_request: float  # mean, as the server counts them (template included if known)
    own_pool: int | None = None  # the pool this run's server reported (None: none)

    def warnings(self) -> list[str]:
        """A server whose own pool is below the pool it was sized from got more than asked."""
        if self.own_pool is None or self.own_pool >= self.pool.tokens:
            return []
        return [
            f"this server's KV pool ({self.own_pool} tokens) is below the pool the load was "
            f"sized from ({self.pool.tokens}, {self.pool.whose}): kv_fill "
            f"{self.asked.kv_fill:g} is {self.in_flight_tokens / self.own_pool:.2f}x its own"
        ]

    @property
    def in_flight_tokens(self) -> float:
        return (self.sized.concurrency or 0) * self.tokens_per_request

    def as_dict(self) -> dict[str, Any]:
        """The point's ``summary.json`` → ``kv_fill``."""

        def shape(p: Point) -> dict[str, Any]:
            return {
                "concurrency": p.concurrency,
                "input_len": p.input_len,
                "output_len": p.output_len,
                "num_prompts": p.num_prompts,
            }

        return {
            "kv_fill": self.asked.kv_fill,
            "by": self.asked.kv_fill_by,
            "pool_tokens": self.pool.tokens,
            "pool_run_id": self.pool.run_id,
            "pool_arm": self.pool.arm,
            "pool_whose": self.pool.whose,
            "template_tokens": self.template,
            "template": "included (measured on the warm-up: usage.prompt_tokens - prompt)"
            if self.template is not None
            else "excluded: the server reported no prompt token count",
            "tokens_per_request": round(self.tokens_per_request, 1),
            "in_flight_tokens": round(self.in_flight_tokens),
            "fill_computed": round(self.in_flight_tokens / self.pool.tokens, 4),
            "own_pool_tokens": self.own_pool,
            "fill_of_own_pool": None
            if not self.own_pool
            else round(self.in_flight_tokens / self.own_pool, 4),
            "asked": shape(self.asked),
            "computed": shape(self.sized),
        }


def _sized(point: Point, **update: Any) -> Point:
    try:
        return Point.model_validate({**point.model_dump(), **update})
    except ValidationError as exc:
        raise config_error(exc, "plan.points", field=_FIELD) from exc


def size_kv_fill(
    point: Point, pool: PoolSource, template: int | None, own_pool: int | None = None
) -> KvSizing:
    """The point sized so that concurrency x (input + output + template tokens, the mean of
    its lengths) = kv_fill x the pool. ``by=concurrency``: ceil of it (at least kv_fill x pool
    in flight), and at least that many requests so every slot fills; ``by=lengths``: the
    per-request tokens split in the point's input:output ratio (each at least 1)."""
    fill = point.kv_fill
    if fill is None:
        raise ConfigError(_FIELD, "this point has no kv_fill")
    target = fill * pool.tokens
    share = length_share(point)
    extra = template or 0
    if point.kv_fill_by == "concurrency":
        per_request = (point.input_len + point.output_len) * share + extra
        concurrency = math.ceil(target / per_request)
        if concurrency > MAX_CONCURRENCY:
            raise ConfigError(
                _FIELD,
                f"kv_fill {fill:g} of a {pool.tokens}-token pool at {per_request:.0f} tokens per "
                f"request needs concurrency {concurrency}, above {MAX_CONCURRENCY}: raise "
                "input_len/output_len, or use kv_fill_by lengths",
            )
        sized = _sized(
            point, concurrency=concurrency, num_prompts=max(point.num_prompts, concurrency)
        )
        return KvSizing(point, sized, pool, template, per_request, own_pool)
    concurrency = point.concurrency or 1  # Point's rule: lengths need a cap
    content = target / concurrency - extra  # the mean tokens of the prompt and the answer
    total = point.input_len + point.output_len
    input_len = max(1, round(content * point.input_len / total / share))
    output_len = max(1, round(content * point.output_len / total / share))
    if content < 2:
        raise ConfigError(
            _FIELD,
            f"kv_fill {fill:g} of a {pool.tokens}-token pool over {concurrency} requests is "
            f"{target / concurrency:.1f} tokens each, no room beside the chat template's "
            f"{extra}: raise kv_fill or lower the concurrency",
        )
    sized = _sized(point, input_len=input_len, output_len=output_len)
    per_request = (input_len + output_len) * share + extra
    return KvSizing(point, sized, pool, template, per_request, own_pool)
