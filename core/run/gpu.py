"""GPU memory through NVML (``nvidia-ml-py``); every function degrades to "no GPU"."""

from __future__ import annotations

import contextlib
from typing import Any

from core.settings import cuda_visible_devices

__all__ = ["gpu_memory", "gpu_pids", "nvml_available", "visible_gpus"]

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


def visible_gpus() -> list[int]:
    """NVML indexes of the GPUs this process may use. NVML sees every GPU of the host, so
    ``CUDA_VISIBLE_DEVICES`` (set per run by Ray, core/executors) narrows them: indexes, or
    GPU-/MIG- UUIDs; unset means all of them."""
    if not nvml_available():
        return []
    import pynvml

    count = pynvml.nvmlDeviceGetCount()
    raw = cuda_visible_devices()
    if raw is None:
        return list(range(count))
    uuids: dict[str, int] = {}
    out: list[int] = []
    for item in (x.strip() for x in raw.split(",")):
        if item.isdigit():
            if int(item) >= count:
                break  # CUDA stops at the first invalid entry
            out.append(int(item))
        elif item.startswith(("GPU-", "MIG-")):
            if not uuids:
                for i in range(count):
                    with contextlib.suppress(pynvml.NVMLError):
                        uuid = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i))
                        uuids[uuid.decode() if isinstance(uuid, bytes) else str(uuid)] = i
            match = [i for u, i in uuids.items() if u.startswith(item) or item.startswith(u)]
            if not match:
                break
            out.append(match[0])
        else:
            break
    return list(dict.fromkeys(out))


def gpu_memory() -> list[dict[str, Any]]:
    """Used/total MiB per device; empty without a GPU."""
    if not nvml_available():
        return []
    import pynvml

    out = []
    for i in visible_gpus():
        with contextlib.suppress(pynvml.NVMLError):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            out.append(
                {
                    "gpu": i,
                    "used_mib": mem.used / 2**20,
                    "total_mib": mem.total / 2**20,
                    "name": str(pynvml.nvmlDeviceGetName(h)),
                }
            )
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
