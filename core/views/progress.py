"""Where runs are, in words: one point numbering (1-based, "point 2/3"), how many runs
ended and how, the time a live run or experiment has taken and about how long it has left.
Computes nothing it could read: the clock is the caller's (``now``), the estimate too
(core/launch/presets.py ``run_estimate``)."""

from __future__ import annotations

import re
import statistics
from collections import Counter
from collections.abc import Sequence
from datetime import datetime

from core.numbers import duration_text
from core.run_folder import ACTIVE_STATES, RunStatus, point_of_step

__all__ = [
    "duration_text",
    "ended_text",
    "experiment_time_text",
    "point_words",
    "run_time_text",
]

# status.json names a point by its 0-based index ("point 0", "cancelled during point 6"):
# the folder's key, which readers (point_cancelled, the executors' tests) rely on. People
# read "point 1/7". A name already counted ("point 1/7") is left as it is.
_POINT = re.compile(r"\bpoint (\d+)\b(?!/)")


def point_words(text: str, points_total: int | None) -> str:
    """``text`` with every stored ``point N`` as people count it: ``point N+1/total``
    (``point N+1`` when the total is unknown)."""

    def counted(m: re.Match[str]) -> str:
        n = int(m[1]) + 1
        return f"point {n}/{points_total}" if points_total else f"point {n}"

    return _POINT.sub(counted, text)


def ended_text(states: Sequence[str]) -> str:
    """``4/4 ended: 4 failed``, ``3/4 ended: 2 succeeded, 1 failed``: how many runs ended
    and how, never "finished" for a run that failed."""
    ended = Counter(s for s in states if s not in ACTIVE_STATES)
    order = ("succeeded", "failed", "cancelled", "interrupted", "invalid")
    parts = [f"{ended[s]} {s}" for s in order if ended[s]]
    parts += [f"{n} {s}" for s, n in sorted(ended.items()) if s not in order]
    head = f"{sum(ended.values())}/{len(states)} ended"
    return f"{head}: {', '.join(parts)}" if parts else head


def _at(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def _since(text: str | None, now: datetime) -> float | None:
    at = _at(text)
    return None if at is None else max((now - at).total_seconds(), 0.0)


def _fraction(status: RunStatus) -> float | None:
    """The share of the run's benchmark done: points done plus the current point's share of
    requests (None before the first point's progress)."""
    prog = status.progress or {}
    try:
        total = max(int(prog["points_total"]), 1)
        part = int(prog["requests_done"]) / max(int(prog["requests_total"]), 1)
        return min((int(prog["point"]) + part) / total, 1.0)
    except (KeyError, TypeError, ValueError):
        return None


def _left_text(left_s: float, how: str) -> str:
    return f"about {duration_text(max(left_s, 1.0))} left ({how})"


def run_time_text(
    status: RunStatus, estimate_s: float | None, estimate_source: str, now: datetime
) -> str:
    """A live run's time: ``elapsed 1 min 05 s · about 40.0 s left (from progress)``. Once
    its points report progress the time left is the benchmark's pace so far (time since the
    first point started over the share done); before, the estimate minus the time taken."""
    if status.state == "queued":
        if estimate_s is None:
            return "queued; no earlier run to estimate its duration from"
        return f"queued; about {duration_text(estimate_s)} once it starts ({estimate_source})"
    elapsed = _since(status.started_at, now)
    if elapsed is None:
        return ""
    out = f"elapsed {duration_text(elapsed)}"
    first = next((s for s in status.steps if point_of_step(s.step) is not None), None)
    bench_s = _since(first.started_at, now) if first is not None else None
    done = _fraction(status)
    if done and bench_s:
        return f"{out} · {_left_text(bench_s * (1 - done) / done, 'from progress so far')}"
    if estimate_s is None:
        return f"{out} · time left unknown: no earlier run to estimate from"
    if elapsed > estimate_s:
        return f"{out} · longer than the {duration_text(estimate_s)} estimated ({estimate_source})"
    return f"{out} · {_left_text(estimate_s - elapsed, estimate_source)}"


def experiment_time_text(
    statuses: Sequence[RunStatus], estimate_s: float | None, estimate_source: str, now: datetime
) -> str:
    """A live experiment's time: elapsed since its first run started, and about how long
    its queued and running runs have left, one after another, at the median duration of
    its own ended runs (else ``estimate_s``)."""
    started = [t for s in statuses if (t := _since(s.started_at, now)) is not None]
    own = [s.duration_s for s in statuses if s.state == "succeeded" and s.duration_s]
    per_run, how = (
        (statistics.median(own), f"median of its {len(own)} succeeded run(s)")
        if own
        else (estimate_s, estimate_source)
    )
    out = f"elapsed {duration_text(max(started))}" if started else "not started yet"
    if per_run is None:
        return f"{out} · time left unknown: no earlier run to estimate from"
    left = 0.0
    for s in statuses:
        if s.state == "queued":
            left += per_run
        elif s.state == "running":
            left += max(per_run - (_since(s.started_at, now) or 0.0), 0.0)
    return f"{out} · {_left_text(left, how + ', one run after another')}"
