"""Rates with zeros: the difference of two proportions (an error rate) between arms.

A rate of 0 has no log, so the paired log-ratio (``core.analysis.stats.paired_log_ratio``)
gives no interval when a trial had no error; and a rate is a count out of requests, so its
own uncertainty is known from the counts. ``rate_difference`` pools each arm's counts over
its trials and gives the difference of proportions (arm − base, in fractions: 0.004 is 0.4
percentage points) with **Newcombe's hybrid score interval** (Newcombe 1998, Stat Med 17,
"Interval estimation for the difference between independent proportions", method 10) built
from each arm's **Wilson** interval (Wilson 1927): it stays inside [−1, 1], is defined at 0
errors, and covers close to its level where the Wald interval fails. It treats requests as
independent: errors that come in bursts (a crashed server fails a wave at once) make it
too narrow, which docs/METRICS.md says.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from statistics import NormalDist

__all__ = ["RATE_COUNTS", "rate_difference", "wilson"]

# metric → (its count, out of which total), as a point's metrics store them
RATE_COUNTS: Mapping[str, tuple[str, str]] = {"error_rate": ("failed", "num_requests")}


def _z(level: float) -> float:
    return NormalDist().inv_cdf(1 - (1 - level) / 2)


def wilson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Wilson's score interval of a proportion k/n (n > 0)."""
    z = _z(level)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(centre - half, 0.0), min(centre + half, 1.0)


def rate_difference(
    arm: Mapping[int, tuple[int, int]], base: Mapping[int, tuple[int, int]], level: float = 0.95
) -> tuple[float, float, float] | None:
    """(p_arm − p_base, low, high) from each side's trial → (count, total), pooled over
    the trials both sides ran; None without a request on either side."""
    trials = [t for t in arm if t in base]
    k1, n1 = sum(arm[t][0] for t in trials), sum(arm[t][1] for t in trials)
    k2, n2 = sum(base[t][0] for t in trials), sum(base[t][1] for t in trials)
    if n1 <= 0 or n2 <= 0:
        return None
    p1, p2 = k1 / n1, k2 / n2
    l1, u1 = wilson(k1, n1, level)
    l2, u2 = wilson(k2, n2, level)
    d = p1 - p2
    low = d - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2)
    high = d + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)
    return d, low, high
