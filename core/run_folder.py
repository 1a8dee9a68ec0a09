"""One run's folder: the source of truth for everything the run produced.

``data/runs/<run_id>/`` holds ``spec.json``, ``status.json`` (phase, progress,
every step's outcome), ``server.log``, ``launch.json``, ``facts.json``,
``probe.json``, ``points/<n>/records.parquet`` + ``summary.json``,
``samples.parquet`` (server /metrics and GPU memory over time) and ``result.json``.
Every JSON/Parquet artifact is written to a temporary name and renamed, so a
crash or a full disk never leaves a half-written file that reads as a result.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import secrets
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq

from core.errors import StoreError

__all__ = [
    "ACTIVE_STATES",
    "FINAL_STATES",
    "RunFolder",
    "RunState",
    "new_run_id",
    "read_json",
    "utc_now",
    "write_json_atomic",
]

RunState = Literal["queued", "running", "succeeded", "failed", "invalid", "cancelled",
                   "interrupted"]
ACTIVE_STATES = ("queued", "running")
SECRETS_FILE = ".secrets.json"  # exists only while a run that was given secrets is active
FINAL_STATES = ("succeeded", "failed", "invalid", "cancelled", "interrupted")


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def new_run_id() -> str:
    """Sortable by creation time, unique without coordination."""
    return datetime.now(UTC).strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3)


def _json_default(o: object) -> Any:
    if isinstance(o, Path):
        return str(o)
    if isinstance(o, set | frozenset | tuple):
        return list(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def _clean(o: Any) -> Any:
    # Strict JSON has no Infinity/NaN; keep them readable as strings.
    if isinstance(o, float) and not math.isfinite(o):
        return "inf" if o > 0 else ("-inf" if o < 0 else "nan")
    if isinstance(o, dict):
        return {k: _clean(v) for k, v in o.items()}
    if isinstance(o, list | tuple):
        return [_clean(v) for v in o]
    return o


def write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(_clean(data), indent=2, default=_json_default))
        tmp.replace(path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise StoreError(f"cannot write {path.name}: {exc.strerror or exc}") from exc


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, json.JSONDecodeError) as exc:
        raise StoreError(f"cannot read {path}: {exc}") from exc


class RunFolder:
    """Read and write one run's artifacts."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.run_id = path.name

    @classmethod
    def create(cls, runs_dir: Path, run_id: str | None = None) -> RunFolder:
        run_id = run_id or new_run_id()
        path = runs_dir / run_id
        try:
            path.mkdir(parents=True, exist_ok=False)
            (path / "points").mkdir()
        except OSError as exc:
            raise StoreError(f"cannot create run folder {path}: {exc.strerror or exc}") from exc
        return cls(path)

    # --- paths -------------------------------------------------------------
    @property
    def log_path(self) -> Path:
        return self.path / "server.log"

    @property
    def cancel_path(self) -> Path:
        return self.path / "CANCEL"

    def point_dir(self, index: int) -> Path:
        d = self.path / "points" / f"{index:03d}"
        d.mkdir(parents=True, exist_ok=True)
        return d

    # --- JSON artifacts ----------------------------------------------------
    def write(self, name: str, data: Any) -> None:
        write_json_atomic(self.path / name, data)

    def read(self, name: str) -> Any:
        return read_json(self.path / name)

    def status(self) -> dict[str, Any]:
        return self.read("status.json") or {}

    def update_status(self, **changes: Any) -> dict[str, Any]:
        status = self.status()
        status.update(changes)
        status["updated_at"] = utc_now()
        if changes.get("state") in FINAL_STATES:
            self.drop_secrets()  # before the final state: no secret outlives its run
        self.write("status.json", status)
        return status

    # --- secrets (API keys given to the engine; see core/safety.py) ----------------
    @property
    def secrets_path(self) -> Path:
        return self.path / SECRETS_FILE

    def write_secrets(self, data: dict[str, Any]) -> None:
        """Keep secrets out of spec.json: owner-only, for the run process to read back."""
        tmp = self.path / f".{SECRETS_FILE}.{os.getpid()}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump(data, f)
            tmp.replace(self.secrets_path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise StoreError(f"cannot write the run's secrets: {exc.strerror or exc}") from exc

    def read_secrets(self) -> dict[str, Any]:
        data = read_json(self.secrets_path)
        return data if isinstance(data, dict) else {}

    def drop_secrets(self) -> None:
        """At the end of a run: replace every secret value that an engine may have echoed
        into the run's text files by ``***``, then delete the secrets file."""
        from core.safety import REDACTED

        try:
            hidden = self.read_secrets() if self.secrets_path.exists() else {}
        except StoreError:
            hidden = {}
        items = [v for group in hidden.values() if isinstance(group, dict)
                 for v in group.values() if isinstance(v, str)]
        # An item is a value, or `--flag=value`.
        values = sorted({v.split("=", 1)[1] if v.startswith("-") and "=" in v else v
                         for v in items}, key=len, reverse=True)
        values = [v for v in values if len(v) >= 4 and v != REDACTED]
        if values:
            for path in self.path.rglob("*"):
                if path.suffix not in (".json", ".log", ".txt") or not path.is_file() \
                        or path == self.secrets_path:
                    continue
                tmp = path.with_name(f".{path.name}.{os.getpid()}.scrub")
                try:
                    data = path.read_bytes()
                    clean = data
                    for v in values:
                        clean = clean.replace(v.encode(), REDACTED.encode())
                    if clean != data:
                        tmp.write_bytes(clean)
                        tmp.replace(path)
                except OSError:
                    with contextlib.suppress(OSError):
                        tmp.unlink()
        with contextlib.suppress(OSError):
            self.secrets_path.unlink()

    def request_cancel(self) -> None:
        self.cancel_path.write_text(utc_now())

    @property
    def cancel_requested(self) -> bool:
        return self.cancel_path.exists()

    # --- tables ------------------------------------------------------------
    def write_table(self, rel: str, table: pa.Table) -> None:
        path = self.path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            pq.write_table(table, tmp)
            tmp.replace(path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise StoreError(f"cannot write {rel}: {exc.strerror or exc}") from exc

    def read_table(self, rel: str) -> pa.Table | None:
        path = self.path / rel
        return pq.read_table(path) if path.exists() else None

    def point_summaries(self) -> list[dict[str, Any]]:
        out = []
        for d in sorted((self.path / "points").glob("[0-9]*")):
            s = read_json(d / "summary.json")
            if s is not None:
                out.append(s)
        return out

    def age_s(self) -> float:
        try:
            return time.time() - (self.path / "status.json").stat().st_mtime
        except OSError:
            return math.inf
