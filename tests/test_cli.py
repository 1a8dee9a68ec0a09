"""The command line's checks: every bad flag reported in one pass, before anything is stored."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from core import cli

REPO = Path(__file__).resolve().parent.parent


def test_unknown_flag_negative_number_and_bad_model_path_in_one_pass(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "SERVELAB_DATA_DIR": str(tmp_path / "data"),
        "SERVELAB_MODEL_ROOTS": str(tmp_path / "models"),
    }
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "core",
            "run",
            "--engine",
            "transformers",
            "--extra-arg=--foo",
            "--num-prompts",
            "-3",
            "--concurrency",
            "1",
            "--model",
            "/etc/servelab-model",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if "transformers is not installed" in out.stderr:
        pytest.skip("transformers is not installed here")
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 3, out.stderr
    assert any(
        line.startswith(
            "error: server.model (--model): '/etc/servelab-model' is "
            "outside the allowed model folders"
        )
        for line in lines
    )
    assert any(
        line.startswith(
            "error: server.extra_args (--extra-arg): --foo is not an option of transformers"
        )
        for line in lines
    )
    assert (
        "error: plan.points.0.num_prompts (--num-prompts): give a number of at least 1 "
        "(you gave -3)" in lines
    )
    assert not (tmp_path / "data" / "runs").exists() or not any(
        (tmp_path / "data" / "runs").iterdir()
    )


@pytest.mark.parametrize(
    ("field", "flag"),
    [
        ("server.extra_args", "--extra-arg"),
        ("plan.points.3.num_prompts", "--num-prompts"),
        ("server.cb_max_memory_percent", "--cb-max-memory-percent"),
        ("tags", "--tag"),
        ("--plan", "--plan"),
    ],
)
def test_each_field_is_named_with_the_flag_that_sets_it(field: str, flag: str) -> None:
    assert cli._flag_of(field) == flag


def test_exact_length_can_be_switched_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERVELAB_DATA_DIR", str(tmp_path / "data"))
    args = cli._parser().parse_args(["run", "--engine", "transformers", "--no-exact-length"])
    assert cli.spec_from_args(args).plan.ignore_eos is False
    args = cli._parser().parse_args(["run", "--engine", "transformers"])
    assert cli.spec_from_args(args).plan.ignore_eos is True
