"""core/load/answer_sets.py: the fixed, versioned prompt sets and the known-answer rule;
core/run/answers_step.py: when the check runs and which set a model gets."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.config import AnswersSpec, BenchmarkPlan, ServerConfig
from core.engines.declare import LogprobSupport
from core.load.answer_sets import QUESTIONS, TOKEN_IDS, answer_set, is_correct, normalise_answer
from core.run.answers_step import (
    RANDOM_WEIGHTS_MARKER,
    answers_enabled,
    answers_step_words,
    choose_set,
    find_reference,
    weights_kind,
)
from core.run_folder import write_json_atomic

IDS = LogprobSupport("/generate", token_ids=True, scores=True)
TEXT_ONLY = LogprobSupport(None, why="no logprobs")


def test_the_sets_are_fixed_and_versioned() -> None:
    assert QUESTIONS.version == "questions-v1" and len(QUESTIONS.prompts) == 32
    assert all(p.text and p.expect for p in QUESTIONS.prompts)
    assert TOKEN_IDS.version == "token-ids-v1" and len(TOKEN_IDS.prompts) == 16
    assert all(len(p.token_ids) == 16 and p.expect is None for p in TOKEN_IDS.prompts)
    # seeded: the same ids every time (a changed set must get a new version)
    assert TOKEN_IDS.prompts[0].token_ids[:3] == answer_set("token_ids").prompts[0].token_ids[:3]
    assert all(1000 <= i < 10000 for p in TOKEN_IDS.prompts for i in p.token_ids)


@pytest.mark.parametrize(
    ("answer", "expect", "correct"),
    [
        ("Paris", "paris", True),
        ("Paris.", "paris", True),
        ("The capital of France is Paris.", "paris", True),
        ("paris is the capital", "paris", True),
        ("The answer is 42", "42", True),
        ("  4\nbecause 2 + 2 = 4", "4", True),
        ("Lyon", "paris", False),
        ("Parisian", "paris", False),
        ("14", "4", False),
        ("", "paris", False),
    ],
)
def test_a_short_answer_is_right_by_its_normalised_form(
    answer: str, expect: str, correct: bool
) -> None:
    assert is_correct(answer, expect) is correct


def test_normalising_drops_case_punctuation_and_a_leading_article() -> None:
    assert normalise_answer("  The Sun!  ") == "sun"
    assert normalise_answer("Carbon dioxide.") == "carbon dioxide"


def test_answers_take_a_bool_or_fields_and_refuse_anything_else() -> None:
    assert BenchmarkPlan.model_validate({"answers": False}).answers.enabled is False
    assert BenchmarkPlan.model_validate({"answers": {"top_k": 3}}).answers.top_k == 3
    with pytest.raises(ValueError, match="prompts"):
        BenchmarkPlan.model_validate({"answers": {"prompts": "poems"}})
    with pytest.raises(ValueError, match="top_k"):
        BenchmarkPlan.model_validate({"answers": {"top_k": 99}})


def test_on_in_experiments_by_default_off_in_single_runs_and_off_able() -> None:
    assert answers_enabled(AnswersSpec(), ["exp:e1", "trial:0"])
    assert not answers_enabled(AnswersSpec(), ["gpu"])
    assert not answers_enabled(AnswersSpec(enabled=False), ["exp:e1"])
    assert answers_enabled(AnswersSpec(enabled=True), [])


def test_dummy_weights_skip_the_check_unless_the_plan_asks() -> None:
    # near-uniform logits: the check would mean nothing and cost GPU time on every run
    assert not answers_enabled(AnswersSpec(), ["exp:e1"], "dummy")
    assert answers_enabled(AnswersSpec(), ["exp:e1"], "random")
    assert answers_enabled(AnswersSpec(enabled=True), ["exp:e1"], "dummy")


def test_the_set_follows_the_weights(tmp_path: Path) -> None:
    real = ServerConfig(engine="sglang", model=str(tmp_path))
    assert weights_kind(real) == "real"
    dummy = ServerConfig(
        engine="sglang", model=str(tmp_path), extra_args=("--load-format", "dummy")
    )
    assert weights_kind(dummy) == "dummy"
    # a model shape runs with dummy weights whatever its extra_args say
    shape = ServerConfig(engine="sglang", shape="llama-3.1-8b", tokenizer=str(tmp_path))
    assert weights_kind(shape) == "dummy"
    (tmp_path / RANDOM_WEIGHTS_MARKER).write_text("{}")
    assert weights_kind(real) == "random"
    assert choose_set(AnswersSpec(), "random", IDS)[0] is TOKEN_IDS
    assert choose_set(AnswersSpec(), "real", IDS)[0] is QUESTIONS
    # an engine that takes no token ids gets the questions even with random weights, and says so
    chosen, why = choose_set(AnswersSpec(), "random", TEXT_ONLY)
    assert chosen is QUESTIONS and "no token ids" in why
    assert choose_set(AnswersSpec(prompts="token_ids"), "real", IDS)[0] is TOKEN_IDS


def _run(runs: Path, name: str, tags: list[str], self_ref: bool) -> None:
    (runs / name).mkdir(parents=True)
    write_json_atomic(runs / name / "spec.json", {"tags": tags})
    ref = {"run_id": None, "self": True} if self_ref else {"run_id": "x", "self": False}
    write_json_atomic(runs / name / "answers.json", {"reference": ref, "prompts": []})


def test_the_reference_is_the_baseline_s_earliest_self_scored_run(tmp_path: Path) -> None:
    base, other = "arm-label:on", "arm-label:off"
    _run(tmp_path, "r3", ["exp:e", base, "trial:1"], self_ref=True)
    _run(tmp_path, "r2", ["exp:e", base, "trial:0"], self_ref=True)
    _run(tmp_path, "r1", ["exp:e", other, "trial:0"], self_ref=True)
    _run(tmp_path, "r0", ["exp:f", base, "trial:0"], self_ref=True)
    _run(tmp_path, "r4", ["exp:e", base, "trial:0"], self_ref=False)
    found = find_reference(tmp_path, ["exp:e", other, "trial:1"], base, "me")
    assert found is not None and found.run_id == "r2"
    assert find_reference(tmp_path, ["exp:e"], base, "r2") is not None  # not itself: r3
    assert find_reference(tmp_path, ["gpu"], base, "me") is None
    assert find_reference(tmp_path, ["exp:g"], base, "me") is None


def test_the_step_says_what_it_asked_and_scored() -> None:
    data = {
        "set": "questions-v1",
        "weights": "real",
        "asked": 32,
        "correct": 29,
        "prompts": [{"error": None}, {"error": "HTTP 500"}],
        "reference": {"run_id": "r1", "self": False},
    }
    detail, outcome = answers_step_words(data)
    assert "29/32 correct" in detail and "scored the tokens of r1" in detail
    assert "1 without an answer" in detail and outcome == "warning"
