"""The summary card on hand-made runs: changes with log-scale intervals, better / worse /
within noise by each metric's direction, regressions first and in words, the A/A floor
for runs without an interval, and the memory rows."""

from __future__ import annotations

from typing import Any

import pytest

from core.compare import RunView
from core.summary import (
    card_frame,
    card_grid,
    comparison_story,
    noise_note,
    regression_lines,
    summary_card,
)


def view(run_id: str, tput: dict[int, float], ttft_ms: float = 50.0,
         kv: int | None = None) -> RunView:
    points = [{"index": i, "label": f"c={c}",
               "point": {"concurrency": c, "request_rate": "inf", "input_len": 32,
                         "output_len": 32},
               "metrics": {"output_throughput": t, "median_ttft_ms": ttft_ms * c,
                           "p99_ttft_ms": 2 * ttft_ms * c}}
              for i, (c, t) in enumerate(sorted(tput.items()))]
    facts: dict[str, Any] = {} if kv is None else {"kv_cache_tokens": kv}
    return RunView(run_id, {"server": {"engine": "sglang"}}, {"state": "succeeded"}, facts,
                   None, {}, points)


def test_card_judges_each_metric_by_its_direction_and_lists_regressions_first() -> None:
    on = [view(f"on{t}", {1: 30 + d, 64: 100 + d}, ttft_ms=70 + d, kv=400_000)
          for t, d in enumerate((0.0, 0.6, -0.5))]
    off = [view(f"off{t}", {1: 10 + d, 64: 101 - d}, ttft_ms=50 + d, kv=500_000)
           for t, d in enumerate((0.2, -0.3, 0.4))]
    rows = summary_card({"on": on, "off": off}, "off")
    by = {(r.metric, r.concurrency): r for r in rows}
    tput1 = by[("output_throughput", 1)]
    assert tput1.verdict == "better" and tput1.confirmed
    assert tput1.change == pytest.approx(30.0333 / 10.1 - 1, rel=1e-3)
    assert by[("output_throughput", 64)].verdict == "within noise"
    ttft = by[("median_ttft_ms", 64)]
    assert ttft.verdict == "worse" and ttft.low is not None and ttft.low > 0
    assert by[("kv_cache_tokens", None)].verdict == "worse"  # a smaller KV pool
    lines = regression_lines(rows)
    assert lines[0].startswith("median TTFT at c=1, 64: +")
    assert any(line.startswith("KV pool at start-up: -100,000 tokens (-20.0%)")
               for line in lines)
    text, verdicts = card_grid(rows, "on")
    assert text.loc["output throughput (tok/s)", "c=1"].endswith("▲")
    assert verdicts.loc["median TTFT (ms)", "c=64"] == "worse"
    assert set(card_frame(rows)["verdict"]) <= {"better", "worse", "within noise", "unknown"}


def test_no_interval_crosses_minus_100_percent() -> None:
    """A throughput collapse with noisy trials: the interval stays above -100%."""
    low = [view(f"a{t}", {8: v}) for t, v in enumerate((1.0, 40.0, 2.0))]
    base = [view(f"b{t}", {8: v}) for t, v in enumerate((100.0, 102.0, 98.0))]
    (row,) = [r for r in summary_card({"x": low, "base": base}, "base")
              if r.metric == "output_throughput"]
    assert row.low is not None and row.high is not None
    assert -1.0 < row.low < row.change < row.high  # type: ignore[operator]


def test_one_run_each_uses_the_aa_floor_else_says_unconfirmed() -> None:
    a, b = view("a", {4: 103.0}), view("b", {4: 100.0})
    rows = summary_card({"a": [a], "b": [b]}, "b")
    tput = next(r for r in rows if r.metric == "output_throughput")
    assert tput.low is None and tput.verdict == "better" and not tput.confirmed
    assert "no interval: 1 run(s) per arm" in tput.change_text()
    floored = summary_card({"a": [a], "b": [b]}, "b", floor={"output_throughput": 0.05})
    assert next(r for r in floored if r.metric == "output_throughput").verdict == \
        "within noise"
    story = comparison_story([a, b], 1, ["a", "b"], None, "gpu-7")
    assert story.baseline == "b" and "not measured on gpu-7" in story.noise
    assert story.verdict[-1].startswith("a vs b at c=4")


def test_noise_note_names_the_host() -> None:
    assert noise_note(None, "h200-1") == ("A/A noise floor: not measured on h200-1 (run the "
                                          "'A/A noise check' preset there).")
    note = noise_note({"experiment_id": "exp-aa", "output_throughput": 0.031}, "h200-1")
    assert note == "A/A noise floor on h200-1 (from exp-aa): output throughput ±3.1%."
