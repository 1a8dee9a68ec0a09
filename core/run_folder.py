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
import fcntl
import json
import math
import os
import re
import secrets
import time
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, ConfigDict, ValidationError

from core.config import RunSpec
from core.errors import StoreError
from core.metrics import headline_index

__all__ = [
    "ACTIVE_STATES",
    "CLEANUP_STEPS",
    "FINAL_STATES",
    "INDEX_STEPS",
    "MEASURE_STEPS",
    "RUN_STEPS",
    "STOP_GRACE_S",
    "EndState",
    "RunFolder",
    "RunState",
    "RunStatus",
    "Step",
    "find_runs",
    "interrupted_steps",
    "is_run_id",
    "kv_pool_tokens",
    "new_run_id",
    "point_of_step",
    "point_step",
    "read_json",
    "run_result",
    "stop_step",
    "stop_step_read",
    "tail",
    "utc_now",
    "write_json_atomic",
]

RunState = Literal[
    "queued", "running", "succeeded", "failed", "invalid", "cancelled", "interrupted"
]
ACTIVE_STATES = ("queued", "running")
SECRETS_FILE = ".secrets.json"  # exists only while a run that was given secrets is active
FINAL_STATES = ("succeeded", "failed", "invalid", "cancelled", "interrupted")
EndState = Literal["succeeded", "failed", "invalid", "cancelled", "interrupted"]
TRANSITION_LOCK = ".jobs.lock"  # serialises queued-folder transitions (launch vs cancel)


# ASCII letters and digits, then also . _ - (never a path separator); at most 100 characters.
_RUN_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}", re.ASCII)


def is_run_id(text: str) -> bool:
    """THE run-id rule: a run or experiment id as ServeLab writes them (ASCII letters,
    digits, ``.``, ``_``, ``-``; no path separator, no ``..``, no non-ASCII letter). Every
    page, export, the CLI, the worker and explain apply it to an id they were given."""
    return isinstance(text, str) and bool(_RUN_ID_RE.fullmatch(text)) and ".." not in text


def find_runs(runs_dir: Path, ids: Iterable[str]) -> tuple[list[RunFolder], list[str]]:
    """THE run lookup: the run folders named by ``ids`` (in order, duplicates once) and the
    ids that name no run (malformed, or no such folder)."""
    found: list[RunFolder] = []
    unknown: list[str] = []
    for rid in dict.fromkeys(i.strip() for i in ids if i.strip()):
        if is_run_id(rid) and (runs_dir / rid / "spec.json").is_file():
            found.append(RunFolder(runs_dir / rid))
        else:
            unknown.append(rid)
    return found, unknown


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def epoch_s(stamp: object) -> float | None:
    """Seconds since the epoch of a stored ISO stamp (``utc_now``'s); None when absent or
    not a stamp, so a record from an older or foreign writer reads as "unknown"."""
    if not isinstance(stamp, str):
        return None
    try:
        return datetime.fromisoformat(stamp).timestamp()
    except ValueError:
        return None


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


def tail(path: Path, max_lines: int = 50) -> str:
    """The last lines of a log, read from the end so a huge log costs nothing."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            data = f.read().decode(errors="replace").replace("\r", "\n")
    except OSError:
        return ""
    return "\n".join(data.splitlines()[-max_lines:])


class Step(BaseModel):
    """One step of a run as status.json records it (``preflight``, ``point 0``, ...)."""

    # Older folders and newer versions may carry more: kept, never an error.
    model_config = ConfigDict(frozen=True, extra="allow")

    step: str
    outcome: (
        str  # running | ok | warning (measured, flagged: a degenerate probe) | failed | skipped
    )
    started_at: str | None = None
    duration_s: float | None = None
    detail: str | None = None


# THE steps of a run, in the order it takes them, by the names status.json records them:
# core/run/pipeline.py runs one function per name, in this order; readers take the names
# from here. The measuring steps run until one fails; the clean-up steps run whatever
# happened; the index step once the final state is recorded. A step that does not apply is
# left out of status.json (launch, stop and verify with no server of its own; exact_length
# unless the engine asks which request field sets the output length; kv_fill and metrics
# unless there is something to say; answers unless the plan or an experiment turns the
# check on) or recorded ``skipped`` (probe, warmup). kv_fill sizes twice: before the
# warm-up, so it runs at the sized concurrency, and after it, with the chat template's
# tokens the warm-up measured. ``points`` records one step per point, named by ``point_step``.
MEASURE_STEPS = (
    "preflight",
    "launch",
    "wait_ready",
    "facts",
    "probe",
    "answers",
    "exact_length",
    "kv_fill",
    "warmup",
    "kv_fill",
    "points",
)
CLEANUP_STEPS = ("metrics", "stop", "verify")
INDEX_STEPS = ("store",)
RUN_STEPS = (*MEASURE_STEPS, *CLEANUP_STEPS, *INDEX_STEPS)
_POINT_STEP = re.compile(r"point (\d+)")


def point_step(index: int) -> str:
    """The step of point ``index`` (0-based, the folder's ``points/NNN``): ``point 0``."""
    return f"point {index}"


def point_of_step(step: str) -> int | None:
    """The point index a step names (``point 3`` → 3), None for any other step."""
    found = _POINT_STEP.fullmatch(step)
    return None if found is None else int(found[1])


# How long a stopping server has between SIGTERM and SIGKILL (core.run.launcher).
STOP_GRACE_S = 10.0
SIGKILL_EXIT = -9  # Popen's exit code of a process that SIGKILL ended


def stop_step(
    exit_code: int | None, we_killed: bool, took_s: float | None, grace_s: float = STOP_GRACE_S
) -> tuple[str, str]:
    """THE words of a run's ``stop`` step, (outcome, detail): whether the server left on
    SIGTERM, or had to be killed, and by whom. SGLang answers SIGTERM by SIGKILLing its own
    process tree, so exit -9 within the grace is its own ending, not ours."""
    if we_killed:
        return "killed", (
            f"server did not exit on SIGTERM within {grace_s:g} s, killed (exit {exit_code})"
        )
    if exit_code is None:
        return "failed", "the server's exit code is unknown after SIGTERM and SIGKILL"
    took = f" after {took_s:.1f} s" if took_s is not None else ""
    if exit_code == SIGKILL_EXIT:
        return "ok", (
            f"server exited on SIGTERM{took}, within the {grace_s:g} s grace, by killing "
            "its own process tree (exit -9; SGLang stops that way)"
        )
    return "ok", f"server exited on SIGTERM{took} (exit {exit_code})"


_OLD_STOP_DETAIL = re.compile(r"exit code (-?\d+|None)")


def stop_step_read(step: Step) -> tuple[str, str]:
    """A stored step's (outcome, detail) as ``stop_step`` words it: folders written before
    it said only "exit code N"; their stop waited ``STOP_GRACE_S``, so exit -9 after at
    least that long was the stop's SIGKILL, sooner the server's own."""
    found = _OLD_STOP_DETAIL.fullmatch(step.detail or "")
    if step.step != "stop" or found is None:
        return step.outcome, step.detail or ""
    code = None if found[1] == "None" else int(found[1])
    took = step.duration_s
    ours = code == SIGKILL_EXIT and took is not None and took >= STOP_GRACE_S
    return stop_step(code, ours, took)


class RunStatus(BaseModel):
    """``status.json``: where a run is. Every field is optional, so the folders of older
    versions (data/demo, imported runs) load as they are; unknown keys are kept."""

    model_config = ConfigDict(frozen=True, extra="allow")

    run_id: str | None = None
    state: RunState | None = None  # None: being created, or no status.json yet
    phase: str | None = None
    reason: str | None = None
    pid: int | None = None  # the run process (on this host)
    server_pid: int | None = None  # the server's process group leader
    started_at: str | None = None
    finished_at: str | None = None
    updated_at: str | None = None
    duration_s: float | None = None
    progress: dict[str, Any] | None = None
    steps: list[Step] = []
    # Where it ran, for a run an executor placed elsewhere (core/executors).
    executor: str | None = None
    node_ip: str | None = None
    node_id: str | None = None
    node_name: str | None = None
    gpu_ids: list[int | str] | None = None

    @property
    def final(self) -> bool:
        return self.state in FINAL_STATES

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES

    def extra(self, key: str) -> Any:
        """A key this model does not name (an executor's own, e.g. ``ray_actor``)."""
        return (self.model_extra or {}).get(key)

    def as_json(self) -> dict[str, Any]:
        """The JSON object written to disk: the keys that were set, nothing added."""
        return self.model_dump(mode="json", exclude_unset=True)


def interrupted_steps(steps: list[Any], why: str) -> list[Any]:
    """``steps`` with every one still ``running`` marked failed: ``interrupted: why``."""
    return [
        {**s, "outcome": "failed", "detail": f"interrupted: {why}"}
        if isinstance(s, dict) and s.get("outcome") == "running"
        else s
        for s in steps
    ]


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

    @classmethod
    def prepare(
        cls, runs_dir: Path, spec: RunSpec, run_id: str | None = None, *, run_now: bool = False
    ) -> RunFolder:
        """Create the run folder with its spec: queued for the worker, or (``run_now``, the
        CLI) already running in this process, so no worker ever mistakes it for a job.
        API keys in the engine flags go to the owner-only secrets file, never spec.json."""
        from core.safety import split_secrets

        folder = cls.create(runs_dir, run_id)
        data = spec.model_dump(mode="json")
        redacted, hidden = split_secrets(spec.server.extra_args)
        if hidden:  # the run process reads them back once
            folder.write_secrets({"extra_args": hidden})
            data["server"]["extra_args"] = list(redacted)
        folder.write("spec.json", {"run_id": folder.run_id, "created_at": utc_now(), **data})
        status: dict[str, Any] = {
            "run_id": folder.run_id,
            "state": "queued",
            "phase": "queued",
            "updated_at": utc_now(),
        }
        if run_now:
            status.update(state="running", phase="starting", pid=os.getpid(), started_at=utc_now())
        folder.write("status.json", status)
        return folder

    # --- paths -------------------------------------------------------------
    @property
    def log_path(self) -> Path:
        return self.path / "server.log"

    def log_tail(self, max_lines: int = 50) -> str:
        """The server log's last lines ("" while there is none)."""
        return tail(self.log_path, max_lines)

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
        """status.json as the JSON written (``--json`` output, tests that check the file);
        every reader of a run's state uses ``read_status`` or ``status_or_empty``."""
        data = self.read("status.json")
        return data if isinstance(data, dict) else {}

    def read_status(self) -> RunStatus:
        """status.json, typed. No file yet: an empty status (``state`` None). Unreadable
        or not a status: StoreError."""
        data = self.read("status.json")
        if data is None:
            return RunStatus()
        try:
            return RunStatus.model_validate(data)
        except ValidationError as exc:
            raise StoreError(
                f"{self.path / 'status.json'} is not a run status: {str(exc).splitlines()[0]}"
            ) from exc

    def status_or_empty(self) -> RunStatus:
        """status.json, typed; an empty status (``state`` None) while there is none or it
        cannot be read (being replaced, copied in half, not a status). The one lenient
        reader: the worker, executors, catalog and pages poll with it."""
        try:
            return self.read_status()
        except StoreError:
            return RunStatus()

    def update_status(self, **changes: Any) -> dict[str, Any]:
        """Merge ``changes`` into status.json (checked against ``RunStatus``); return the
        JSON written. The end of a run goes through ``end``."""
        status = {**self.status(), **changes, "updated_at": utc_now()}
        try:
            status = RunStatus.model_validate(status).as_json()
        except ValidationError as exc:  # a bug in the caller: say which field
            raise StoreError(f"bad status for {self.run_id}: {exc}") from exc
        if changes.get("state") in FINAL_STATES:
            self.drop_secrets()  # before the final state: no secret outlives its run
        self.write("status.json", status)
        return status

    def end(
        self,
        state: EndState,
        reason: str,
        *,
        steps: list[Any] | None = None,
        interrupted: str | None = None,
        **extra: Any,
    ) -> RunStatus:
        """Record the end of the run: ``state``, ``reason``, phase ``done``, ``finished_at``
        (unless given), no progress. ``steps`` replace the recorded ones; with
        ``interrupted`` (why the run stopped short), every step still ``running`` is
        marked failed with ``interrupted: <why>``. Every path that ends a run comes here.
        """
        if state not in FINAL_STATES:
            raise ValueError(
                f"end() takes a final state ({', '.join(FINAL_STATES)}), not {state!r}"
            )
        if steps is None:
            steps = self.status().get("steps") or []
        if interrupted is not None:
            steps = interrupted_steps(steps, interrupted)
        extra.setdefault("finished_at", utc_now())
        return RunStatus.model_validate(
            self.update_status(
                **{
                    **extra,
                    "state": state,
                    "reason": reason,
                    "phase": "done",
                    "steps": steps,
                    "progress": None,
                }
            )
        )

    @contextlib.contextmanager
    def transition(self) -> Iterator[None]:
        """Held while a queued or running folder changes hands (launch vs cancel vs an
        executor's end), across threads and processes: flock belongs to the open file,
        so two threads exclude each other too."""
        with (self.path / TRANSITION_LOCK).open("a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            yield

    def spec(self) -> RunSpec:
        """The run's spec.json as a RunSpec (its ``run_id`` and ``created_at`` set aside);
        StoreError when there is none."""
        data = self.read("spec.json")
        if not isinstance(data, dict):
            raise StoreError(f"{self.run_id} has no spec.json")
        return RunSpec.model_validate(
            {k: v for k, v in data.items() if k not in ("run_id", "created_at")}
        )

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
        items = [
            v
            for group in hidden.values()
            if isinstance(group, dict)
            for v in group.values()
            if isinstance(v, str)
        ]
        # An item is a value, or `--flag=value`.
        values = sorted(
            {v.split("=", 1)[1] if v.startswith("-") and "=" in v else v for v in items},
            key=len,
            reverse=True,
        )
        values = [v for v in values if len(v) >= 4 and v != REDACTED]
        if values:
            for path in self.path.rglob("*"):
                if (
                    path.suffix not in (".json", ".log", ".txt")
                    or not path.is_file()
                    or path == self.secrets_path
                ):
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


def kv_pool_tokens(facts: dict[str, Any]) -> int | None:
    """THE KV pool a run's server reported after start-up (facts.json), in tokens; None when
    it reported none (transformers serve, an endpoint that hides it)."""
    for key in ("kv_cache_tokens", "max_total_num_tokens"):
        value = facts.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def run_result(folder: RunFolder) -> dict[str, Any]:
    """``result.json``: the run's headline metrics from its point summaries. One builder for
    every writer of result.json (the run pipeline, the importers)."""
    points = folder.point_summaries()
    # The headline is the heaviest load (core.metrics.headline_index: the rule Compare's
    # headline follows too), not the plan's last point: a plan [c=64, c=1] headlines c=64.
    head = headline_index([s.get("point") or {} for s in points])
    headline = (points[head].get("metrics") or {}) if head is not None else {}
    return {
        "points": len(points),
        "headline_point": points[head]["index"] if head is not None else None,
        "headline": {
            k: headline.get(k)
            for k in (
                "output_throughput",
                "median_ttft_ms",
                "median_itl_ms",
                "median_tpot_ms",
                "error_rate",
                "completed",
                "num_requests",
            )
        },
    }
