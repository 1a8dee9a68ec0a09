"""parse_sglang_log against real public logs (tests/fixtures/sglang-logs) and against
hand-made 0.5.23 lines rendered from the reference's templates."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.engines.sglang_log import FAILURE_LABELS, LOG_FACT_KEYS, _parse, parse_sglang_log

FIXTURES = Path(__file__).parent / "fixtures" / "sglang-logs"
LOGS = sorted(FIXTURES.glob("*.log"))
METADATA_KEYS = {"source", "notes"}


def _read(path: Path) -> str:
    # newline="" keeps any \r exactly as the user pasted it.
    with path.open(encoding="utf-8", newline="") as f:
        return f.read()


def _expected(log: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(log.with_suffix(".expected.json").read_text("utf-8"))
    return data


def test_every_fixture_log_has_an_expected_file() -> None:
    assert len(LOGS) >= 4
    for log in LOGS:
        assert "source" in _expected(log)


@pytest.mark.parametrize("log", LOGS, ids=lambda p: p.stem)
def test_fixture_logs_match_expected(log: Path) -> None:
    expected = _expected(log)
    facts = _parse(_read(log))
    for key, value in expected.items():
        if key in METADATA_KEYS:
            continue
        assert key in facts, f"parser lacks key {key}"
        assert facts[key] == value, f"{key}: got {facts[key]!r}, expected {value!r}"


def test_fixture_06_extras() -> None:
    facts = parse_sglang_log(_read(FIXTURES / "06-v043post4-qwq32b-tp4-l4-full-ready.log"))
    assert facts["max_total_num_tokens"] == 46611
    assert facts["kv_cache_gb"] == pytest.approx(2.84)
    assert facts["graph_mem_gb"] == pytest.approx(0.93)
    assert facts["cuda_graph_capture_s"] == pytest.approx(7.23)
    assert facts["avail_mem_gb_after_kv_pool"] == pytest.approx(2.09)
    assert facts["startup_s"] == pytest.approx(29.0)  # 12:29:04 -> 12:29:33
    assert facts["mem_fraction_static"] == pytest.approx(0.85)
    assert facts["attention_backend"] == "flashinfer"


def test_fixture_24_extras() -> None:
    facts = parse_sglang_log(_read(FIXTURES / "24-v0510-qwen05b-tp1-disable-cuda-graph.log"))
    assert facts["available_gpu_mem_gb_final"] == pytest.approx(4.46)
    assert facts["load_weight_s"] == pytest.approx(0.41)
    assert facts["kv_cache_gb"] == pytest.approx(30.42)
    assert facts["startup_s"] is None  # never ready in this paste


# The reference's §2.2 example (tp=1: no tag), with the decode list written out in full.
BS_256 = [1, 2, 4, 8, 12, *range(16, 257, 8)]
V0523 = f"""\
[2026-03-01 10:00:05] server_args={{'model_path': 'Qwen/Qwen2-7B', 'tp_size': 1, \
'mem_fraction_static': 0.871, 'attention_backend': 'fa3', 'dp_size': 1}}
[2026-03-01 10:00:06] Load weight begin. avail mem=139.10 GB
[2026-03-01 10:00:12] Load weight end. elapsed=5.84 s, type=Qwen2ForCausalLM, \
avail mem=124.66 GB, mem usage=14.44 GB.
[2026-03-01 10:00:12] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 1934000, \
K size: 51.65 GB, V size: 51.65 GB
[2026-03-01 10:00:12] Memory pool end. avail mem=21.20 GB
[2026-03-01 10:00:13] Capture target prefill CUDA graph begin. backend=breakable, \
num_tokens=[4, 8, 12, 8192], avail mem=20.90 GB
[2026-03-01 10:00:40] Capture target prefill CUDA graph end. elapsed=27.10 s, \
mem usage=0.85 GB, avail mem=20.05 GB.
[2026-03-01 10:00:40] Capture target decode CUDA graph begin. backend=full, \
num_tokens_per_req=1, avail mem=20.05 GB
[2026-03-01 10:00:52] Capture target decode CUDA graph end. bs={BS_256}, elapsed=11.90 s, \
mem usage=1.12 GB, avail mem=18.93 GB.
[2026-03-01 10:00:53] max_total_num_tokens=1934000, chunked_prefill_size=8192, \
max_prefill_tokens=16384, max_running_requests=4096, context_len=32768, \
available_gpu_mem=18.80 GB
[2026-03-01 10:00:54] INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)
[2026-03-01 10:00:55] Prefill batch, #new-seq: 1, #new-token: 7, #cached-token: 0, \
token usage: 0.00, #running-req: 0, #queue-req: 0, #pending-token: 0, cuda graph: True, \
input throughput (token/s): 0.00
[2026-03-01 10:00:56] INFO:     127.0.0.1:40014 - "POST /generate HTTP/1.1" 200 OK
[2026-03-01 10:00:56] The server is fired up and ready to roll!
[2026-03-01 10:01:10] Decode batch, #running-req: 32, #token: 40960, token usage: 0.02, \
cuda graph: True, gen throughput (token/s): 2950.31, #queue-req: 0
[2026-03-01 10:01:20] Decode batch [80], #running-req: 32, #token: 41984, token usage: 0.02, \
cuda graph: True, gen throughput (token/s): 3011.50, #queue-req: 0
"""


def test_v0523_single_gpu() -> None:
    facts = _parse(V0523)
    assert facts["tp_size"] == 1
    assert facts["kv_cache_tokens"] == 1934000
    assert facts["kv_cache_gb"] == pytest.approx(103.3)
    assert facts["weight_mem_gb"] == pytest.approx(14.44)
    assert facts["avail_mem_gb_after_load"] == pytest.approx(124.66)
    assert facts["avail_mem_gb_after_graph"] == pytest.approx(18.93)  # after the decode graph
    assert facts["graph_mem_gb"] == pytest.approx(0.85 + 1.12)
    assert facts["cuda_graph_capture_s"] == pytest.approx(27.10 + 11.90)
    assert facts["cuda_graph_enabled"] is True
    assert facts["cuda_graph_batch_sizes"] == BS_256
    assert len(BS_256) == 36  # the reference: 36 sizes for max_bs=256
    assert facts["max_total_num_tokens"] == 1934000
    assert facts["available_gpu_mem_gb_final"] == pytest.approx(18.80)
    assert facts["ready"] is True
    assert facts["startup_s"] == pytest.approx(51.0)
    assert facts["failure"] is None
    assert facts["decode_lines"] == 2
    assert facts["last_gen_throughput"] == pytest.approx(3011.50)
    assert facts["mem_fraction_static"] == pytest.approx(0.871)
    assert facts["attention_backend"] == "fa3"


def test_real_v0517_extras() -> None:
    """The real 0.5.17 start-up logs from the H200 (fixtures 30/31): memory by weights, KV
    pool and graphs, capture time and the resolved arguments."""
    on = _parse((FIXTURES / "30-v0517-smollm2-135m-h200-graphs-on.log").read_text())
    assert on["kv_cache_gb"] == pytest.approx(2 * 58.99)
    assert on["avail_mem_gb_after_kv_pool"] == pytest.approx(20.68)
    assert on["graph_mem_gb"] == pytest.approx(0.35 + 0.06)  # prefill + decode capture
    assert on["cuda_graph_capture_s"] == pytest.approx(5.71 + 2.09)
    assert on["available_gpu_mem_gb_final"] == pytest.approx(19.93)
    assert on["mem_fraction_static"] == pytest.approx(0.85)
    assert on["attention_backend"] == "triton"
    assert on["context_len"] == 8192
    off = _parse((FIXTURES / "31-v0517-smollm2-135m-h200-graphs-off.log").read_text())
    assert off["graph_mem_gb"] is None and off["cuda_graph_capture_s"] is None
    assert off["available_gpu_mem_gb_final"] == pytest.approx(20.34)


def test_v0517_batch_sizes_need_the_end_line() -> None:
    # 0.5.17 names the sizes when capture begins; only a finished capture captured them.
    begin = (
        "[2026-11-30 23:53:58] Capture target decode CUDA graph begin. backend=full, "
        "num_tokens_per_req=1, bs=[1, 2, 4, 8], avail mem=20.00 GB\n"
    )
    end = (
        "[2026-11-30 23:54:00] Capture target decode CUDA graph end. elapsed=2.09 s, "
        "mem usage=0.06 GB, avail mem=19.93 GB.\n"
    )
    assert _parse(begin + end)["cuda_graph_batch_sizes"] == [1, 2, 4, 8]
    assert _parse(begin)["cuda_graph_batch_sizes"] is None
    assert _parse(begin.replace("decode", "prefill") + end)["cuda_graph_batch_sizes"] is None


def test_abbreviated_batch_list_is_not_guessed() -> None:
    text = (
        "[2026-03-01 10:00:52] Capture target decode CUDA graph end. "
        "bs=[1, 2, 4, ..., 256], elapsed=11.90 s, mem usage=1.12 GB, avail mem=18.93 GB.\n"
    )
    facts = _parse(text)
    assert facts["cuda_graph_batch_sizes"] is None
    assert facts["avail_mem_gb_after_graph"] == pytest.approx(18.93)


def test_milliseconds_and_rank_tags() -> None:
    lines = [
        f"[2026-03-01 10:00:12.{ms:03d} DP0 TP{r}] Load weight end. elapsed=5.84 s, "
        f"type=X, avail mem={60 + r}.00 GB, mem usage=14.44 GB."
        for r, ms in ((3, 5), (1, 120), (0, 999), (2, 7))
    ]
    lines.append("[2026-03-01 10:00:14.250] The server is fired up and ready to roll!")
    facts = _parse("\n".join(lines))
    assert facts["tp_size"] == 4
    assert facts["avail_mem_gb_after_load"] == pytest.approx(60.0)  # TP0's, not the first line's
    assert facts["startup_s"] == pytest.approx(2.245)


def test_only_tp0_visible_leaves_tp_size_unknown() -> None:
    facts = _parse("[2024-11-08 04:43:13 TP0] Memory pool end. avail mem=4.14 GB\n")
    assert facts["tp_size"] is None


def test_non_primary_ranks_must_agree() -> None:
    text = "".join(
        f"[2025-10-16 09:06:22 TP{rank}] Load weight end. type=X, "
        f"avail mem={avail} GB, mem usage=1.0 GB.\n"
        for rank, avail in ((5, "10.00"), (1, "11.00"))
    )
    facts = _parse(text)
    assert facts["avail_mem_gb_after_load"] is None  # TP0 not shown and the ranks differ
    assert facts["weight_mem_gb"] == pytest.approx(1.0)  # they agree on this one


def test_carriage_return_tqdm_and_glued_lines() -> None:
    text = (
        "[2026-03-01 10:00:13] Capture target decode CUDA graph begin. backend=full, "
        "num_tokens_per_req=1, avail mem=20.05 GB\n"
        "Capturing batches (bs=256 avail_mem=20.10 GB):   0%|          | 0/36 [00:00<?, ?it/s]"
        "\rCapturing batches (bs=1 avail_mem=19.00 GB): 100%|##########| 36/36 [00:11<00:00]"
        "\r[2026-03-01 10:00:52] Capture target decode CUDA graph end. bs=[1, 2, 4], "
        "elapsed=11.90 s, mem usage=1.12 GB, avail mem=18.93 GB.\n"
        '[2026-03-01 10:00:56] INFO:     127.0.0.1:40014 - "POST /generate HTTP/1.1" 200 OK'
        "[2026-03-01 10:00:56] The server is fired up and ready to roll!\r\n"
    )
    facts = _parse(text)
    assert facts["cuda_graph_batch_sizes"] == [1, 2, 4]
    assert facts["avail_mem_gb_after_graph"] == pytest.approx(18.93)
    assert facts["ready"] is True
    assert facts["tp_size"] == 1


def test_post_capture_kv_sizing_wins_over_va_upper_bound() -> None:
    text = (
        "[2026-03-01 10:00:12] KV Cache VA upper bound. dtype: torch.bfloat16, "
        "#tokens: 9999999, KV size: 500.00 GB\n"
        "[2026-03-01 10:00:53] Post-capture KV sizing: KV cache allocated. dtype: torch.bfloat16, "
        "#tokens: 1900000, KV size: 101.50 GB, avail mem=18.00 GB\n"
    )
    facts = _parse(text)
    assert facts["kv_cache_tokens"] == 1900000
    assert facts["kv_cache_gb"] == pytest.approx(101.5)


def test_old_formats() -> None:
    text = (
        "[gpu_id=0] Load weight end. type=Qwen2ForCausalLM, dtype=torch.bfloat16, "
        "avail mem=15.61 GB\n"
        "[gpu_id=1] Load weight end. type=Qwen2ForCausalLM, dtype=torch.bfloat16, "
        "avail mem=15.95 GB\n"
        "[gpu_id=0] Capture cuda graph begin. This can take up to several minutes.\n"
        "[2024-12-09 16:10:51 TP0] Capture cuda graph end. Time elapsed: 3.10 s. "
        "mem usage=0.50 GB. avail mem=1.20 GB.\n"
        "[2024-12-09 16:10:51 TP0] Capture cuda graph bs [1, 2, 4, 8]\n"
        "[2024-12-09 16:10:56 TP0] Decode batch. #running-req: 1, #token: 66, token usage: 0.00, "
        "gen throughput (token/s): 41.27, #queue-req: 0\n"
    )
    facts = _parse(text)
    assert facts["avail_mem_gb_after_load"] == pytest.approx(15.61)
    assert facts["weight_mem_gb"] is None  # not printed before 0.4
    assert facts["graph_mem_gb"] == pytest.approx(0.50)
    assert facts["avail_mem_gb_after_graph"] == pytest.approx(1.20)
    assert facts["cuda_graph_capture_s"] == pytest.approx(3.10)
    assert facts["cuda_graph_batch_sizes"] == [1, 2, 4, 8]
    assert facts["cuda_graph_enabled"] is True
    assert facts["decode_lines"] == 1
    assert facts["last_gen_throughput"] == pytest.approx(41.27)
    assert facts["tp_size"] is None  # gpu ids are not ranks; only TP0 tagged


@pytest.mark.parametrize(
    ("text", "label"),
    [
        (
            "[2026-01-10 13:23:27] Initialization failed. warmup error: Traceback (most recent "
            "call last):\nAssertionError: res=<Response [502]>\n",
            "warmup-failed",
        ),
        (
            "[2024-03-22 10:00:00 TP0] RuntimeError: Not enough memory. Please try to increase "
            "--mem-fraction-static.\n",
            "kv-cache-profiled-tokens-negative",
        ),
        (
            "[2025-12-03 15:29:24 TP0] Detected errors during sampling! NaN in the logits.\n",
            "nan-in-logits",
        ),
        (
            "[2025-01-01 00:00:00 TP0] Capture cuda graph begin. "
            "This can take up to several minutes. "
            "avail mem=1.00 GB\n[2025-01-01 00:00:01 TP0] Scheduler hit an exception: Traceback "
            '(most recent call last):\n  File "x.py", line 1, in capture\n'
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n",
            "oom-during-cuda-graph-capture",
        ),
        (
            "[2025-01-01 00:00:00 TP0] Capture cuda graph begin. "
            "This can take up to several minutes. "
            "avail mem=1.00 GB\n[2025-01-01 00:00:01 TP0] Scheduler hit an exception: Traceback "
            "(most recent call last):\nRuntimeError: shape mismatch\n",
            "exception-during-cuda-graph-capture",
        ),
        (
            "Exception: Capture cuda graph failed: Triton compilation error\n",
            "exception-during-cuda-graph-capture",
        ),
        (
            "Exception: Capture cuda graph failed:\nCUDA out of memory. Tried to allocate 1 GiB\n",
            "oom-during-cuda-graph-capture",
        ),
    ],
)
def test_failure_labels(text: str, label: str) -> None:
    assert label in FAILURE_LABELS
    assert _parse(text)["failure"] == label


def test_oom_after_capture_is_not_a_capture_failure() -> None:
    text = (
        "[2025-01-01 00:00:00 TP0] Capture cuda graph begin. avail mem=1.00 GB\n"
        "[2025-01-01 00:00:05 TP0] max_total_num_tokens=100, max_prefill_tokens=16384, "
        "max_running_requests=5, context_len=2048\n"
        "[2025-01-01 00:00:09 TP0] torch.OutOfMemoryError: CUDA out of memory.\n"
    )
    assert _parse(text)["failure"] is None


def test_disable_cuda_graph_in_server_args() -> None:
    old = "[2025-03-08 12:29:04] server_args=ServerArgs(tp_size=2, disable_cuda_graph=True)\n"
    assert _parse(old)["cuda_graph_enabled"] is False
    new = (
        "[2026-03-01 10:00:05] server_args={'tp_size': 1, 'cuda_graph_backend_decode': "
        "'disabled', 'disable_prefill_cuda_graph': True}\n"
    )
    assert _parse(new)["cuda_graph_enabled"] is False
    assert (
        _parse("[2026-03-01 10:00:05] server_args={'tp_size': 1}\n")["cuda_graph_enabled"] is None
    )


def test_check_env_version_line() -> None:
    assert _parse("Python: 3.11\nsglang: 0.5.10.post1\n")["sglang_version"] == "0.5.10.post1"


def test_empty_and_binary_noise() -> None:
    for text in (
        "",
        "\x00\x1b[31m\r\r\n",
        "[9999-99-99 99:99:99] The server is fired up and ready to roll!",
    ):
        facts = parse_sglang_log(text)
        assert set(LOG_FACT_KEYS) <= facts.keys()
    assert parse_sglang_log("")["ready"] is False
    assert parse_sglang_log("")["decode_lines"] == 0


def test_huge_numbers_do_not_raise() -> None:
    facts = _parse(
        "[2026-03-01 10:00:12] KV Cache is allocated. #tokens: " + "9" * 5000 + "\n"
        "gen throughput (token/s): " + "1" * 5000 + "\n"
    )
    assert facts["kv_cache_tokens"] is None


_REAL_LINES = [line for log in LOGS for line in _read(log).splitlines(keepends=True)]
_REAL_LINES += V0523.splitlines(keepends=True)
_SEPARATORS = st.sampled_from(["", "\n", "\r", "\r\n", " ", "]", "["])


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_random_text_never_raises(text: str) -> None:
    facts = _parse(text)  # the unguarded parser: a bug must show here, not be swallowed
    assert set(LOG_FACT_KEYS) <= facts.keys()
    assert facts["failure"] is None or facts["failure"] in FAILURE_LABELS


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(_REAL_LINES), _SEPARATORS, st.integers(min_value=0, max_value=200)
        ),
        max_size=40,
    )
)
def test_mixtures_of_real_lines_never_raise(parts: list[tuple[str, str, int]]) -> None:
    # Lines shuffled, glued, and cut at random points, as pasted logs often are.
    text = "".join(line[:cut] if cut < 100 else line + sep for line, sep, cut in parts)
    facts = _parse(text)
    assert set(LOG_FACT_KEYS) <= facts.keys()
    assert isinstance(facts["ready"], bool)
    assert isinstance(facts["decode_lines"], int)
    assert facts["tp_size"] is None or facts["tp_size"] >= 1
