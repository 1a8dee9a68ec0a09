"""The scheduler lines of SGLang logs as data: every real log in the fixtures, and the line
variants of other versions and devices (speculative, SWA/Mamba, npu/cpu graph, ranks)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from core.scheduler_log import SchedulerLineReader, parse_scheduler_lines, scheduler_summary

FIXTURES = Path(__file__).parent / "fixtures" / "sglang-logs"
LOGS = sorted(FIXTURES.glob("*.log"))


@pytest.mark.parametrize("log", LOGS, ids=[p.stem for p in LOGS])
def test_every_batch_line_of_every_real_log_is_read(log: Path) -> None:
    text = log.read_text(errors="replace")
    lines = parse_scheduler_lines(text)
    expected = text.count("Prefill batch") + text.count("Decode batch")
    assert len(lines) == expected
    for rec in lines:
        assert rec["ts"] is not None  # every real line carries its stamp
        assert isinstance(rec["running_req"], int) and isinstance(rec["queue_req"], int)
        assert 0 <= rec["token_usage"] <= 1


def test_the_h200_logs_say_whether_decode_ran_in_graphs() -> None:
    on = parse_scheduler_lines((FIXTURES / "30-v0517-smollm2-135m-h200-graphs-on.log").read_text())
    off = parse_scheduler_lines(
        (FIXTURES / "31-v0517-smollm2-135m-h200-graphs-off.log").read_text()
    )
    assert scheduler_summary(on)["decode_graph_share"] == 1.0
    assert scheduler_summary(off)["decode_graph_share"] == 0.0
    decode = next(r for r in on if r["kind"] == "decode")
    assert decode["tokens_used"] == 135 and decode["gen_throughput_tok_s"] == 11.36


def test_speculative_swa_npu_and_rank_variants() -> None:
    line = (
        "[2026-03-01 10:01:10 TP0 DP1] Decode batch [12], #running-req: 32, #full token: 40960, "
        "full token usage: 0.02, #swa token: 100, swa token usage: 0.01, accept len: 2.50, "
        "accept rate: 0.80, npu graph: True, gen throughput (token/s): 2950.31, #queue-req: 3"
    )
    (rec,) = parse_scheduler_lines(line)
    assert rec["rank"] == "TP0 DP1" and rec["ts"] == "2026-03-01 10:01:10"
    assert rec["tokens_used"] == 40960 and rec["swa_tokens_used"] == 100
    assert rec["accept_len"] == 2.5 and rec["graph"] is True and rec["queue_req"] == 3
    cpu = "[2026-03-01 10:00:55] Prefill batch. #new-seq: 1, #new-token: 7, cpu graph: False, "
    (p,) = parse_scheduler_lines(cpu + "#replay-token: 2, input throughput (token/s): 0.00")
    assert p["kind"] == "prefill" and p["graph"] is False and p["replay_token"] == 2


def test_ranked_servers_count_the_primary_rank_once() -> None:
    text = "\n".join(
        f"[2026-03-01 10:01:1{i} TP{t}] Decode batch, #running-req: {i}, #token: 9, "
        "token usage: 0.50, cuda graph: True, gen throughput (token/s): 10.0, #queue-req: 0"
        for i in range(3)
        for t in range(4)
    )
    s = scheduler_summary(parse_scheduler_lines(text))
    assert s["decode_batches"] == 3 and s["max_running_req"] == 2 and s["max_token_usage"] == 0.5


def test_a_line_split_across_chunks_is_read_once_whole() -> None:
    line = (
        "[2026-03-01 10:01:10] Decode batch, #running-req: 32, #token: 40960, token usage: 0.02, "
        "cuda graph: True, gen throughput (token/s): 2950.31, #queue-req: 0\n"
    )
    reader = SchedulerLineReader()
    assert reader.feed(line[:50]) == []
    (rec,) = reader.feed(line[50:])
    assert rec["running_req"] == 32 and reader.finish() == [rec]


def test_parse_log_json_reports_the_scheduler_lines() -> None:
    log = FIXTURES / "30-v0517-smollm2-135m-h200-graphs-on.log"
    out = subprocess.run(
        [sys.executable, "-m", "core", "parse-log", str(log)],
        capture_output=True,
        text=True,
        check=True,
    )
    facts = json.loads(out.stdout)
    assert facts["decode_batches"] == 1 and facts["prefill_batches"] == 1
    assert facts["last_gen_throughput_tok_s"] == 11.36
    assert facts["max_running_req"] == 1 and facts["max_token_usage"] == 0.0
    assert facts["kv_cache_tokens"] is not None  # the start-up facts are still there
