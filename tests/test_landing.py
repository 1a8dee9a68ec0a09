"""core/views/landing.py and the pages that no longer dead-end: the landing page (Runs, at /)
answers the seed's question from the shipped demo's attribution, not from typed numbers; Run,
Compare and History opened bare (the sidebar's links) offer a picker that opens the choice."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from core.analysis.attribution import (
    Attribution,
    Part,
    decompose,
    experiment_attribution,
    part_reading,
)
from core.analysis.card import experiment_story
from core.analysis.stats import NOT_TESTED
from core.experiments.design import list_experiments
from core.numbers import pct_interval_text, pct_text
from core.portal.demo import install_demo
from core.settings import Settings
from core.views.landing import QUESTION, demo_experiment, landing_answer, shape_check
from core.views.pickers import run_options

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def demo(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Settings:
    install_demo(settings)
    monkeypatch.setenv("SERVELAB_DATA_DIR", str(settings.data_dir))
    monkeypatch.setenv("SERVELAB_WORKER", "off")
    st.cache_resource.clear()
    st.cache_data.clear()
    return settings


MOE_2X2 = "exp-20261207-152747-3c27"  # Qwen3-30B-A3B shape, H100, c=64 + a kv_fill point
TOY_2X2 = "exp-20261201-041412-6b50"  # SmolLM2-135M shape, H200, c=1 + c=64, pool never full


def _part(attr: Attribution, conc: int, knob: str) -> Part:
    (part,) = [
        p
        for p in decompose(attr, "output_throughput", conc)
        if p.kind == "main" and p.name.startswith(knob)
    ]
    return part


def _quoted(part: Part) -> str:
    """How a sentence must quote the attribution's own part, worded by core.numbers."""
    assert part.log_low is not None and part.log_high is not None
    interval = pct_interval_text(math.expm1(part.log_low), math.expm1(part.log_high))
    return f"{pct_text(part.rel)} (95% CI {interval}"


def test_the_answer_is_the_demo_attribution_one_sentence_per_load(demo: Settings) -> None:
    """The newest shipped 2×2 (the MoE shape's) answers: at the seed's load (c=64) the graphs
    did it and the memory fraction's share is inconclusive; under KV pressure (the kv_fill
    point, sized to c=235) the memory fraction did it and the graphs' share is not resolved."""
    record = demo_experiment(demo)
    assert record is not None and record.experiment_id == MOE_2X2
    assert set(record.spec["grid"]["knobs"]) == {"server.cuda_graphs", "server.mem_fraction_static"}
    answer = landing_answer(demo)
    assert answer is not None and answer.experiment_id == record.experiment_id
    assert answer.shape == "qwen3-30b-a3b" and answer.gpus == "1× NVIDIA H100 80GB HBM3"
    first, second = answer.sentences
    attr = experiment_attribution(demo, record)
    assert attr is not None
    graphs64, mem64 = _part(attr, 64, "cuda_graphs"), _part(attr, 64, "mem_fraction_static")
    graphs_kv, mem_kv = _part(attr, 235, "cuda_graphs"), _part(attr, 235, "mem_fraction_static")
    assert first.startswith(
        f"At concurrency 64, cuda_graphs off→on did it: output throughput {_quoted(graphs64)})"
    )
    assert f"; mem_fraction_static 0.85→0.92 {_quoted(mem64)}, inconclusive; about " in first
    assert second.startswith(
        "At concurrency 235 (KV pressure: 1.2× the KV pool in flight), mem_fraction_static "
        f"0.85→0.92 did it: output throughput {_quoted(mem_kv)})"
    )
    assert f"; cuda_graphs off→on {_quoted(graphs_kv)}, inconclusive; about " in second
    # each word is core.analysis.words' reading of the part's own interval
    for part, resolved in ((graphs64, True), (mem64, False), (mem_kv, True), (graphs_kv, False)):
        assert part_reading(part, "output_throughput").coloured is resolved
    assert "within noise" not in first + second and "noise floor" not in first + second


def test_a_knob_the_load_never_exercised_reads_not_tested(demo: Settings) -> None:
    """The 135M toy's 2×2 (still shipped, as history): its load never filled the KV pool, so
    the memory fraction's share says "not tested", never a word about the throughput."""
    record = next(r for r in list_experiments(demo) if r.experiment_id == TOY_2X2)
    assert "mem_fraction_static" in experiment_story(demo, record).untested_knobs
    answer = landing_answer(demo, record)
    assert answer is not None and answer.shape is None
    first, second = answer.sentences
    attr = experiment_attribution(demo, record)
    assert attr is not None
    assert first.startswith(
        "At concurrency 1, cuda_graphs off→on did it: output throughput "
        f"{_quoted(_part(attr, 1, 'cuda_graphs'))})"
    )
    assert second.startswith(
        f"At concurrency 64, cuda_graphs off→on did it: output throughput "
        f"{_quoted(_part(attr, 64, 'cuda_graphs'))})"
    )
    for sentence, conc in ((first, 1), (second, 64)):
        mem = _part(attr, conc, "mem_fraction_static")
        assert sentence.endswith(f"; mem_fraction_static 0.85→0.92 {_quoted(mem)}, {NOT_TESTED}).")
    assert "KV pressure" not in first + second  # no point of this plan was sized by kv_fill


def test_no_shipped_grid_no_answer(settings: Settings) -> None:
    assert landing_answer(settings) is None  # an empty data folder: nothing to quote
    assert shape_check(settings) is None


def test_the_realistic_shape_line_is_the_team_change_experiments_own_card(demo: Settings) -> None:
    """The team change on the Qwen3-30B-A3B shape (H200, 2 trials), not the 2×2 that answers:
    its c=64 change from its card, why there is no interval, and the knob its load never
    exercised."""
    check = shape_check(demo)
    assert check is not None and check.shape == "qwen3-30b-a3b"
    assert check.experiment_id == "exp-20261206-025848-b394"
    assert "on 1× NVIDIA H200, the change as the team made it in one restart: " in check.sentence
    record = next(r for r in list_experiments(demo) if r.experiment_id == check.experiment_id)
    story = experiment_story(demo, record)
    (row,) = [r for r in story.card if r.metric == "output_throughput" and r.concurrency == 64]
    assert row.low is None  # 2 trials: no interval, and the line says why
    assert (
        f"output throughput {pct_text(row.change)} at concurrency 64 (2 trials, fewer than "
        "the 3 an interval needs)" in check.sentence
    )
    assert "dummy weights: speed only, answers meaningless" in check.sentence
    assert f"mem_fraction_static {NOT_TESTED}, so the difference is cuda_graphs or noise" in (
        check.sentence
    )


def test_the_landing_page_shows_question_answer_and_links(demo: Settings) -> None:
    app = AppTest.from_file(str(REPO / "app.py"), default_timeout=120)
    app.run()
    assert not app.exception, app.exception
    assert app.header[0].value == QUESTION
    answer = landing_answer(demo)
    assert answer is not None
    shown = " ".join(m.value for m in app.markdown)
    assert answer.sentences[0] in shown and answer.sentences[1] in shown
    check = shape_check(demo)
    assert check is not None and check.sentence in shown
    assert app.title[0].value == "Runs"  # the runs table follows the answer


@pytest.mark.parametrize(
    ("page", "label"),
    [
        ("pages/run.py", "Pick a run"),
        ("pages/history.py", "Pick a run: its configuration's history"),
    ],
)
def test_a_bare_page_offers_a_picker_that_opens_the_choice(
    demo: Settings, page: str, label: str
) -> None:
    app = AppTest.from_file(str(REPO / "app.py"), default_timeout=120)
    app.run()
    app.switch_page(page).run()
    assert not app.exception, app.exception
    (box,) = [s for s in app.selectbox if s.label.startswith(label)]
    # the options read "RUN_ID · state · engine model · started …", newest first
    run_id = next(o for o in box.options if " · " in o).split(" · ")[0]
    box.select(run_id).run()
    assert not app.exception, app.exception
    assert app.query_params["run"] == run_id  # the choice opened as its own link
    assert not [s for s in app.selectbox if s.label.startswith(label)]  # the picker is gone


def test_compare_bare_offers_a_multiselect(demo: Settings) -> None:
    app = AppTest.from_file(str(REPO / "app.py"), default_timeout=120)
    app.run()
    app.switch_page("pages/compare.py").run()
    assert not app.exception, app.exception
    (pick,) = app.multiselect
    assert pick.label.startswith("Runs to compare") and len(pick.options) >= 2


def test_run_options_words_each_run_and_filters_states() -> None:
    rows = [
        {"run_id": "r2", "state": "failed", "engine": "sglang", "model": "/m/x/llama"},
        {"run_id": "r1", "state": "succeeded", "engine": "sglang", "model": "q (dummy weights)"},
    ]
    assert list(run_options(rows)) == ["r2", "r1"]
    assert run_options(rows)["r2"].startswith("r2 · failed · sglang llama · started")
    assert list(run_options(rows, ("succeeded",))) == ["r1"]
