"""Shared fixtures. Everything here is real (DuckDB files, subprocesses, HTTP on
loopback); the only fake is the SGLang server in tests/fakes, at the process boundary."""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from core.settings import Settings
from tests.helpers import require_chromium

REPO = Path(__file__).resolve().parent.parent
# Test models live under the temp folder: allow it as a model root (besides the defaults),
# for this process and every run process a test starts (core/safety.py).
os.environ.setdefault(
    "SERVELAB_MODEL_ROOTS",
    os.pathsep.join([tempfile.gettempdir(), "~", "/models", "/opt", "/mnt", "/data"]),
)
# One engine-detection cache for the whole session (both xdist workers, and every portal,
# worker and run process a test starts): tests use hundreds of fresh data folders, and each
# would otherwise read `transformers serve --help` and import torch again (~14 s of CPU on
# the 2-core host). Detection is keyed by interpreter and versions (detect_cache.py), so
# sharing changes no answer; tests of detection itself pass their own cache folder.
os.environ.setdefault(
    "SERVELAB_CACHE_DIR",
    str(
        Path(tempfile.gettempdir())
        / f"servelab-test-cache-{os.environ.get('PYTEST_XDIST_TESTRUNUID', os.getpid())}"
    ),
)
FAKE_SGLANG_PATH = REPO / "tests" / "fakes" / "sglang_pkg"
WORDS = (
    "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike "
    "november oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee "
    "zulu apple banana cherry grape lemon mango melon orange peach pear plum berry "
    "river mountain valley forest desert ocean island harbor bridge castle garden "
    "market school temple tower village window winter summer spring autumn morning "
    "evening silver golden copper marble paper stone water paris capital france the "
    "answer"
).split()


# The real model on CPU through a real server (marker e2e) takes tens of seconds to minutes
# on a busy 2-core host (test_e2e_portal's A/B: 40 s, 116 s with one core kept busy);
# everything else must end within the default per-test timeout (pyproject.toml).
E2E_TIMEOUT_S = 600
# ``./servelab test`` runs two pytest-xdist workers. Each test module stays on one worker (its
# module fixtures are set up once); a free worker takes the next module in the order below, so
# the run ends when the total work is done, provided the longest modules start first. Every
# real ``transformers serve`` a test starts has a bounded continuous-batching KV cache (on CPU
# ServeLab passes 0.1 of free host memory: ~3 GB resident here) instead of the engine's
# ~14 GB from host memory, two of which were OOM-killed, so real-model modules may run side
# by side. Browser modules
# (test_e2e_portal.py, test_*_browser.py: a portal + chromium each) share one unit: one
# browser at a time on the 2-core host.
BROWSER_GROUP = "browser"
# Queued first, longest first (per-module totals of ``pytest --durations=0`` on the 2-core
# host): a long module started last would end the run alone. Then the other real-model
# modules (marker e2e, "e2e" in the file name), then the rest in collection order.
LONGEST_FIRST = (
    "tests/test_ray_executor.py",
    BROWSER_GROUP,
    "tests/test_faults.py",
    "tests/test_e2e_transformers.py",
    "tests/test_e2e_workloads.py",
    "tests/test_export.py",
    # the 2x2 x 3 trials end to end on the fake SGLang: 12 run processes in a row
    "tests/test_explain.py",
)


@pytest.hookimpl(tryfirst=True)  # before the fixtures: a browser test's portal is slow
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test marked ``browser`` skips where chromium is missing, and fails under CI=true
    (tests/helpers.require_chromium)."""
    if item.get_closest_marker("browser") is not None:
        require_chromium()


def _work_unit(nodeid: str) -> str:
    path = nodeid.split("::")[0]
    name = Path(path).name
    browser = name == "test_e2e_portal.py" or name.endswith("_browser.py")
    return BROWSER_GROUP if browser else path


def _is_real_model(nodeid: str) -> bool:
    return "e2e" in Path(nodeid.split("::")[0]).name


def _queue_rank(nodeid: str) -> int:
    unit = _work_unit(nodeid)
    if unit in LONGEST_FIRST:
        return LONGEST_FIRST.index(unit)
    return len(LONGEST_FIRST) + (0 if _is_real_model(nodeid) else 1)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    from xdist.scheduler import LoadScopeScheduling

    class ByModuleBrowsersTogether(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return _work_unit(nodeid)

        def remove_node(self, node: Any) -> str | None:
            """The base class queues the dead worker's unfinished unit again, crashed test
            included; a test that crashed before is not run a third time."""
            crashitem: str | None = super().remove_node(node)
            if crashitem is not None and crashitem in _CRASHES:
                scope = self._split_scope(crashitem)
                unit = self.workqueue.get(scope)
                if unit is not None:
                    unit[crashitem] = True
                    if all(unit.values()):
                        del self.workqueue[scope]
            return crashitem

    config.option.loadscopereorder = False  # keep the order below: the longest first
    return ByModuleBrowsersTogether(config, log)


# --- a worker that dies -------------------------------------------------------------------
# A worker that dies mid-test (a signal, a fatal error in native code) leaves no traceback:
# xdist reports "node down: Not properly terminated" and fails the test it was running. Seen
# once in CI (tests/test_e2e_portal.py, the last test of the browser unit; 565 other tests
# passed, the test itself passed when re-run); no cause found: no OOM (that unit peaks at
# 3.1 GB of 24), nothing on stderr. So each worker records what it can of its own death
# (fatal errors through faulthandler; SIGTERM/SIGHUP with every thread's stack), the
# controller records the worker's exit status, and the summary prints both.
# LoadScopeScheduling puts the dead worker's unfinished unit back on the queue, so a fresh
# worker runs the test again: a test's first crash is reported as "rerun" (the re-run's own
# result stands), a second crash of the same test fails the suite.
_CRASHES: set[str] = set()  # controller: tests whose worker died under them once
_DOWN: list[str] = []  # controller: workers that went down, with their exit status


_CRASH_LOG = pytest.StashKey[Any]()  # a worker's open log file


def _crash_dir(controller_pid: int) -> Path:
    return Path(tempfile.gettempdir()) / f"servelab-pytest-{controller_pid}"


@pytest.hookimpl(trylast=True)  # after pytest's faulthandler plugin, whose stderr we replace
def pytest_configure(config: pytest.Config) -> None:
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None:
        return
    folder = _crash_dir(os.getppid())  # the controller started this worker
    folder.mkdir(exist_ok=True)
    log = (folder / f"{workerinput['workerid']}.log").open("a")
    config.stash[_CRASH_LOG] = log
    faulthandler.enable(file=log, all_threads=True)

    def on_signal(signum: int, _frame: object) -> None:
        log.write(
            f"{time.strftime('%H:%M:%S')} worker {workerinput['workerid']} "
            f"(pid {os.getpid()}) got {signal.Signals(signum).name}\n"
        )
        log.flush()
        faulthandler.dump_traceback(file=log, all_threads=True)
        log.flush()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object | None) -> None:
    if error is None:
        return
    status = "unknown"
    popen = getattr(getattr(getattr(node, "gateway", None), "_io", None), "popen", None)
    if popen is not None:  # execnet's private handle on the worker process
        try:
            code = popen.wait(5)
            status = (
                f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"
            )
        except Exception as exc:  # a diagnostic must not fail the run
            status = f"exit status not read: {exc}"
    _DOWN.append(f"{node.gateway.id}: {error} ({status})")


@pytest.hookimpl(optionalhook=True)
def pytest_handlecrashitem(crashitem: str, report: pytest.TestReport, sched: Any) -> None:
    if crashitem in _CRASHES:
        return  # crashed again: the failure stands
    _CRASHES.add(crashitem)
    report.outcome = "rerun"  # type: ignore[assignment]


def pytest_report_teststatus(report: pytest.TestReport) -> tuple[str, str, str] | None:
    if report.outcome == "rerun":
        return "rerun", "R", "RERUN"
    return None


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        return
    folder = _crash_dir(os.getpid())
    logs = (
        {f.stem: f.read_text(errors="replace") for f in sorted(folder.glob("*.log"))}
        if folder.exists()
        else {}
    )
    if not _DOWN and not any(logs.values()):
        return
    terminalreporter.write_sep("=", "workers that died")
    for line in _DOWN:
        terminalreporter.write_line(line)
    passed = {r.nodeid for r in terminalreporter.stats.get("passed", [])}
    for nodeid in _CRASHES:
        again = "passed" if nodeid in passed else "did not pass"
        terminalreporter.write_line(f"{nodeid}: its worker died; re-run on a fresh worker: {again}")
    for worker, text in logs.items():
        if text:
            terminalreporter.write_line(f"--- what worker {worker} recorded ---")
            terminalreporter.write_line(text[-6000:])


def pytest_unconfigure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        log = config.stash.get(_CRASH_LOG, None)
        if log is not None:
            faulthandler.disable()
            log.close()
        return
    folder = _crash_dir(os.getpid())
    if folder.exists():
        for f in folder.glob("*.log"):
            f.unlink()
        folder.rmdir()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("e2e"):
            if not _is_real_model(item.nodeid):
                raise pytest.UsageError(
                    f"{item.nodeid} is marked e2e: put 'e2e' in its file "
                    "name (tests/conftest.py schedules those early)"
                )
            if not item.get_closest_marker("timeout"):
                item.add_marker(pytest.mark.timeout(E2E_TIMEOUT_S))
    items.sort(key=lambda item: _queue_rank(item.nodeid))  # stable: modules stay together


@pytest.fixture(scope="session")
def tiny_tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A byte-level BPE tokenizer trained in milliseconds on plain words, saved as
    tokenizer.json: enough for exact-length prompts without the real model."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600, show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    corpus = [" ".join(WORDS[i:] + WORDS[:i]) for i in range(len(WORDS))] * 20
    tok.train_from_iterator(corpus, trainer)
    folder = tmp_path_factory.mktemp("tiny-model")
    tok.save(str(folder / "tokenizer.json"))
    (folder / "config.json").write_text('{"model_type": "llama"}')
    return folder


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    data = tmp_path / "data"
    return Settings(data_dir=data, sglang_python=sys.executable, transformers_python=sys.executable)


@pytest.fixture
def fake_sglang(monkeypatch: pytest.MonkeyPatch) -> Path:
    """Put the fake SGLang package on PYTHONPATH for every subprocess of the test."""
    old = os.environ.get("PYTHONPATH")
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(FAKE_SGLANG_PATH), str(REPO), *([old] if old else [])])
    )
    for var in list(os.environ):
        if var.startswith("FAKE_SGLANG_"):
            monkeypatch.delenv(var)
    return FAKE_SGLANG_PATH


@pytest.fixture(autouse=True)
def no_orphans():
    """After every test: no child process of the test survives."""
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    yield
    leftover = [
        p
        for p in psutil.Process().children(recursive=True)
        if p.pid not in before and p.status() != psutil.STATUS_ZOMBIE
    ]
    for p in leftover:
        p.kill()
    assert not leftover, f"processes survived the test: {[p.cmdline() for p in leftover]}"
