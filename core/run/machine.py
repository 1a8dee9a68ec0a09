"""The machine a run measures on, as facts a fingerprint is built from
(``core.analysis.noise.fingerprint``): its CPU model (its GPUs are ``core.run.gpu``'s)."""

from __future__ import annotations

import functools
import platform
from pathlib import Path

__all__ = ["cpu_model"]


@functools.lru_cache(maxsize=1)
def cpu_model() -> str | None:
    """The CPU's model name (``/proc/cpuinfo``'s first "model name", else the platform's
    processor string); None when neither says."""
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            key, sep, value = line.partition(":")
            if sep and key.strip() == "model name" and value.strip():
                return " ".join(value.split())
    except OSError:
        pass
    return platform.processor() or None
