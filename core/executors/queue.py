"""The run queue. The queue IS the run folders.

A folder whose ``status.json`` says ``queued`` is a job; nothing else is stored.
``submit`` prepares folders (``RunFolder.prepare``) under new run ids, in submission order;
the portal's ``Worker`` (``core/executors/worker.py``) hands each queued folder to its
executor. ``cancel`` and ``recover_runs`` end queued or abandoned folders through their
executor (``core/executors/registry.py``). Runs and experiments are queued from the
Launch page, the grid, Explain and the CLI through ``core/launch/queue.py``.

Who writes ``status.json`` when (every transition of a queued folder happens under the
folder's ``RunFolder.transition`` lock, so a cancel and a launch never both win):

* ``submit``: ``queued`` (``RunFolder.prepare``);
* the executor, when it starts the run: ``running`` (the run process then writes its own
  steps, and its final state through ``RunFolder.end``);
* ``cancel`` of a queued folder: ``cancelled`` plus a ``CANCEL`` file;
* the executor, for a run whose process is gone without a final state: ``interrupted``
  (or ``cancelled`` when a cancel had been asked for), ``executors.base.end_unfinished``.

Plain Python: no Streamlit here. Every function may be called from any thread.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import defaultdict
from collections.abc import Sequence

from core.config import RunSpec
from core.errors import StoreError
from core.executors.registry import executor_class, executor_of
from core.run_folder import RunFolder, is_run_id, new_run_id
from core.settings import Settings

__all__ = [
    "cancel",
    "recover_runs",
    "run_ids",
    "submit",
]

# --- run ids and submission ----------------------------------------------------------

_id_lock = threading.Lock()
_last_id = ""


def _next_run_id() -> str:
    """A new run id, greater than every id this process made before.

    ``new_run_id`` sorts by the second only (then a random suffix); within one second
    this bumps the suffix of the last id instead, so the queue (run_id order) is the
    submission order in this process. Still unique without coordination across
    processes: the bump is random and the folder creation is the final arbiter.
    """
    global _last_id
    with _id_lock:
        deadline = time.monotonic() + 2.0
        while True:
            rid = new_run_id()
            if rid > _last_id:
                break
            prefix, suffix = _last_id[:-6], int(_last_id[-6:], 16)
            bumped = suffix + 1 + secrets.randbelow(4096)
            if bumped < 16**6:
                rid = f"{prefix}{bumped:06x}"
                break
            if time.monotonic() > deadline:  # clock went back far: unique is what matters
                break
            time.sleep(0.01)  # this second's ids are used up: wait for the next second
        _last_id = max(_last_id, rid)
        return rid


def submit(settings: Settings, specs: Sequence[RunSpec]) -> list[str]:
    """Queue one run per spec; return their run ids in the same order.

    Safe from many threads and processes at once: each folder is created with an
    exclusive ``mkdir`` (a clash just takes another id) and its ``status.json`` is
    written atomically after ``spec.json``, so a worker never sees a half-made job.
    """
    ids: list[str] = []
    for spec in specs:
        for _attempt in range(50):
            rid = _next_run_id()
            try:
                folder = RunFolder.prepare(settings.runs_dir, spec, rid)
            except StoreError as exc:
                if isinstance(exc.__cause__, FileExistsError):
                    continue
                raise
            ids.append(folder.run_id)
            break
        else:
            raise StoreError(f"could not create a new run folder in {settings.runs_dir}")
    return ids


# --- folders ------------------------------------------------------------------------------


def _folder(settings: Settings, run_id: str) -> RunFolder | None:
    if not is_run_id(run_id):
        return None
    folder = RunFolder(settings.runs_dir / run_id)
    return folder if (folder.path / "spec.json").is_file() else None


def run_ids(settings: Settings) -> list[str]:
    """Every run folder's id, in run-id order (the queue's order); [] when unreadable."""
    try:
        return sorted(
            p.name for p in settings.runs_dir.iterdir() if not p.name.startswith(".") and p.is_dir()
        )
    except OSError:
        return []


# --- recovery and cancel ----------------------------------------------------------------


def recover_runs(settings: Settings) -> list[str]:
    """After a portal (re)start: every folder left ``running`` whose run process is gone
    is marked ``interrupted`` by its executor (its server group killed if alive). Runs
    whose process is alive are left alone; queued folders stay queued. Returns the ids it
    changed."""
    running: dict[str, list[RunFolder]] = defaultdict(list)
    for rid in run_ids(settings):
        folder = RunFolder(settings.runs_dir / rid)
        status = folder.status_or_empty()
        if status.state == "running":
            running[executor_of(status)].append(folder)
    return sorted(
        rid
        for name, folders in running.items()
        for rid in executor_class(name).recover(settings, folders)
    )


def cancel(settings: Settings, run_id: str) -> str:
    """Cancel a queued or running run; return a one-line message for the user.

    Queued: ``cancelled`` at once (the worker re-reads the state under the folder lock
    right before launching, so it never starts it). Running: a ``CANCEL`` file, passed on
    by the run's executor (locally: SIGTERM to the run process, which stops its server and
    records ``cancelled``).
    """
    folder = _folder(settings, run_id)
    if folder is None:
        return f"no run {run_id}"
    with folder.transition():
        status = folder.status_or_empty()
        if status.state == "queued":
            # The CANCEL file too: a run process started by a racing launcher stops at once.
            folder.request_cancel()
            folder.end("cancelled", "cancelled before it started")
            return f"{run_id} cancelled before it started"
        if status.state != "running":
            return f"{run_id} already ended ({status.state or 'unknown state'})"
        folder.request_cancel()
        return executor_class(executor_of(status)).cancel_running(settings, folder, status)
