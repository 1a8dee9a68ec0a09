"""The portal in a real browser: Debian's chromium driven by Playwright.

Starts `streamlit run serve.py` on loopback with its worker, submits the launch form with
the default engine (the real SmolLM2 through transformers serve) and a small plan, waits
for both runs of the default A/B, opens the comparison link, then opens the same link in
a fresh browser context. Screenshots go to test-artifacts/.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.common import portal as start_portal
from core.engines.model_setup import ensure_default_model
from core.executors.queue import cancel
from core.portal.demo import install_demo
from core.run_folder import RunFolder
from core.settings import Settings, load_settings
from tests.helpers import CHROMIUM

REPO = Path(__file__).resolve().parent.parent
ARTIFACTS = REPO / "test-artifacts"
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.browser,
]


@pytest.fixture(scope="module")
def portal(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    model = ensure_default_model(load_settings().models_dir)
    data = tmp_path_factory.mktemp("e2e") / "data"
    (data / "models").mkdir(parents=True)
    (data / "models" / model.name).symlink_to(model)
    env = {**os.environ, "SERVELAB_DATA_DIR": str(data), "HF_HUB_OFFLINE": "1"}
    try:
        with _portal(env, data.parent / "portal.log") as base:
            yield base, data
    finally:
        # The worker's run processes are their own sessions: cancel any still running through
        # core's guarded path (a run's recorded pid is checked against its command line and
        # start time first). Never os.kill a pid read from status.json: these runs ended
        # minutes ago, and with pid_max 32768 a busy CI host reuses pids within minutes.
        settings = Settings(
            data_dir=data, sglang_python=sys.executable, transformers_python=sys.executable
        )
        for folder in (data / "runs").glob("*") if (data / "runs").exists() else []:
            if RunFolder(folder).status().get("state") == "running":
                cancel(settings, folder.name)


def _browser():  # type: ignore[no-untyped-def]
    from playwright.sync_api import sync_playwright

    pw = sync_playwright().start()
    browser = pw.chromium.launch(
        executable_path=CHROMIUM,
        headless=True,
        args=[
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
        ],
    )
    return pw, browser


# Each run of the A/B now also asks its 32 known-answer questions (the answers step, issue
# 36): on a busy 2-core host that adds minutes, so the wait and the test's limit are longer.
@pytest.mark.timeout(1500)
def test_launch_watch_and_compare_in_a_browser(portal: tuple[str, Path]) -> None:
    base, data = portal
    ARTIFACTS.mkdir(exist_ok=True)
    pw, browser = _browser()
    try:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(base + "/launch")
        page.get_by_text("Queue runs").wait_for(timeout=60_000)
        page.get_by_label("Concurrency (comma-separated points)").fill("1,2")
        page.get_by_label("Prompts per point").fill("2")
        page.get_by_label("Output tokens", exact=True).fill("8")
        page.get_by_label("Input tokens", exact=True).fill("16")
        page.get_by_label("Trials per arm").fill("1")  # one pair (the default is 3 trials)
        page.screenshot(path=str(ARTIFACTS / "01-launch.png"), full_page=True)
        page.get_by_role("button", name="Queue runs").click()
        page.get_by_text("Queued experiment exp-").wait_for(timeout=60_000)  # one message
        link = page.get_by_role("link", name="Compare these runs")
        href = link.get_attribute("href") or ""
        match = re.search(r"runs=([\w,-]+)", href.replace("%2C", ","))
        assert match, href
        ids = match.group(1).split(",")
        assert len(ids) == 2
        page.screenshot(path=str(ARTIFACTS / "02-queued.png"), full_page=True)

        # watch the first run live on its page
        page.goto(f"{base}/run?run={ids[0]}")
        page.get_by_text(f"Run {ids[0]}").wait_for(timeout=30_000)
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline:
            states = [RunFolder(data / "runs" / i).status().get("state") for i in ids]
            if all(s not in ("queued", "running") for s in states):
                break
            time.sleep(2)
        assert states == ["succeeded", "succeeded"], [
            RunFolder(data / "runs" / i).status() for i in ids
        ]
        page.reload()
        page.get_by_text("succeeded").first.wait_for(timeout=30_000)
        page.get_by_text("Paris").first.wait_for(timeout=30_000)
        page.screenshot(path=str(ARTIFACTS / "03-run.png"), full_page=True)

        url = f"{base}/compare?runs={ids[0]},{ids[1]}"
        # the same link in this browser, then in a fresh one (no cookies, no session)
        fresh = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
        for n, tab in enumerate((page, fresh)):
            tab.goto(url)
            tab.get_by_text("Only the knob under test differs").wait_for(timeout=60_000)
            tab.get_by_text("server.continuous_batching").first.wait_for(timeout=30_000)
            tab.get_by_text("Memory headroom").first.wait_for(timeout=60_000)
            tab.get_by_text("Output throughput (tok/s)").first.wait_for(timeout=30_000)
            body = tab.inner_text("body")
            assert ids[0] in body and ids[1] in body
            # the headline metrics by their one label (core.metrics.metric_label), with deltas
            assert "Output throughput (tok/s)" in body
            assert re.search(r"[+-]\d+\.\d%", body), "no relative delta shown"
            tab.screenshot(path=str(ARTIFACTS / f"04-compare-{n}.png"), full_page=True)
    finally:
        browser.close()
        pw.stop()


def test_one_pass_validation_in_a_browser(portal: tuple[str, Path]) -> None:
    """An unknown engine flag, a negative number and a model path outside the allowed
    folders, submitted together: three messages, each beside its field, nothing queued."""
    base, data = portal
    ARTIFACTS.mkdir(exist_ok=True)
    pw, browser = _browser()
    try:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(base + "/launch")
        page.get_by_text("Queue runs").wait_for(timeout=60_000)
        before = sorted((data / "runs").iterdir())  # the demo's, and the other test's
        page.get_by_label("Extra engine flags").fill("--foo")
        page.get_by_label("Prompts per point").fill("-3")
        page.get_by_label("Model (folder, hub id").fill("/etc/servelab-model")
        page.get_by_role("button", name="Queue runs").click()
        page.get_by_text("3 fields need attention").wait_for(timeout=60_000)
        page.screenshot(path=str(ARTIFACTS / "05-launch-errors.png"), full_page=True)
        alerts = [a.inner_text() for a in page.get_by_role("alert").all()]
        assert any("outside the allowed model folders" in a for a in alerts), alerts
        assert any("--foo is not an option of transformers" in a for a in alerts), alerts
        assert any("at least 1 (you gave -3)" in a for a in alerts), alerts
        assert not any("Input should" in a for a in alerts), alerts
        # each message sits right under its own field
        for label, words in (
            ("Extra engine flags", "--foo is not an option"),
            ("Prompts per point", "you gave -3"),
        ):
            field = page.get_by_label(label).bounding_box()
            message = page.get_by_text(words).first.bounding_box()
            assert field and message and 0 <= message["y"] - field["y"] < 150, (field, message)
            assert abs(message["x"] - field["x"]) < 60, (field, message)
    finally:
        browser.close()
        pw.stop()
    assert sorted((data / "runs").iterdir()) == before


# --- live pages: queued to finished without a reload (the shipped demo, no worker) ---------------

DEMO_RUN = "20261130-045815-c6a73d"  # graphs off, trial 0
DEMO_ON = "20261130-045815-c6b21c"  # graphs on, trial 0


@pytest.fixture(scope="module")
def demo_portal(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A portal on the shipped demo with its worker off: the tests play the worker by
    writing run folders, as a run process would."""
    data = tmp_path_factory.mktemp("live") / "data"
    data.mkdir()
    install_demo(
        Settings(data_dir=data, sglang_python=sys.executable, transformers_python=sys.executable)
    )  # as the first page would
    env = {**os.environ, "SERVELAB_DATA_DIR": str(data), "SERVELAB_WORKER": "off"}
    with _portal(env, data.parent / "portal.log") as base:
        yield base, data


def _portal(env: dict[str, str], log_path: Path) -> contextlib.AbstractContextManager[str]:
    """The portal (app.py) as its own process group on a free loopback port; yields its URL
    (bench.common.portal: one way to start a portal for a browser, tests and benchmarks)."""
    return start_portal(REPO, env, log_path)


def _queued_copy(data: Path, src: str, run_id: str, tags: list[str] | None = None) -> None:
    dst = data / "runs" / run_id
    dst.mkdir(parents=True)
    spec = json.loads((data / "runs" / src / "spec.json").read_text())
    spec["run_id"] = run_id
    if tags is not None:
        spec["tags"] = tags
    (dst / "spec.json").write_text(json.dumps(spec))
    (dst / "status.json").write_text(
        json.dumps({"run_id": run_id, "state": "queued", "phase": "queued"})
    )


def _finish(data: Path, src: str, run_id: str) -> None:
    """The run's results appear and its status turns succeeded, status.json last."""
    source, dst = data / "runs" / src, data / "runs" / run_id
    for item in source.iterdir():
        if item.name in ("status.json", "spec.json"):
            continue
        if item.is_dir():
            shutil.copytree(item, dst / item.name)
        else:
            shutil.copy(item, dst / item.name)
    status = json.loads((source / "status.json").read_text())
    (dst / "status.json").write_text(json.dumps({**status, "run_id": run_id}))


def test_a_run_page_opened_while_queued_turns_into_the_finished_page(
    demo_portal: tuple[str, Path],
) -> None:
    base, data = demo_portal
    ARTIFACTS.mkdir(exist_ok=True)
    run_id = "20991231-000000-live01"
    _queued_copy(data, DEMO_RUN, run_id)
    pw, browser = _browser()
    try:
        page = browser.new_page(viewport={"width": 1400, "height": 1200})
        page.goto(f"{base}/run?run={run_id}")
        page.get_by_text("Not launched yet").wait_for(timeout=90_000)
        assert "no server launched: )" not in page.inner_text("body")
        page.screenshot(path=str(ARTIFACTS / "live-01-queued.png"))
        _finish(data, DEMO_RUN, run_id)
        # no reload: the page's fragment sees the new state and redraws the whole page
        page.get_by_text("Metrics per point").wait_for(timeout=90_000)
        page.get_by_text("transformers serve").first.wait_for(timeout=30_000)
        page.screenshot(path=str(ARTIFACTS / "live-02-finished.png"))
    finally:
        browser.close()
        pw.stop()


def test_an_experiment_page_fills_in_as_its_runs_finish(demo_portal: tuple[str, Path]) -> None:
    base, data = demo_portal
    exp_id = "exp-live-1"
    demo = data / "experiments" / "exp-20261130-045815-42d8"  # the graphs on/off A/B
    record = json.loads((demo / "experiment.json").read_text())
    record["experiment_id"] = exp_id
    runs = [
        ("20991231-000000-off001", DEMO_RUN, "graphs off"),
        ("20991231-000000-on0001", DEMO_ON, "graphs on"),
    ]
    record["runs"] = [{"run_id": r, "arm": arm, "trial": 0} for r, _, arm in runs]
    for rid, src, arm in runs:
        _queued_copy(data, src, rid, [f"exp:{exp_id}", "arm:" + arm.replace(" ", "-")])
    (data / "experiments" / exp_id).mkdir()
    (data / "experiments" / exp_id / "experiment.json").write_text(json.dumps(record))
    pw, browser = _browser()
    try:
        page = browser.new_page(viewport={"width": 1400, "height": 1400})
        page.goto(f"{base}/experiment?experiment={exp_id}")
        page.get_by_text("No results yet: 2 run(s) queued or running").wait_for(timeout=90_000)
        for rid, src, _ in runs:
            _finish(data, src, rid)
        page.get_by_text("vs graphs off (baseline)").first.wait_for(timeout=90_000)
        body = page.inner_text("body")
        assert "Summary" in body and "Traceback" not in body and "KeyError" not in body
        page.screenshot(path=str(ARTIFACTS / "live-03-experiment.png"))
    finally:
        browser.close()
        pw.stop()
