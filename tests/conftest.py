"""Shared fixtures. Everything here is real (DuckDB files, subprocesses, HTTP on
loopback); the only fake is the SGLang server in tests/fakes, at the process boundary."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import psutil
import pytest

from core.settings import Settings

REPO = Path(__file__).resolve().parent.parent
# Test models live under the temp folder: allow it as a model root (besides the defaults),
# for this process and every run process a test starts (core/safety.py).
os.environ.setdefault("SERVELAB_MODEL_ROOTS", os.pathsep.join(
    [tempfile.gettempdir(), "~", "/models", "/opt", "/mnt", "/data"]))
FAKE_SGLANG_PATH = REPO / "tests" / "fakes" / "sglang_pkg"
WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike "
         "november oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee "
         "zulu apple banana cherry grape lemon mango melon orange peach pear plum berry "
         "river mountain valley forest desert ocean island harbor bridge castle garden "
         "market school temple tower village window winter summer spring autumn morning "
         "evening silver golden copper marble paper stone water paris capital france the "
         "answer").split()


# The real model on CPU through a real server (marker e2e) needs minutes on a busy 2-core
# host; everything else must end within the default per-test timeout (pyproject.toml).
E2E_TIMEOUT_S = 900
# ``./servelab test`` runs two pytest-xdist workers. Each test module stays on one worker (its
# module fixtures are set up once). The modules named test_e2e_* start a real ``transformers
# serve`` with its default continuous-batching cache (about 14 GB on CPU): two at once were
# OOM-killed, so they share one worker. Every real-model module (marker e2e, "e2e" in its file
# name) is queued first: they are the longest, and must not end the run alone. Browser
# modules (test_*_browser.py: a portal + chromium each) join that worker too, like the
# browser tests in test_e2e_portal.py: one browser at a time on the 2-core host.
REAL_MODEL_GROUP = "real-model"


def _work_unit(nodeid: str) -> str:
    name = Path(nodeid.split("::")[0]).name
    heavy = name.startswith("test_e2e_") or name.endswith("_browser.py")
    return REAL_MODEL_GROUP if heavy else nodeid.split("::")[0]


def _is_real_model(nodeid: str) -> bool:
    return "e2e" in Path(nodeid.split("::")[0]).name


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    from xdist.scheduler import LoadScopeScheduling

    class ByModuleRealModelTogether(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return _work_unit(nodeid)

    config.option.loadscopereorder = False  # keep the order below: the real model first
    return ByModuleRealModelTogether(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("e2e"):
            if not _is_real_model(item.nodeid):
                raise pytest.UsageError(f"{item.nodeid} is marked e2e: put 'e2e' in its file "
                                        "name (tests/conftest.py schedules those first)")
            if not item.get_closest_marker("timeout"):
                item.add_marker(pytest.mark.timeout(E2E_TIMEOUT_S))
    items.sort(key=lambda item: not _is_real_model(item.nodeid))  # stable


@pytest.fixture(scope="session")
def tiny_tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A byte-level BPE tokenizer trained in milliseconds on plain words, saved as
    tokenizer.json: enough for exact-length prompts without the real model."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    corpus = [" ".join(WORDS[i:] + WORDS[:i]) for i in range(len(WORDS))] * 20
    tok.train_from_iterator(corpus, trainer)
    folder = tmp_path_factory.mktemp("tiny-model")
    tok.save(str(folder / "tokenizer.json"))
    (folder / "config.json").write_text('{"model_type": "llama"}')
    return folder


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    data = tmp_path / "data"
    return Settings(data_dir=data, sglang_python=sys.executable,
                    transformers_python=sys.executable)


@pytest.fixture
def fake_sglang(monkeypatch: pytest.MonkeyPatch) -> Path:
    """Put the fake SGLang package on PYTHONPATH for every subprocess of the test."""
    old = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(FAKE_SGLANG_PATH), str(REPO), *([old] if old else [])]))
    for var in list(os.environ):
        if var.startswith("FAKE_SGLANG_"):
            monkeypatch.delenv(var)
    return FAKE_SGLANG_PATH


@pytest.fixture(autouse=True)
def no_orphans():
    """After every test: no child process of the test survives."""
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    yield
    leftover = [p for p in psutil.Process().children(recursive=True)
                if p.pid not in before and p.status() != psutil.STATUS_ZOMBIE]
    for p in leftover:
        p.kill()
    assert not leftover, f"processes survived the test: {[p.cmdline() for p in leftover]}"
