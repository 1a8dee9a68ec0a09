"""core/engines/vllm_log.py against logs in vLLM 0.26's line formats (tests/fixtures/vllm-logs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.engines.vllm_log import (
    LOG_FACT_KEYS,
    graph_runtime_modes,
    parse_stats_lines,
    parse_vllm_log,
)

LOGS = Path(__file__).parent / "fixtures" / "vllm-logs"


def _read(name: str) -> str:
    return (LOGS / name).read_text()


def test_graphs_on_start_up_facts() -> None:
    facts = parse_vllm_log(_read("v026-graphs-on.log"))
    assert list(facts) == list(LOG_FACT_KEYS)
    assert facts["vllm_version"] == "0.26.0"
    assert facts["cudagraph_mode"] == "FULL_AND_PIECEWISE"
    assert facts["compilation_mode"] == "VLLM_COMPILE"
    assert facts["cuda_graph_capture_sizes"] == [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64]
    assert facts["cuda_graph_enabled"] is True
    assert facts["enforce_eager"] is False
    assert facts["prefix_caching"] is True
    assert facts["attention_backend"] == "FLASH_ATTN"
    assert (facts["weight_mem_gb"], facts["load_weight_s"]) == (14.99, 1.734512)
    assert facts["kv_cache_gb"] == 107.42
    assert facts["kv_cache_tokens"] == 879_952
    assert facts["max_model_len"] == 131072 and facts["max_concurrency"] == 6.71
    assert (facts["graph_mem_gb"], facts["cuda_graph_capture_s"]) == (0.51, 6.0)
    assert facts["graph_memory_profiled"] is True
    assert facts["gpu_memory_utilization"] == 0.9
    assert facts["gpu_memory_utilization_without_graphs"] == 0.8964
    assert (facts["init_engine_s"], facts["compile_s"]) == (28.4, 14.02)
    assert facts["ready"] is True and facts["failure"] is None
    assert facts["stats_lines"] == 2


def test_a_live_0_26_server_log_from_the_lent_h100() -> None:
    """The first real vLLM 0.26.0 start-up (H100 80GB, Llama-3.1-8B shape, dummy weights,
    --gpu-memory-utilization 0.85, default graphs; 2026-12-06): the hand-written formats
    hold, and 0.26's V2 model runner states the budget's split (graph memory included) in a
    line the hand-written fixtures lacked."""
    facts = parse_vllm_log(_read("v026-h100-live.log"))
    assert facts["vllm_version"] == "0.26.0" and facts["max_model_len"] == 4096
    assert facts["cudagraph_mode"] == "FULL_AND_PIECEWISE" and facts["cuda_graph_enabled"]
    assert facts["attention_backend"] == "FLASH_ATTN"
    assert (facts["weight_mem_gb"], facts["load_weight_s"]) == (15.0, 2.265426)
    assert (facts["kv_cache_gb"], facts["kv_cache_tokens"]) == (50.97, 417_536)
    assert facts["max_concurrency"] == 101.94
    assert (facts["graph_mem_gb"], facts["cuda_graph_capture_s"]) == (0.98, 4.0)
    assert facts["graph_memory_profiled"] is True and facts["gpu_memory_utilization"] == 0.85
    assert (facts["activation_peak_gb"], facts["non_torch_mem_gb"]) == (1.1, 0.22)
    assert facts["over_budget_gb"] == 0.97  # 15.0 + 1.1 + 0.22 + 0.98 + 50.97 - 67.3
    assert (facts["init_engine_s"], facts["compile_s"]) == (108.03, 16.52)
    assert facts["ready"] is True and facts["failure"] is None
    assert len(facts["cuda_graph_capture_sizes"]) == 51  # 1 … 512, as the capture bars count


def test_on_the_live_v2_runner_graphs_cost_no_kv_pool_they_go_beyond_the_fraction() -> None:
    """The same shape, fraction and machine with -cc.cudagraph_mode=NONE (2026-12-06, the
    vLLM graphs A/B in data/demo): 0.26's V2 runner sizes the KV cache before it captures, so
    both arms get 417,536 tokens and the graphs-on server holds its 0.98 GiB of graphs beyond
    the 0.85 it was asked for; the graphs-off server spends the budget to the rounding."""
    on = parse_vllm_log(_read("v026-h100-live.log"))
    off = parse_vllm_log(_read("v026-h100-live-graphs-off.log"))
    assert off["cudagraph_mode"] == "NONE" and off["cuda_graph_enabled"] is False
    assert off["graph_mem_gb"] is None
    assert off["kv_cache_tokens"] == on["kv_cache_tokens"] == 417_536
    assert off["over_budget_gb"] is not None and abs(off["over_budget_gb"]) <= 0.05
    assert on["over_budget_gb"] == pytest.approx(on["graph_mem_gb"], abs=0.05)


def test_graphs_off_states_no_capture_and_a_larger_pool() -> None:
    """The V1 runner's profiling line (hand-written from the 0.26.0 source): there the
    graphs' memory comes out of the KV budget."""
    on, off = (
        parse_vllm_log(_read("v026-graphs-on.log")),
        parse_vllm_log(_read("v026-graphs-off.log")),
    )
    assert off["cudagraph_mode"] == "NONE"
    assert off["cuda_graph_enabled"] is False
    assert off["graph_mem_gb"] is None and off["graph_memory_profiled"] is None
    assert off["cuda_graph_capture_sizes"] == []
    assert off["kv_cache_tokens"] > on["kv_cache_tokens"]  # graph memory comes out of the KV budget


def test_stats_lines_with_and_without_preemptions() -> None:
    rows = parse_stats_lines(_read("v026-graphs-on.log"))
    assert rows[0] == {
        "prompt_tok_s": 1638.4,
        "gen_tok_s": 3120.7,
        "running": 64,
        "waiting": 0,
        "preemptions": 0,
        "kv_usage": 0.019,
        "prefix_hit_rate": 0.0,
    }
    assert (rows[1]["waiting"], rows[1]["preemptions"], rows[1]["prefix_hit_rate"]) == (4, 2, 0.125)


def test_cudagraph_metrics_tables_are_counted_per_runtime_mode() -> None:
    assert graph_runtime_modes(_read("v026-graphs-on.log")) == {
        "FULL": 2480,
        "PIECEWISE": 12,
        "NONE": 3,
    }
    assert graph_runtime_modes(_read("v026-graphs-off.log")) == {}


def test_a_failed_start_is_labelled() -> None:
    facts = parse_vllm_log(_read("v026-no-kv-memory.log"))
    assert facts["failure"] == "no-memory-for-kv-cache"
    assert facts["ready"] is False and facts["kv_cache_tokens"] is None


def test_blank_or_foreign_text_states_nothing() -> None:
    for text in ("", "INFO some other server\n" * 3):
        facts = parse_vllm_log(text)
        assert all(facts[k] is None for k in LOG_FACT_KEYS if k not in ("ready", "stats_lines"))
        assert facts["ready"] is False and facts["stats_lines"] == 0
