"""GPU memory through NVML (``nvidia-ml-py``); every function degrades to "no GPU"."""

from __future__ import annotations

import contextlib
from typing import Any

__all__ = ["gpu_memory", "gpu_pids", "nvml_available"]

_state: dict[str, bool] = {}


def nvml_available() -> bool:
    if "ok" not in _state:
        try:
            import pynvml

            pynvml.nvmlInit()
            _state["ok"] = pynvml.nvmlDeviceGetCount() > 0
        except Exception:  # no library, no driver, no device: all mean "no GPU"
            _state["ok"] = False
    return _state["ok"]


def gpu_memory() -> list[dict[str, Any]]:
    """Used/total MiB per device; empty without a GPU."""
    if not nvml_available():
        return []
    import pynvml

    out = []
    for i in range(pynvml.nvmlDeviceGetCount()):
        with contextlib.suppress(pynvml.NVMLError):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            out.append({"gpu": i, "used_mib": mem.used / 2**20, "total_mib": mem.total / 2**20,
                        "name": str(pynvml.nvmlDeviceGetName(h))})
    return out


def gpu_pids() -> dict[int, list[int]]:
    """Compute processes holding each GPU."""
    if not nvml_available():
        return {}
    import pynvml

    out: dict[int, list[int]] = {}
    for i in range(pynvml.nvmlDeviceGetCount()):
        with contextlib.suppress(pynvml.NVMLError):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            out[i] = [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)]
    return out
