"""The run queue (core/executors/queue.py) on its own, with no worker: what ``submit`` writes,
which folders the queue reads, and cancel of a queued run. Runs that really execute:
tests/test_jobs.py (the queue and the worker together)."""

from __future__ import annotations

import threading

from core.config import RunSpec, ServerConfig
from core.executors.queue import cancel, recover_runs, run_ids, submit
from core.run_folder import RunFolder, RunStatus
from core.settings import Settings


def spec(**server: object) -> RunSpec:
    return RunSpec(server=ServerConfig(**{"engine": "sglang", "model": "/models/m", **server}))


def test_submit_queues_one_folder_per_spec_in_submission_order(settings: Settings) -> None:
    ids = submit(settings, [spec(), spec(cuda_graphs=False), spec()])
    assert len(set(ids)) == 3 and ids == sorted(ids)  # run-id order is the queue's order
    assert run_ids(settings) == ids
    for rid in ids:
        folder = RunFolder(settings.runs_dir / rid)
        st = folder.status_or_empty()
        assert (st.run_id, st.state, st.phase) == (rid, "queued", "queued")
        assert st.pid is None  # nothing runs it yet
        assert folder.spec().server.model == "/models/m"
    assert RunFolder(settings.runs_dir / ids[1]).spec().server.cuda_graphs is False


def test_ids_from_many_threads_are_distinct(settings: Settings) -> None:
    got: list[list[str]] = [[] for _ in range(4)]
    barrier = threading.Barrier(4)

    def submitter(i: int) -> None:
        barrier.wait()
        for _ in range(5):
            got[i] += submit(settings, [spec()])

    threads = [threading.Thread(target=submitter, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    every = [rid for ids in got for rid in ids]
    assert len(every) == len(set(every)) == 20
    assert all(ids == sorted(ids) for ids in got)  # each session's runs in its own order
    assert sorted(every) == run_ids(settings)


def test_the_queue_reads_run_folders_only(settings: Settings) -> None:
    assert run_ids(settings) == []  # no runs folder yet
    (rid,) = submit(settings, [spec()])
    (settings.runs_dir / ".tmp-import").mkdir()  # an import being written aside
    (settings.runs_dir / "notes.txt").write_text("not a run")
    assert run_ids(settings) == [rid]
    broken = RunFolder.create(settings.runs_dir, "20260101-000000-000000")
    (broken.path / "status.json").write_text("{not json")
    assert broken.status_or_empty() == RunStatus()  # unreadable: no state, never an error
    assert RunFolder(settings.runs_dir / "missing").status_or_empty().state is None


def test_cancel_a_queued_run_before_it_starts(settings: Settings) -> None:
    first, second = submit(settings, [spec(), spec()])
    assert cancel(settings, first) == f"{first} cancelled before it started"
    folder = RunFolder(settings.runs_dir / first)
    st = folder.read_status()
    assert (st.state, st.reason, st.phase) == ("cancelled", "cancelled before it started", "done")
    assert folder.cancel_requested  # a run process started by a racing launcher stops at once
    assert RunFolder(settings.runs_dir / second).status_or_empty().state == "queued"
    assert cancel(settings, first) == f"{first} already ended (cancelled)"
    assert cancel(settings, "no-such-run") == "no run no-such-run"
    assert cancel(settings, "../etc") == "no run ../etc"


def test_recover_runs_leaves_queued_and_ended_runs_alone(settings: Settings) -> None:
    queued, ended = submit(settings, [spec(), spec()])
    cancel(settings, ended)
    assert recover_runs(settings) == []
    assert RunFolder(settings.runs_dir / queued).status_or_empty().state == "queued"
    assert RunFolder(settings.runs_dir / ended).status_or_empty().state == "cancelled"
