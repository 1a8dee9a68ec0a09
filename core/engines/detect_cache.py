"""Engine detection results kept on disk, per interpreter and package version.

Reading an engine's option list means importing its CLI (``serve --help``,
``launch_server --help``: torch and most of the engine, seconds to tens of seconds), and
every run is a fresh process. What that import tells us changes only when the interpreter
or an installed package changes, so adapters key what they learned by exactly that
(interpreter path, package versions, anything else the answer depends on) and find it
here next time. Only a successful detection is stored: a failure is retried every time.
A cache that cannot be read or written is no error; detection just runs again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["CACHE_FORMAT", "interpreter", "load", "store"]

CACHE_FORMAT = 1  # bump when what adapters store changes shape


def interpreter(python: str) -> str:
    """The interpreter as a cache key: its resolved path (a venv's ``python`` and
    ``python3`` are the same interpreter)."""
    with contextlib.suppress(OSError, RuntimeError):
        return str(Path(python).resolve())
    return python


def _path(cache_dir: Path, engine: str, key: Mapping[str, Any]) -> Path:
    digest = hashlib.sha256(
        json.dumps({"format": CACHE_FORMAT, **key}, sort_keys=True, default=str).encode()
    ).hexdigest()[:16]
    return cache_dir / f"engine-{engine}-{digest}.json"


def load(cache_dir: Path | None, engine: str, key: Mapping[str, Any]) -> dict[str, Any] | None:
    """What was stored under exactly ``key``; None if nothing (or the file is unreadable)."""
    if cache_dir is None:
        return None
    try:
        data = json.loads(_path(cache_dir, engine, key).read_text())
    except (OSError, ValueError):
        return None
    if (
        not isinstance(data, dict)
        or data.get("key") != json.loads(json.dumps(dict(key), default=str))
        or not isinstance(data.get("value"), dict)
    ):
        return None  # a hash collision or a hand-edited file: detect again
    value: dict[str, Any] = data["value"]
    return value


def store(
    cache_dir: Path | None, engine: str, key: Mapping[str, Any], value: Mapping[str, Any]
) -> None:
    """Keep ``value`` under ``key`` (atomically: a concurrent reader sees the old file or
    the new one). Errors are ignored: the next run detects again."""
    if cache_dir is None:
        return
    path = _path(cache_dir, engine, key)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        tmp.write_text(
            json.dumps(
                {"format": CACHE_FORMAT, "engine": engine, "key": dict(key), "value": dict(value)},
                indent=1,
                default=str,
            )
        )
        tmp.replace(path)
    except (OSError, TypeError, ValueError):
        with contextlib.suppress(OSError):
            tmp.unlink()
