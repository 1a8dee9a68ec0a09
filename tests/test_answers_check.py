"""The answers check end to end against the fake SGLang (a real process, real HTTP): the
step's requests (/generate with token ids, top-k, teacher forcing), and the comparison's
outcome for each fault the fake injects: NaN logprobs, garbage tokens, a one-token
divergence inside the top-k, a small numeric drift, and none (an A/A)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from core.analysis.same_answers import (
    AnswersVerdict,
    compare_pair,
    judge_arm,
    speed_caveat,
    thresholds_from,
)
from core.config import AnswersSpec
from core.engines.sglang import ENGINE, SGLangAdapter
from core.experiments.design import list_experiments
from core.interop.export_html import html_report
from core.interop.export_tables import table_files
from core.interop.selection import select
from core.load.prompts import load_tokenizer
from core.run.answers_step import (
    ANSWERS_FILE,
    RANDOM_WEIGHTS_MARKER,
    AnswersTarget,
    collect_answers,
)
from core.run_folder import RunFolder, write_json_atomic
from core.settings import Settings
from tests.helpers import open_page, page_tables
from tests.test_fake_sglang import MODEL, launch

REPO = Path(__file__).resolve().parent.parent

SPEC = AnswersSpec(enabled=True, prompts="token_ids", max_tokens=12)
FAST = {"FAKE_SGLANG_ITL_MS": "0.2", "FAKE_SGLANG_TTFT_MS": "1"}


def _answers(
    log_dir: Path, tok_dir: Path, reference: RunFolder | None, *flags: str, **env: str
) -> dict:
    """answers.json of one fake server with ``env``'s faults, scoring ``reference``."""
    with launch(log_dir, *flags, env={**FAST, **env}) as fake:
        target = AnswersTarget(
            fake.base,
            MODEL,
            SGLangAdapter(sys.executable),
            ENGINE.logprobs,
            load_tokenizer(str(tok_dir)),
            {},
            30.0,
            lambda: False,
        )
        return collect_answers(target, SPEC, "random", reference, reference is None)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory, tiny_tokenizer_dir: Path) -> RunFolder:
    """The baseline's first run: it scored its own tokens."""
    folder = tmp_path_factory.mktemp("runs") / "20260101-000000-aaaaaa"
    folder.mkdir()
    data = _answers(folder, tiny_tokenizer_dir, None)
    write_json_atomic(folder / ANSWERS_FILE, data)
    return RunFolder(folder)


def _verdict(reference: RunFolder, arm: dict, aa: dict | None = None) -> AnswersVerdict:
    ref = reference.read(ANSWERS_FILE)
    rid = reference.run_id
    aa_pairs = [] if aa is None else [compare_pair(ref, rid, aa, "aa", ref, rid)]
    pair = compare_pair(ref, rid, arm, "arm", ref, rid)
    return judge_arm("arm", "base", [pair], thresholds_from(aa_pairs), ref)


def test_the_reference_decodes_token_ids_and_scores_its_own_tokens(reference: RunFolder) -> None:
    data = reference.read(ANSWERS_FILE)
    assert data["set"] == "token-ids-v1" and data["kind"] == "token_ids"
    assert data["reference"] == {"run_id": None, "self": True}
    row, forced = data["prompts"][0], data["forced"][0]
    assert len(row["token_ids"]) == 12 and len(row["top"][0]) == 5
    assert row["error"] is None and forced["error"] is None
    # greedy: the chosen token is its position's most likely, and teacher forcing of its
    # own tokens gives back the decode's logprobs
    assert row["top"][0][0] == [row["token_ids"][0], row["logprobs"][0]]
    assert forced["logprobs"] == pytest.approx(row["logprobs"])


def test_an_aa_reads_same(reference: RunFolder, tmp_path: Path, tiny_tokenizer_dir: Path) -> None:
    again = _answers(tmp_path, tiny_tokenizer_dir, reference)
    assert again["reference"]["run_id"] == reference.run_id
    verdict = _verdict(reference, again)
    assert verdict.outcome == "same", verdict.sentence
    assert "16/16 prompts identical" in verdict.sentence


def test_nan_logprobs_read_broken(
    reference: RunFolder, tmp_path: Path, tiny_tokenizer_dir: Path
) -> None:
    arm = _answers(tmp_path, tiny_tokenizer_dir, reference, FAKE_SGLANG_ANSWERS="nan")
    verdict = _verdict(reference, arm)
    assert verdict.outcome == "broken"
    assert "NaN or infinite logprobs in 16/16 prompts" in verdict.sentence
    faster = speed_caveat(verdict, faster=True)
    assert faster is not None and "faster, but its answers are broken" in faster


def test_garbage_tokens_read_broken(
    reference: RunFolder, tmp_path: Path, tiny_tokenizer_dir: Path
) -> None:
    arm = _answers(tmp_path, tiny_tokenizer_dir, reference, FAKE_SGLANG_ANSWERS="garbage")
    verdict = _verdict(reference, arm)
    assert verdict.outcome == "broken"
    assert "outside the baseline's top-k" in verdict.sentence


def test_one_divergence_inside_the_top_k_reads_differs_not_broken(
    reference: RunFolder, tmp_path: Path, tiny_tokenizer_dir: Path
) -> None:
    arm = _answers(tmp_path, tiny_tokenizer_dir, reference, FAKE_SGLANG_ANSWERS="diverge_in_topk")
    verdict = _verdict(reference, arm)
    assert verdict.outcome == "differs", verdict.sentence
    (pair,) = verdict.pairs
    diverged = [p for p in pair.prompts if p.diverged_at is not None]
    assert [(p.index, p.diverged_at, p.in_top_k) for p in diverged] == [(0, 2, True)]
    assert "15/16 prompts identical" in verdict.sentence
    assert speed_caveat(verdict, faster=True) is None


def test_a_small_numeric_drift_reads_differs_and_says_by_how_much(
    reference: RunFolder, tmp_path: Path, tiny_tokenizer_dir: Path
) -> None:
    arm = _answers(tmp_path, tiny_tokenizer_dir, reference, FAKE_SGLANG_ANSWERS="drift=0.01")
    verdict = _verdict(reference, arm)
    assert verdict.outcome == "differs", verdict.sentence
    (pair,) = verdict.pairs
    assert pair.forced_kind == "teacher-forced"
    assert pair.forced_median is not None and 0.002 < pair.forced_median < 0.05
    assert "teacher-forced |Δ logprob| median" in verdict.sentence


def test_a_drift_below_the_threshold_reads_same(
    reference: RunFolder, tmp_path: Path, tiny_tokenizer_dir: Path
) -> None:
    arm = _answers(tmp_path, tiny_tokenizer_dir, reference, FAKE_SGLANG_ANSWERS="drift=0.00001")
    assert _verdict(reference, arm).outcome == "same"


def test_an_fp8_kv_cache_moves_the_fake_s_numerics(
    reference: RunFolder, tmp_path: Path, tiny_tokenizer_dir: Path
) -> None:
    arm = _answers(tmp_path, tiny_tokenizer_dir, reference, "--kv-cache-dtype", "fp8_e5m2")
    assert _verdict(reference, arm).outcome == "differs"


def test_an_experiment_plan_runs_the_check_and_every_view_carries_it(
    fake_sglang: Path,
    settings: Settings,
    tiny_tokenizer_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """graphs on / off / fp8 KV cache through the CLI, as bench/gpu/plan_answers.json on the
    H200: the step in every run, teacher forcing of the baseline's first run, the verdict's
    "Answers:" line and ``--json``'s ``answers`` key."""
    model = tmp_path / "model"
    shutil.copytree(tiny_tokenizer_dir, model)
    (model / RANDOM_WEIGHTS_MARKER).write_text("{}")
    plan = {
        "name": "answers",
        "trials": 2,
        "order_seed": 3,
        "baseline": "graphs on",
        "base": {
            "server": {"engine": "sglang", "model": str(model), "cuda_graphs": True},
            "plan": {
                "points": [{"concurrency": 1, "num_prompts": 2, "output_len": 4}],
                "probe": {"expect": None},
                "answers": {"max_tokens": 8},
            },
        },
        "arms": [
            {"label": "graphs on"},
            {"label": "graphs off", "changes": {"server.cuda_graphs": False}},
            {"label": "fp8 kv", "changes": {"server.extra_args": ["--kv-cache-dtype", "fp8_e5m2"]}},
        ],
    }
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    env = {
        **os.environ,
        **FAST,
        "SERVELAB_DATA_DIR": str(settings.data_dir),
        "SERVELAB_SGLANG_PYTHON": sys.executable,
    }
    cmd = [sys.executable, "-m", "core", "experiment"]
    out = subprocess.run([*cmd, str(path)], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "Answers: graphs on (A/A): same answers as graphs on" in out.stdout
    assert "graphs off: same answers as graphs on: 16/16 prompts identical" in out.stdout
    assert "fp8 kv: answers differ from graphs on (numerics changed, not broken)" in out.stdout
    (record,) = list_experiments(settings)
    for run in record.runs:
        data = RunFolder(settings.runs_dir / run.run_id).read(ANSWERS_FILE)
        assert data["set"] == "token-ids-v1" and data["weights"] == "random"
    show = subprocess.run(
        [*cmd, "--show", record.experiment_id, "--json"], env=env, capture_output=True, text=True
    )
    answers = json.loads(show.stdout)["answers"]
    assert {arm: v["outcome"] for arm, v in answers.items()} == {
        "graphs on": "same",
        "graphs off": "same",
        "fp8 kv": "differs",
    }
    assert answers["fp8 kv"]["pairs"][-1]["forced_kind"] == "teacher-forced"
    # the exports: the answers table and the HTML report's verdict
    sel = select(settings, [record.experiment_id])
    assert b"fp8 kv,differs (numerics changed)" in table_files(sel, "csv")["answers.csv"]
    assert "Answers: graphs on (A/A): same answers" in html_report(sel)
    # the pages: the verdict's "Answers:" line and the per-arm table on the first screen
    monkeypatch.setenv("SERVELAB_DATA_DIR", str(settings.data_dir))
    monkeypatch.setenv("SERVELAB_WORKER", "off")
    for page in ("pages/experiment.py", "pages/compare.py"):
        st.cache_resource.clear()
        app = AppTest.from_file(str(REPO / "app.py"), default_timeout=120)
        app = open_page(app, page, experiment=record.experiment_id)
        assert any(m.value.startswith("**Answers:**") for m in app.markdown)
        (table,) = [t for t in page_tables(app) if "answers" in t.columns]
        assert list(table["answers"]) == [
            "same answers",
            "same answers",
            "differs (numerics changed)",
        ]


def _endpoint_answers(
    log_dir: Path, tok_dir: Path, reference: RunFolder | None, **env: str
) -> dict:
    from core.engines.endpoint import ENGINE as ENDPOINT
    from core.engines.endpoint import EndpointAdapter

    with launch(log_dir, env={**FAST, **env}) as fake:
        target = AnswersTarget(
            fake.base,
            MODEL,
            EndpointAdapter(),
            ENDPOINT.logprobs,
            load_tokenizer(str(tok_dir)),
            {},
            30.0,
            lambda: False,
        )
        return collect_answers(target, SPEC, "random", reference, reference is None)


def test_the_openai_compatible_route_decodes_and_compares_too(
    tmp_path: Path, tiny_tokenizer_dir: Path
) -> None:
    """/v1/completions with token-id prompts and logprobs (the endpoint engine's route,
    which vLLM and SGLang answer): the tokens come by text, so they are compared by text; an
    A/A reads same and a drift differs."""
    ref_dir = tmp_path / "20260101-000000-bbbbbb"
    ref_dir.mkdir()
    ref = _endpoint_answers(ref_dir, tiny_tokenizer_dir, None)
    write_json_atomic(ref_dir / ANSWERS_FILE, ref)
    row = ref["prompts"][0]
    assert row["error"] is None and len(row["tokens"]) == 12 and len(row["top"][0]) == 5
    reference = RunFolder(ref_dir)
    aa = _endpoint_answers(tmp_path, tiny_tokenizer_dir, reference)
    drift = _endpoint_answers(
        tmp_path, tiny_tokenizer_dir, reference, FAKE_SGLANG_ANSWERS="drift=0.05"
    )
    assert _verdict(reference, aa).outcome == "same"
    assert _verdict(reference, drift).outcome == "differs"
