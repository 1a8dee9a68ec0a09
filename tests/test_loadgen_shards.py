"""The sharded load generator (core/load/shards.py) against the fake SGLang: one point over several
worker processes keeps the plan's arrival schedule and concurrency cap exactly, merges its
records into one table, and fails cleanly when a worker dies."""

from __future__ import annotations

import itertools
import os
import signal
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from core.load.generator import LoadGenerator, LoadOptions
from core.load.schedule import SCHEDULE_SLACK_S, arrival_times
from core.load.shards import ClientWorkerDied
from core.records import RequestRecord, records_from_table, records_to_table
from tests.test_loadgen import fake_server, opts, prompts


def max_in_flight(records: list[RequestRecord]) -> int:
    """Most requests between send and end at once, from the records alone (an end at the
    same instant as a send frees its slot first)."""
    events = sorted(
        [(r.send_s, 1) for r in records] + [(r.end_s, -1) for r in records if r.end_s is not None]
    )
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    return peak


def test_sharded_point_keeps_schedule_and_cap(fake_sglang: Path, tmp_path: Path) -> None:
    n, cap, rate = 60, 5, 80.0
    with fake_server(tmp_path / "server.log") as base, LoadGenerator(base, cap, 30.0) as gen:
        o = replace(opts(base, cap, rate), workers=2)
        records, health = gen.run(o, prompts(n, out=8))
        pids = gen._shards.pids if gen._shards else []
        runtimes = gen._shards.runtimes if gen._shards else []
        assert runtimes == [(gen.event_loop, gen.json_parser)] * 2  # the parent's choice
    due = arrival_times(n, rate, o.seed)
    assert sorted(r.index for r in records) == list(range(n))  # each request once
    assert all(r.ok for r in records)
    # never sent before its arrival in the one schedule (all stamps on the point's clock)
    assert all(
        r.dispatch_s is not None and r.dispatch_s >= due[r.index] - SCHEDULE_SLACK_S
        for r in records
    )
    assert [r.send_s for r in records] == sorted(r.send_s for r in records)
    assert max_in_flight(records) <= cap
    assert len(health.workers) == 2 and health.as_dict()["client_workers"] == 2
    # merged records are the usual table
    assert records_from_table(records_to_table(records)) == records
    assert not any(
        psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids
    )


def test_every_worker_measures_with_the_parents_loop_and_parser(
    fake_sglang: Path, tmp_path: Path
) -> None:
    """SERVELAB_EVENT_LOOP / SERVELAB_JSON reach the workers through the pool, not through
    their environment: each says what it runs with when ready."""
    with (
        fake_server(tmp_path / "server.log") as base,
        LoadGenerator(base, 4, 30.0, event_loop="asyncio", json_parser="json") as gen,
    ):
        records, _ = gen.run(replace(opts(base, 4), workers=2), prompts(8, out=3))
        assert gen._shards is not None
        assert gen._shards.runtimes == [("asyncio", "json")] * 2
        assert (gen.event_loop, gen.json_parser) == ("asyncio", "json")
    assert all(r.ok for r in records)


def test_closed_loop_fills_the_global_cap_and_never_exceeds_it(
    fake_sglang: Path, tmp_path: Path
) -> None:
    """Five slots over two workers (3 + 2), every request sent at once: the records show
    five in flight at the peak (a worker with a free slot took the next request) and never
    six. A time-sized point sends the first k prompts in order."""
    with fake_server(tmp_path / "server.log") as base, LoadGenerator(base, 5, 30.0) as gen:
        closed = replace(opts(base, 5), workers=2)
        records, _ = gen.run(closed, prompts(40, out=10))
        assert max_in_flight(records) == 5
        timed = replace(closed, min_requests=10, min_steady_s=0.3)
        records, _ = gen.run(timed, prompts(400, out=5))
    assert 10 <= len(records) < 400
    assert sorted(r.index for r in records) == list(range(len(records)))
    assert max_in_flight(records) <= 5


def test_a_dying_worker_fails_the_point_and_leaves_no_process(
    fake_sglang: Path, tmp_path: Path
) -> None:
    with fake_server(tmp_path / "server.log") as base, LoadGenerator(base, 4, 30.0) as gen:
        o: LoadOptions = replace(opts(base, 4), workers=2)
        gen.run(o, prompts(4, out=2))  # workers started and warm
        assert gen._shards is not None
        pids = gen._shards.pids
        victim = pids[1]

        def kill_one(done: int, _total: int) -> None:
            if psutil.pid_exists(victim):
                os.kill(victim, signal.SIGKILL)

        with pytest.raises(ClientWorkerDied, match=r"worker 1 .*killed by SIGKILL"):
            gen.run(o, prompts(200, out=20), on_done=kill_one)
        for pid in pids:
            assert (
                not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
            )
        # the generator can still run the next point (on fresh workers)
        records, _ = gen.run(o, prompts(8, out=2))
        assert all(r.ok for r in records)


def test_a_cancelled_sharded_point_stops_every_worker_and_says_so(
    fake_sglang: Path, tmp_path: Path
) -> None:
    stop = [False]

    def on_done(done: int, _total: int) -> None:
        stop[0] = done >= 4  # the user presses Cancel after a few requests

    with fake_server(tmp_path / "server.log") as base, LoadGenerator(base, 4, 30.0) as gen:
        o = replace(opts(base, 4), workers=2, should_stop=lambda: stop[0])
        records, _ = gen.run(o, prompts(400, out=20), on_done=on_done)
    assert len(records) < 400  # the rest were never sent
    assert any(r.error == "cancelled" for r in records)
    assert sum(r.ok for r in records) >= 4


@pytest.mark.parametrize(("given", "kept"), [(1, 1), ("4", 4), ("auto", "auto"), ("AUTO", "auto")])
def test_client_workers_is_a_count_or_auto(given: object, kept: object) -> None:
    from core.config import parse_spec

    assert parse_spec({"plan": {"client_workers": given}}).plan.client_workers == kept
    assert parse_spec({}).plan.client_workers == 1  # old plans: one process, as before


@pytest.mark.parametrize("bad", [0, 257, 2.5, "many", True])
def test_bad_client_workers_names_the_field_and_the_fix(bad: object) -> None:
    from core.config import parse_spec
    from core.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        parse_spec({"plan": {"client_workers": bad}})
    assert err.value.field == "plan.client_workers" and "or auto" in str(err.value)


@pytest.mark.parametrize("workers", [1, 2])
def test_trace_arrivals_are_kept_open_loop_in_one_process_or_several(
    fake_sglang: Path, tmp_path: Path, workers: int
) -> None:
    """A trace's own arrival times, no cap: every request is due at its time (recorded as
    scheduled_s), never sent before it, and the point counts its scheduled sends."""
    due = [0.0, 0.0, 0.02, 0.05, 0.3, 0.31]
    with fake_server(tmp_path / "server.log") as base, LoadGenerator(base, 8, 30.0) as gen:
        o = replace(opts(base, 1), concurrency=None, arrivals_s=tuple(due), workers=workers)
        records, health = gen.run(o, prompts(len(due), out=3))
    assert sorted(r.index for r in records) == list(range(len(due)))
    assert all(r.ok for r in records)
    assert {r.index: r.scheduled_s for r in records} == dict(enumerate(due))
    assert all(
        r.dispatch_s is not None and r.dispatch_s >= due[r.index] - SCHEDULE_SLACK_S
        for r in records
    )
    assert health.scheduled_sends == len(due)
    assert health.as_dict()["send_late_ms_p99"] is not None
    # the records table keeps the new columns
    assert records_from_table(records_to_table(records)) == records


def test_a_point_sent_at_once_has_no_arrival_times_to_keep(
    fake_sglang: Path, tmp_path: Path
) -> None:
    with fake_server(tmp_path / "server.log") as base, LoadGenerator(base, 4, 30.0) as gen:
        records, health = gen.run(opts(base, 2), prompts(4, out=2))
    assert all(r.scheduled_s is None for r in records)
    assert health.scheduled_sends == 0 and not health.as_dict()["client_sent_late"]


def test_sessions_send_each_turn_with_the_real_answers_so_far(
    fake_sglang: Path, tmp_path: Path
) -> None:
    """Two sessions of three turns, one session at a time: each turn's request carries the
    conversation so far. The fake counts every word of every message, so the server's
    prompt count grows by each answer (4 words) and the new user turn (3 words)."""
    from core.load.prompts import Prompt

    user = [Prompt(text=" alpha bravo charlie", prompt_tokens=3, output_len=4)] * 6
    with fake_server(tmp_path / "server.log") as base, LoadGenerator(base, 4, 30.0) as gen:
        o = replace(opts(base, 1), sessions=((0, 1, 2), (3, 4, 5)), workers=2)
        records, _ = gen.run(o, user)
    assert all(r.ok for r in records)
    by_index = sorted(records, key=lambda r: r.index)
    assert [(r.session, r.turn) for r in by_index] == [(k, t) for k in (0, 1) for t in (0, 1, 2)]
    assert [r.prompt_tokens for r in by_index] == [3, 10, 17] * 2  # user + answers so far
    assert [r.prompt_tokens_server for r in by_index] == [3, 10, 17] * 2
    # one session at a time (the cap), each turn after the previous answer ended
    ordered = sorted(records, key=lambda r: r.send_s)
    assert all(
        a.end_s is not None and b.dispatch_s is not None and a.end_s <= b.dispatch_s
        for a, b in itertools.pairwise(ordered)
    )
