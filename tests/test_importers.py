"""core.interop.importers against the real public samples (tests/fixtures/bench-outputs and
sglang-logs, each with its .expected.json), against the label and format variants real
users produce, and against hostile text (hypothesis): nothing crashes, what is not
understood is reported, and importing the same results twice stores one run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.interop.importers import Given, parse_text, plan_runs, store_runs
from core.interop.importers.vocab import METRIC_KEYS, label_key, metric_for_key
from core.run_folder import RunFolder
from core.settings import Settings
from core.store import Catalog

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "tests" / "fixtures" / "bench-outputs"
LOGS = REPO / "tests" / "fixtures" / "sglang-logs"
BENCH_FILES = sorted(BENCH.glob("*.txt"))
LOG_FILES = sorted(LOGS.glob("*.log"))
META = {"source", "notes", "preamble", "format", "records"}


def _read(path: Path) -> str:
    with path.open(encoding="utf-8", newline="") as f:
        return f.read()


def _expected(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.with_suffix(".expected.json").read_text("utf-8"))
    return data


def _import(path: Path, settings: Settings, **kw: Any) -> list[RunFolder]:
    parsed = parse_text(_read(path), path.name, path.read_bytes())
    planned = plan_runs(parsed, settings, **kw)
    store_runs(planned, settings)
    return [RunFolder(settings.runs_dir / p.run_id) for p in planned]


def test_every_sample_has_an_expected_file_with_its_source() -> None:
    assert len(BENCH_FILES) >= 3 and len(LOG_FILES) >= 4
    for path in [*BENCH_FILES, *LOG_FILES]:
        # A user's post (its address) or ServeLab's own real-server capture (the doc that
        # records the command, versions and GPU).
        source = _expected(path)["source"]
        assert source.startswith("https://") or "docs/BENCHMARKS.md" in source, path


@pytest.mark.parametrize("path", BENCH_FILES, ids=lambda p: p.stem)
def test_bench_output_samples_import_with_their_expected_values(
    path: Path, settings: Settings
) -> None:
    expected = _expected(path)
    (folder,) = _import(path, settings)
    spec, status = folder.read("spec.json"), folder.status()
    assert status["state"] == "succeeded" and status["origin"] == "import"
    assert spec["origin"] == "import" and spec["import"]["source_file"] == path.name
    assert not (folder.path / "points" / "000" / "records.parquet").exists()
    summaries = folder.point_summaries()
    if "records" in expected:  # JSONL: every record exactly as parsed, Infinity as "inf"
        assert [s["values_as_read"] for s in summaries] == expected["records"]
        assert spec["import"]["format"] == "sglang-bench-jsonl"
        assert summaries[0]["point"]["request_rate"] == "inf"
        read = expected["records"]
    else:
        (s,) = summaries
        for key, value in expected.items():
            if key not in META:
                assert s["values_as_read"].get(key, "MISSING") == value, key
        assert s["preamble"] == expected.get("preamble", {})
        read = [{k: v for k, v in expected.items() if k not in META}]
    for s, values in zip(summaries, read, strict=True):
        m = s["metrics"]
        assert set(m) == set(METRIC_KEYS)  # the same shape as a launched run's point
        for key, value in values.items():
            name = metric_for_key(key, table="records" not in expected)
            if name is not None:
                assert m[name] == value, (key, name)
        # every unknown is named, nothing measured is listed as unknown
        assert {k for k, v in m.items() if v is None} <= set(s["unknown"])
        assert "records" in s["unknown"] and s["has_records"] is False


def test_sample_07_reads_as_sglang_with_its_load(settings: Settings) -> None:
    (folder,) = _import(BENCH / "07-sglang-v05-gptoss20b-input-output-header-lines.txt", settings)
    (s,) = folder.point_summaries()
    assert s["format"] == "sglang-bench-table"
    assert s["point"]["concurrency"] == 64 and s["point"]["request_rate"] == 20.0
    assert s["metrics"]["output_throughput"] == 282.29
    assert s["metrics"]["max_output_tokens_per_s"] == 1205.0
    assert s["metrics"]["mean_e2e_ms"] == 33525.41
    assert {"point.input_len", "point.output_len", "p90_ttft_ms"} <= set(s["unknown"])
    assert folder.read("spec.json")["server"] == {"engine": "sglang"}  # backend sglang


def test_sample_11_is_vllm_and_states_no_load(settings: Settings) -> None:
    (folder,) = _import(BENCH / "11-vllm-benchmark-serving-qwen2-7b-random-1024.txt", settings)
    (s,) = folder.point_summaries()
    assert s["format"] == "vllm-bench-table"
    assert s["metrics"]["total_throughput"] == 436.07  # "Total Token throughput"
    assert {"point.concurrency", "point.request_rate"} <= set(s["unknown"])
    assert "engine" not in folder.read("spec.json")["server"]  # not guessed


@pytest.mark.parametrize("path", LOG_FILES, ids=lambda p: p.stem)
def test_sglang_log_samples_import_with_their_expected_facts(
    path: Path, settings: Settings
) -> None:
    expected = _expected(path)
    (folder,) = _import(path, settings)
    report, facts = folder.read("import.json"), folder.read("facts.json")
    for key, value in expected.items():
        if key in ("source", "notes"):
            continue
        assert report["log_facts"][key] == value, key
        if key not in ("kv_cache_tokens", "sglang_version") or value is not None:
            assert facts[key] == value, key
    assert folder.point_summaries() == []
    status = folder.status()
    if expected["failure"]:
        assert status["state"] == "failed" and expected["failure"] in status["reason"]
    else:
        assert status["state"] == "succeeded"
    server = folder.read("spec.json")["server"]
    assert server["engine"] == "sglang"
    if expected["tp_size"] is not None:
        assert server["tp_size"] == expected["tp_size"]
    if expected["cuda_graph_enabled"] is not None:
        assert server["cuda_graphs"] is expected["cuda_graph_enabled"]


def test_a_log_and_a_result_in_one_text_make_one_run_with_both(settings: Settings) -> None:
    log = _read(LOGS / "06-v043post4-qwq32b-tp4-l4-full-ready.log")
    table = _read(BENCH / "07-sglang-v05-gptoss20b-input-output-header-lines.txt")
    parsed = parse_text(log + "\n" + table, "server-and-bench.txt")
    assert parsed.format == "sglang-bench-table+sglang-log"
    (run,) = plan_runs(parsed, settings)
    assert run.facts["kv_cache_tokens"] == 46611 and run.facts["tp_size"] == 4
    assert run.spec["server"]["model"] == "/home/model/Qwen/QwQ-32B"
    assert run.summaries[0]["metrics"]["output_throughput"] == 282.29


def test_a_separate_log_gives_the_facts_of_the_results(settings: Settings) -> None:
    log = parse_text(_read(LOGS / "24-v0510-qwen05b-tp1-disable-cuda-graph.log"), "srv.log")
    parsed = parse_text(
        _read(BENCH / "11-vllm-benchmark-serving-qwen2-7b-random-1024.txt"), "bench.txt"
    )
    (run,) = plan_runs(parsed, settings, log=log)
    assert run.facts["kv_cache_tokens"] == 2658165 and run.facts["cuda_graph_enabled"] is False
    assert run.spec["import"]["log_file"] == "srv.log"
    assert run.spec["server"]["cuda_graphs"] is False


# --- variants -------------------------------------------------------------------------------

OLD_SGLANG = """\
============ Serving Benchmark Result ============
Backend:                                 sglang-oai
Traffic request rate:                    inf
Max reqeuest concurrency:                not set
Successful requests:                     200
Benchmark duration (s):                  30.50
Total input tokens:                      51200
Total generated tokens:                  51200
Total generated tokens (retokenized):    51188
Request throughput (req/s):              6.56
Input token throughput (tok/s):          1678.69
Output token throughput (tok/s):         1678.69
Total throughput (tok/s):                3357.38
----------------End-to-End Latency----------------
Mean E2E Latency (ms):                   15000.12
Median E2E Latency (ms):                 15100.00
---------------Time to First Token----------------
Mean TTFT (ms):                          3000.00
Median TTFT (ms):                        2900.50
P99 TTFT (ms):                           6000.00
-----Time per Output Token (excl. 1st token)------
Mean TPOT (ms):                          47.00
Median TPOT (ms):                        46.00
P99 TPOT (ms):                           -0.00
---------------Inter-token Latency----------------
Mean ITL (ms):                           47.10
Median ITL (ms):                         45.00
P99 ITL (ms):                            120.00
==================================================
"""

VLLM_NEW = """\
Traffic request rate: 4.0
Burstiness factor: 1.0 (Poisson process)
Maximum request concurrency: 32
100%|██████████| 500/500 [02:10<00:00,  3.83it/s]
============ Serving Benchmark Result ============
Successful requests:                     498
Failed requests:                         2
Maximum request concurrency:             32
Request rate configured (RPS):           4.00
Benchmark duration (s):                  130.10
Total input tokens:                      510000
Total generated tokens:                  63744
Request throughput (req/s):              3.83
Output token throughput (tok/s):         489.96
Peak output token throughput (tok/s):    900.00
Peak concurrent requests:                40.00
Total Token throughput (tok/s):          4410.00
---------------Time to First Token----------------
Mean TTFT (ms):                          95.20
Median TTFT (ms):                        90.10
P50 TTFT (ms):                           90.10
P99 TTFT (ms):                           250.00
P99.9 TTFT (ms):                         400.00
---------------Inter-token Latency----------------
Mean ITL (ms):                           20.00
Median ITL (ms):                         19.50
P99 ITL (ms):                            60.00
----------------End-to-end Latency----------------
Mean E2EL (ms):                          2600.00
Median E2EL (ms):                        2550.00
P99 E2EL (ms):                           4100.00
Accuracy Rate (%):
==================================================
"""


def _one(text: str, settings: Settings, **kw: Any) -> dict[str, Any]:
    (run,) = plan_runs(parse_text(text, "t.txt"), settings, **kw)
    (s,) = run.summaries
    return s


def test_old_sglang_labels(settings: Settings) -> None:
    s = _one(OLD_SGLANG, settings)
    m = s["metrics"]
    assert m["total_throughput"] == 3357.38  # "Total throughput (tok/s)"
    assert s["values_as_read"]["total_throughput_tok_s"] == 3357.38
    assert s["point"]["concurrency"] is None and "point.concurrency" not in s["unknown"]
    assert s["values_as_read"]["max_request_concurrency"] is None  # "reqeuest", "not set"
    assert m["p99_tpot_ms"] == 0.0 and str(m["p99_tpot_ms"]) == "-0.0"
    assert m["median_e2e_ms"] == 15100.0 and m["total_output_tokens_retokenized"] == 51188
    assert s["format"] == "sglang-bench-table"


def test_vllm_labels_preamble_and_unread_rows(settings: Settings) -> None:
    s = _one(VLLM_NEW, settings)
    m = s["metrics"]
    assert s["format"] == "vllm-bench-table"
    assert s["point"]["concurrency"] == 32 and s["point"]["request_rate"] == 4.0
    assert s["preamble"] == {
        "traffic_request_rate": 4.0,
        "burstiness_factor": 1.0,
        "max_request_concurrency": 32,
    }
    assert m["completed"] == 498 and m["failed"] == 2 and m["num_requests"] == 500
    assert m["error_rate"] == pytest.approx(0.004) and s["point"]["num_prompts"] == 500
    assert m["median_e2e_ms"] == 2550.0 and m["p99_e2e_ms"] == 4100.0  # E2EL
    assert m["max_concurrent_requests"] == 40.0 and m["max_output_tokens_per_s"] == 900.0
    # percentiles ServeLab does not compute are kept, not renamed
    assert s["extra"] == {"p50_ttft_ms": 90.1, "p99_9_ttft_ms": 400.0, "burstiness_factor": 1.0}
    assert any("Accuracy Rate" in n for n in s["not_understood"])


def test_padding_prefixes_markdown_and_missing_header(settings: Settings) -> None:
    commented = "\n".join("# " + line for line in OLD_SGLANG.splitlines())
    assert _one(commented, settings)["metrics"]["median_ttft_ms"] == 2900.5
    headerless = "\n".join(OLD_SGLANG.splitlines()[1:-1])
    assert _one(headerless, settings)["metrics"]["median_ttft_ms"] == 2900.5
    crlf_padded = "\r\n".join("   " + line + "      " for line in OLD_SGLANG.splitlines())
    assert _one(crlf_padded, settings)["metrics"]["median_ttft_ms"] == 2900.5
    markdown = (
        "| Successful requests | 10 |\n|---|---|\n| Output token throughput (tok/s) "
        "| 218.04 |\n| Median TTFT (ms) | 2244.91 |\n"
    )
    m = _one(markdown, settings)["metrics"]
    assert m["output_throughput"] == 218.04 and m["median_ttft_ms"] == 2244.91
    missing = "\n".join(line for line in OLD_SGLANG.splitlines() if "TTFT" not in line)
    s = _one(missing, settings)
    assert s["metrics"]["median_ttft_ms"] is None and "median_ttft_ms" in s["unknown"]


def test_same_load_twice_is_two_runs_a_sweep_is_one(settings: Settings) -> None:
    two = plan_runs(
        parse_text(
            OLD_SGLANG + "\nsome prose\n" + OLD_SGLANG.replace("2900.50", "2500.00"),
            "before-after.txt",
        ),
        settings,
    )
    assert [len(r.summaries) for r in two] == [1, 1]
    sweep = OLD_SGLANG + OLD_SGLANG.replace("not set", "64").replace("2900.50", "2500.00")
    (run,) = plan_runs(parse_text(sweep, "sweep.txt"), settings)
    assert [s["point"]["concurrency"] for s in run.summaries] == [None, 64]
    split = plan_runs(parse_text(sweep, "sweep.txt"), settings, split=True)
    assert len(split) == 2


def _vllm_json(**over: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "date": "20250901-101010",
        "endpoint_type": "openai-chat",
        "backend": "openai-chat",
        "label": None,
        "model_id": "Qwen/Qwen2-7B-Instruct",
        "tokenizer_id": "Qwen/Qwen2-7B",
        "num_prompts": 100,
        "request_rate": "inf",
        "burstiness": 1.0,
        "max_concurrency": 8,
        "duration": 20.5,
        "completed": 100,
        "failed": 0,
        "total_input_tokens": 102400,
        "total_output_tokens": 12800,
        "request_throughput": 4.87,
        "request_goodput": None,
        "output_throughput": 624.3,
        "total_token_throughput": 5619.0,
        "max_output_tokens_per_s": 700.0,
        "max_concurrent_requests": 8,
        "mean_ttft_ms": 120.0,
        "median_ttft_ms": 110.0,
        "std_ttft_ms": 20.0,
        "p99_ttft_ms": 300.0,
        "p99.9_ttft_ms": 350.0,
        "mean_e2el_ms": 1600.0,
        "median_e2el_ms": 1590.0,
        "p99_e2el_ms": 2100.0,
        "ttfts": [0.1] * 100,
        "itls": [[0.01]] * 100,
        "custom_key": "x",
    }
    data.update(over)
    return data


def test_vllm_json_pretty_array_and_per_request_arrays(settings: Settings) -> None:
    text = json.dumps([_vllm_json(), _vllm_json(max_concurrency=16)], indent=2)
    (run,) = plan_runs(
        parse_text(text, "vllm.json"), settings, given=Given(input_len=1024, output_len=128)
    )
    s0, s1 = run.summaries
    assert (
        s0["format"] == "vllm-bench-json"
        and run.spec["server"]["model"] == "Qwen/Qwen2-7B-Instruct"
    )
    assert s0["point"] == {
        "concurrency": 8,
        "request_rate": "inf",
        "input_len": 1024,
        "output_len": 128,
        "num_prompts": 100,
    }
    assert s0["given"] == ["point.input_len", "point.output_len"]
    assert s1["point"]["concurrency"] == 16
    m = s0["metrics"]
    assert m["median_e2e_ms"] == 1590.0 and m["total_throughput"] == 5619.0
    assert m["error_rate"] == 0.0 and m["std_ttft_ms"] == 20.0
    notes = " ".join(s0["not_understood"])
    assert "custom_key" in notes and "per-request arrays" in notes and "100 requests" in notes
    assert "ttfts" not in s0["values_as_read"]
    assert "engine" not in run.spec["server"]  # openai-chat says nothing about the server


def test_sglang_jsonl_with_server_info_fills_facts_and_flags_random_lengths(
    settings: Settings,
) -> None:
    info = {
        "model_path": "/models/Llama-3-8B",
        "tp_size": 2,
        "mem_fraction_static": 0.88,
        "version": "0.4.6",
        "max_total_num_tokens": 654321,
        "attention_backend": "fa3",
        "cuda_graph_max_bs": 160,
        "disable_cuda_graph": False,
        "internal_states": [{"decode_cuda_graph_bs": [1, 2, 4, 8]}],
    }
    line = (
        f'{{"backend": "sglang", "dataset_name": "random", "request_rate": Infinity, '
        f'"max_concurrency": 32, "random_input_len": 1024, "random_output_len": 256, '
        f'"random_range_ratio": 0.0, "server_info": {json.dumps(info)}, "duration": 50.0, '
        f'"completed": 320, "total_input_tokens": 163840, "total_output_tokens": 40960, '
        f'"output_throughput": 819.2, "median_ttft_ms": 99.5, "median_itl_ms": 12.5}}'
    )
    # the same load measured twice (appended by two invocations): two runs, not one sweep
    run, second = plan_runs(
        parse_text(line + "\n" + line.replace("99.5", "88.0"), "s.jsonl"), settings
    )
    assert second.summaries[0]["metrics"]["median_ttft_ms"] == 88.0
    (s,) = run.summaries
    assert run.facts["engine_version"] == "0.4.6" and run.facts["kv_cache_tokens"] == 654321
    assert run.facts["cuda_graph_batch_sizes"] == [1, 2, 4, 8]
    assert run.spec["server"] == {
        "engine": "sglang",
        "model": "/models/Llama-3-8B",
        "tp_size": 2,
        "mem_fraction_static": 0.88,
        "attention_backend": "fa3",
        "cuda_graphs": True,
        "cuda_graph_max_bs": 160,
    }
    assert "point.input_len" in s["unknown"]  # range ratio 0: lengths were not fixed
    assert any("random_range_ratio" in n for n in s["not_understood"])
    assert s["point"]["request_rate"] == "inf" and s["point"]["concurrency"] == 32


def test_json_values_back_to_back_and_between_prose(settings: Settings) -> None:
    a, b = json.dumps(_vllm_json(max_concurrency=4)), json.dumps(_vllm_json(max_concurrency=8))
    text = f"results follow\n{a}{b}, {json.dumps(_vllm_json(max_concurrency=2))}\nthe end\n"
    (run,) = plan_runs(parse_text(text, "chat.txt"), settings)
    assert [s["point"]["concurrency"] for s in run.summaries] == [4, 8, 2]
    broken = parse_text('{"completed": 3, "duration": 1.0,\n', "cut.txt")
    assert broken.results == [] and "nothing ServeLab can import" in broken.not_understood[-1]


def test_text_with_nothing_to_import_says_so(settings: Settings) -> None:
    parsed = parse_text('hello\nworld: 3\n{"a": 1}\n', "note.txt")
    assert parsed.results == [] and parsed.log_facts is None
    assert plan_runs(parsed, settings) == []
    notes = " ".join(parsed.not_understood)
    assert "not a benchmark result" in notes and "nothing ServeLab can import" in notes


# --- hostile text ---------------------------------------------------------------------------

FRAGMENTS = [
    "============ Serving Benchmark Result ============",
    "=" * 50,
    "-" * 20 + "TTFT" + "-" * 20,
    "Successful requests: ",
    "Median TTFT (ms): ",
    "Traffic request rate: ",
    "Backend: ",
    "Max request concurrency: ",
    "#Input tokens: ",
    "inf",
    "Infinity",
    "-Infinity",
    "NaN",
    "not set",
    "1e999",
    "9" * 40,
    "-0.00",
    "{",
    "}",
    "[",
    "]",
    '"completed": ',
    ", ",
    '{"completed": 1, "duration": ',
    "\n",
    "\r",
    "\t",
    "|",
    "# ",
    "(ms)",
    ":",
    "\x00",
    "[2026-01-01 00:00:00 TP0] Load weight end. avail mem=1.0 GB, mem usage=2.0 GB.",
    "KV Cache is allocated. #tokens: 12",
    "Decode batch. gen throughput (token/s): 5.0",
    "Capture cuda graph failed: CUDA out of memory",
    "server_args=ServerArgs(tp_size=2)",
]


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=40)), max_size=60))
def test_hostile_text_never_crashes(
    tmp_path_factory: pytest.TempPathFactory, parts: list[str]
) -> None:
    data = tmp_path_factory.getbasetemp() / "hostile-data"
    cfg = Settings(data_dir=data, sglang_python=sys.executable, transformers_python=sys.executable)
    text = "".join(parts)
    parsed = parse_text(text, "hostile.txt")
    for run in plan_runs(parsed, cfg):
        json.dumps(run.preview(), allow_nan=False, default=str)
        for s in run.summaries:
            assert set(s["metrics"]) == set(METRIC_KEYS)
            for key, value in s["metrics"].items():
                if key not in ("definition", "token_source", "errors_sample"):
                    assert value is None or (
                        isinstance(value, int | float)
                        and value == value
                        and abs(value) != float("inf")
                    )


@pytest.mark.parametrize(
    "text",
    [
        "{" * 100_000,
        "[" * 5000 + "]" * 5000,
        '{"completed": ' + "9" * 5000 + "}",
        '{"completed": 1, "duration": 1e999, "output_throughput": NaN}',
        "Median TTFT (ms): " + "1" * 5000,
        ("Successful requests: 1\n" * 2000),
        "-" * 100_000,
        "=" * 100_000 + " Serving Benchmark Result " + "=" * 100_000,
        "\x00\xff\ufffd" * 1000,
        "a:" * 50_000,
    ],
)
def test_pathological_inputs(text: str, settings: Settings) -> None:
    parsed = parse_text(text, "odd.txt")
    for run in plan_runs(parsed, settings):
        json.dumps(run.preview(), allow_nan=False, default=str)


# --- storing --------------------------------------------------------------------------------


def test_reimport_does_not_duplicate_even_with_other_whitespace(settings: Settings) -> None:
    path = BENCH / "07-sglang-v05-gptoss20b-input-output-header-lines.txt"
    first = store_runs(plan_runs(parse_text(_read(path), path.name), settings), settings)
    assert len(first) == 1 and first[0].startswith("imp-")
    again = plan_runs(parse_text(_read(path), path.name), settings)
    assert [r.exists for r in again] == [True] and store_runs(again, settings) == []
    reflowed = "\r\n".join(line.rstrip() + "  " for line in _read(path).splitlines())
    assert store_runs(plan_runs(parse_text(reflowed, "pasted.txt"), settings), settings) == []
    assert [p.name for p in settings.runs_dir.iterdir()] == first
    rows = Catalog(settings.catalog_path, settings.runs_dir).list_runs()
    assert [r["run_id"] for r in rows] == first and rows[0]["output_throughput"] == 282.29
    assert "imported" in rows[0]["tags"]


def _cli(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SERVELAB_DATA_DIR": str(settings.data_dir)}
    return subprocess.run(
        [sys.executable, "-m", "core", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_dry_run_json_stores_nothing_then_import_lists_them(settings: Settings) -> None:
    oom_log = LOGS / "20-v05x-deepseekv4-tp16-oom-during-capture.log"
    files = [str(p) for p in [*BENCH_FILES, oom_log]]
    out = _cli(settings, "import", *files, "--dry-run", "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["dry_run"] is True
    assert not settings.runs_dir.exists() or not any(settings.runs_dir.iterdir())
    by_file = {f["file"]: f for f in report["files"]}
    assert len(by_file) == len(files)
    jsonl = by_file["09-sglang-jsonl-deepseek-dp-mla-request-rate-infinity.txt"]
    (run,) = jsonl["runs"]
    (point,) = run["points"]
    assert point["metrics"]["output_throughput"] == 12412.394674113431
    assert point["metrics"]["median_ttft_ms"] == 10014.104524045251
    assert point["values_as_read"]["request_rate"] == "inf" and run["stored"] is False
    oom = by_file["20-v05x-deepseekv4-tp16-oom-during-capture.log"]["runs"][0]
    assert oom["state"] == "failed" and oom["facts"]["failure"] == "oom-during-cuda-graph-capture"

    stored = _cli(settings, "import", *files, "--json")
    assert stored.returncode == 0, stored.stderr
    ids = [r["run_id"] for f in json.loads(stored.stdout)["files"] for r in f["runs"]]
    assert sorted(ids) == sorted(p.name for p in settings.runs_dir.iterdir())
    again = _cli(settings, "import", *files)
    assert again.returncode == 0 and again.stdout.count("already imported as") == len(ids)
    listing = _cli(settings, "runs")
    assert all(i in listing.stdout for i in ids)
    shown = _cli(settings, "show", ids[0], "--json")
    assert json.loads(shown.stdout)["spec"]["origin"] == "import"


def test_cli_import_of_nothing_fails_and_a_missing_file_names_it(
    settings: Settings, tmp_path: Path
) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("nothing here\n")
    out = _cli(settings, "import", str(empty))
    assert out.returncode == 1 and "nothing ServeLab can import" in out.stdout
    missing = _cli(settings, "import", str(tmp_path / "nope.txt"))
    assert missing.returncode == 2 and "cannot read" in missing.stderr


def test_label_keys_follow_the_fixture_convention() -> None:
    assert label_key("Total generated tokens (retokenized)") == "total_generated_tokens_retokenized"
    assert label_key("Max reqeuest concurrency") == "max_request_concurrency"
    assert label_key("Maximum request concurrency") == "max_request_concurrency"
    assert label_key("Total Token throughput (tok/s)") == "total_token_throughput_tok_s"
    assert label_key("Request throughput (req/s)") == "request_throughput_req_s"
    assert label_key("Benchmark duration (s)") == "benchmark_duration_s"
