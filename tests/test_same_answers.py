"""core/analysis/same_answers.py on stored answers: the outcome rules one by one (A/A
thresholds, degenerate output, a halved known-answer count, dummy weights), the words the
verdict carries, and the per-prompt view (core/views/answers.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.analysis.runs import load_run
from core.analysis.same_answers import (
    DEFAULT_MEDIAN,
    answers_lines,
    answers_of_runs,
    compare_pair,
    judge_arm,
    thresholds_from,
)
from core.analysis.stats import RunOfArm
from core.run_folder import RunFolder, write_json_atomic
from core.views.answers import answers_frame, mark_divergence, prompt_frame


def _row(i: int, ids: list[int], lps: list[float], text: str | None = None, **kw: Any) -> dict:
    return {
        "index": i,
        "prompt_ids": [1, 2],
        "tokens": [f" t{t}" for t in ids],
        "token_ids": ids,
        "logprobs": lps,
        "top": [[[t, lp], [t + 1, lp - 1.0]] for t, lp in zip(ids, lps, strict=True)],
        "text": text if text is not None else "".join(f" t{t}" for t in ids),
        "error": None,
        **kw,
    }


def _answers(
    rows: list[dict], ref: dict | None = None, forced: list | None = None, **kw: Any
) -> dict:
    return {"set": "token-ids-v1", "weights": "random", "prompts": rows, "reference": ref,
            "forced": forced, **kw}  # fmt: skip


def _base() -> dict:
    rows = [_row(i, [10 + i, 20 + i, 30, 40], [-0.5, -1.0, -0.7, -0.2]) for i in range(4)]
    forced = [{"index": i, "logprobs": [-0.5, -1.0, -0.7, -0.2], "error": None} for i in range(4)]
    return _answers(rows, {"run_id": None, "self": True}, forced)


def _arm(shift: float = 0.0, **row_kw: Any) -> dict:
    rows = [
        _row(i, [10 + i, 20 + i, 30, 40], [-0.5 + shift, -1.0, -0.7, -0.2], **row_kw)
        for i in range(4)
    ]
    forced = [
        {"index": i, "logprobs": [-0.5 + shift, -1.0 + shift, -0.7, -0.2], "error": None}
        for i in range(4)
    ]
    return _answers(rows, {"run_id": "base", "self": False}, forced)


def _judge(arm: dict, aa: dict | None = None) -> Any:
    base = _base()
    aa_pairs = [] if aa is None else [compare_pair(base, "base", aa, "aa", base, "base")]
    pair = compare_pair(base, "base", arm, "arm", base, "base")
    return judge_arm("arm", "base", [pair], thresholds_from(aa_pairs), base)


def test_identical_answers_read_same_and_a_shift_reads_differs() -> None:
    assert _judge(_arm()).outcome == "same"
    shifted = _judge(_arm(shift=0.01))
    assert shifted.outcome == "differs"
    assert "numerics changed, not broken" in shifted.sentence


def test_an_a_a_sets_the_thresholds() -> None:
    noisy_aa = _arm(shift=0.01)
    # the same shift as the baseline's own A/A: same answers; without that A/A: differs
    judged = _judge(_arm(shift=0.01), aa=noisy_aa)
    assert judged.outcome == "same", judged.sentence
    assert judged.thresholds.source.startswith("the baseline's A/A")
    assert thresholds_from([]).median == DEFAULT_MEDIAN


def test_one_token_repeated_and_one_answer_for_all_are_broken() -> None:
    rows = [_row(i, [7, 7, 7, 7], [-0.1] * 4) for i in range(4)]
    arm = _answers(rows, {"run_id": "base", "self": False})
    judged = _judge(arm)
    assert judged.outcome == "broken"
    assert "every prompt got the same answer" in judged.sentence


def test_empty_answers_are_broken() -> None:
    rows = [_row(i, [], [], text="") for i in range(4)]
    judged = _judge(_answers(rows))
    assert judged.outcome == "broken" and "no answer in 4/4 prompts" in judged.sentence


def test_a_halved_known_answer_count_is_broken() -> None:
    base, arm = _base(), _arm()
    base.update(correct=8, asked=10)
    arm.update(correct=3, asked=10)
    pair = compare_pair(base, "base", arm, "arm", base, "base")
    judged = judge_arm("arm", "base", [pair], thresholds_from([]), base)
    assert judged.outcome == "broken" and "3/10 correct" in judged.sentence


def _folder(root: Path, name: str, data: dict) -> RunFolder:
    (root / name).mkdir()
    write_json_atomic(root / name / "spec.json", {"tags": []})
    write_json_atomic(root / name / "answers.json", data)
    return RunFolder(root / name)


def test_dummy_weights_are_not_checked_and_the_verdict_says_why(tmp_path: Path) -> None:
    base = _base() | {"weights": "dummy"}
    runs = [
        RunOfArm("on", 0, load_run(_folder(tmp_path, "base", base))),
        RunOfArm("off", 0, load_run(_folder(tmp_path, "arm", _arm() | {"weights": "dummy"}))),
    ]
    found = answers_of_runs(runs, "on")
    assert {v.outcome for v in found.values()} == {"unchecked"}
    (line,) = answers_lines(found, faster=set())
    assert "near-uniform logits" in line


def test_experiment_runs_pair_by_trial_and_a_broken_arm_is_no_win(tmp_path: Path) -> None:
    nan_arm = _arm()
    nan_arm["prompts"][0]["logprobs"][1] = "nan"  # as a run folder stores NaN
    runs = [
        RunOfArm("on", 0, load_run(_folder(tmp_path, "base", _base()))),
        RunOfArm("on", 1, load_run(_folder(tmp_path, "base2", _arm()))),
        RunOfArm("off", 0, load_run(_folder(tmp_path, "off", nan_arm))),
    ]
    found = answers_of_runs(runs, "on")
    assert found["on"].outcome == "same" and found["on"].arm == "on (A/A)"
    assert found["off"].outcome == "broken"
    lines = answers_lines(found, faster={"off"})
    assert lines[0].startswith("Answers: on (A/A): same answers as on")
    assert "off: faster, but its answers are broken (NaN or infinite logprobs in 1/4" in lines[1]
    frame = answers_frame(found)
    assert list(frame["answers"]) == ["same answers", "broken"]


def test_the_per_prompt_view_marks_the_first_divergence() -> None:
    arm = _arm()
    arm["prompts"][2]["token_ids"][1] = 21 + 2  # the baseline's second choice there
    arm["prompts"][2]["tokens"][1] = " t23"
    judged = _judge(arm)
    assert judged.outcome == "differs"
    frame = prompt_frame(judged)
    row = frame.iloc[2]
    # the second generated token, counted from 1 as trials are
    assert row["first divergence"] == "token 2" and row["in baseline top-k"] == "yes"
    assert row["arm"] == " t12⟦ t23⟧ t30 t40"
    assert mark_divergence(["a"] * 30, None, limit=3) == "aaa…"


def test_the_answers_check_s_settings_are_no_confounder(tmp_path: Path) -> None:
    """Runs of two experiments differ in plan.answers.baseline_tag, an older run has no
    plan.answers at all: the check runs before the warm-up and measures nothing."""
    from core.analysis.diff import confounders
    from tests.runs_by_hand import make_run

    a = make_run(tmp_path, "a", server={"engine": "sglang", "cuda_graphs": False})
    b = make_run(tmp_path, "b", server={"engine": "sglang", "cuda_graphs": True})
    spec = b.read("spec.json")
    spec["plan"]["answers"] = {"enabled": True, "baseline_tag": "arm-label:on"}
    b.write("spec.json", spec)
    old = a.read("spec.json")
    del old["plan"]["answers"]
    a.write("spec.json", old)
    assert confounders([load_run(a), load_run(b)], {"server.cuda_graphs"}) == []
    assert confounders([load_run(a), load_run(b)], set()) == []


def _diverging(base_spread_nats: float) -> tuple[dict, dict]:
    """A baseline whose top-2 at token 1 spans ``base_spread_nats``, and an arm that picks a
    token outside that top-2 there in every prompt (same first token, same logprobs)."""
    base, arm = _base(), _arm()
    for b, a in zip(base["prompts"], arm["prompts"], strict=True):
        b["top"][1] = [[b["token_ids"][1], -1.0], [b["token_ids"][1] + 1, -1.0 - base_spread_nats]]
        a["token_ids"][1] = 999
        a["tokens"][1] = " t999"
    return base, arm


def test_a_flip_outside_a_flat_top_k_is_numerics_but_outside_a_sure_one_is_broken() -> None:
    """Random weights give near-uniform logits (top-5 within 0.1-1.3 nats over 128K tokens
    on the device): fp8 KV flips such near ties outside the baseline's top-k. That is a
    numerics change; the same flip where the baseline was sure (its top-k spans >= 2 nats)
    is a broken arm."""
    for spread, outcome in ((0.4, "differs"), (3.0, "broken")):
        base, arm = _diverging(spread)
        pair = compare_pair(base, "base", arm, "arm", base, "base")
        judged = judge_arm("arm", "base", [pair], thresholds_from([]), base)
        assert judged.outcome == outcome, (spread, judged.sentence)
        if outcome == "differs":
            assert (
                "4 outside it where its top-k spanned under 2 nats, a near tie" in judged.sentence
            )
        else:
            assert (
                "4/4 prompts diverge to a token far outside the baseline's top-k" in judged.sentence
            )


def test_a_failed_teacher_forcing_is_said_once_and_the_decoded_tokens_are_read() -> None:
    # as on the device: SGLang returned one input logprob fewer than asked for every prompt
    failed = [{"index": i, "logprobs": [], "error": "ValueError: 3 input token logprobs, 4 "
               "asked for"} for i in range(4)]  # fmt: skip
    base, arm = _base(), _arm(shift=-0.3)
    base["forced"], arm["forced"] = failed, failed
    pair = compare_pair(base, "base", arm, "arm", base, "base")
    assert pair.forced_kind == "decoded (common prefix)" and pair.forced_failed is not None
    verdict = judge_arm("arm", "base", [pair], thresholds_from([]), base)
    assert "decoded (common prefix) |Δ logprob| median 0, max 0.3" in verdict.sentence
    lines = answers_lines({"arm": verdict}, faster=())
    assert lines[-1].startswith("Teacher forcing: no scores on these runs (the engine's answer: "
                                "ValueError: 3 input")  # fmt: skip
    # where it worked, nothing is said about it
    good = compare_pair(_base(), "base", _arm(shift=-0.3), "arm", _base(), "base")
    assert good.forced_kind == "teacher-forced" and good.forced_failed is None
    ok = judge_arm("arm", "base", [good], thresholds_from([]), _base())
    assert not any("Teacher forcing" in x for x in answers_lines({"arm": ok}, faster=()))
