"""Explain a difference in a real browser (Debian's chromium driven by Playwright).

The portal runs on the shipped demo with its worker off: the Compare page of the seed's
one-restart pair (CUDA graphs off→on and --mem-fraction-static 0.85→0.92 at once) offers
"Explain this difference"; the click queues the factorial over exactly those two knobs and
links to it, and nothing is started, so the test checks what was queued. A finished 2x2 shows
the other end: its Experiment page with the waterfall and the verdict (the synthetic grid of
tests/test_explain.py; the shipped SGLang experiment predates knob grids, so it has no
attribution to show).
Screenshots go to test-artifacts/ (explain-*.png).
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterator

import pytest

from core.analysis.trials import experiment_runs
from core.config import Point
from core.experiments.design import load_experiment
from core.portal.demo import install_demo
from core.settings import Settings
from core.store import Catalog
from tests.conftest import FAKE_SGLANG_PATH, REPO
from tests.helpers import chart_in_frames
from tests.test_e2e_portal import ARTIFACTS, _browser, _portal
from tests.test_explain import EXP_ID as GRID
from tests.test_explain import _finished_grid

pytestmark = pytest.mark.browser  # chromium: tests/helpers.require_chromium

BEFORE = "20261201-000311-8d8413"  # tag seed:before: graphs off, mem 0.85
AFTER = "20261201-000511-eb5799"  # tag seed:after: graphs on, mem 0.92
GRAPHS, MEM = "server.cuda_graphs", "server.mem_fraction_static"


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Settings]]:
    data = tmp_path_factory.mktemp("explain") / "data"
    data.mkdir()
    settings = Settings(
        data_dir=data, sglang_python=sys.executable, transformers_python=sys.executable
    )
    install_demo(settings)
    _finished_grid(settings)  # graphs +9 %, memory fraction -21 %, 3 trials
    # The after run as if measured on a newer SGLang: a difference no knob can explain,
    # which the page must list as such instead of folding it into the grid.
    facts_path = settings.runs_dir / AFTER / "facts.json"
    facts = json.loads(facts_path.read_text())
    facts_path.write_text(json.dumps({**facts, "engine_version": "0.5.18"}))
    # The pair as a host that can run it would hold it: SGLang installed (the fake package
    # on the portal's PYTHONPATH) and device auto, which asks for no GPU; on cuda:0 this
    # CPU host refuses the explanation (tests/test_explain.py shows that refusal).
    # The model folder is the GPU host's (/tmp/gpu/models/...): the gate refuses a run whose
    # folder is missing here, so the pair and the 2x2 that answers it name one that exists.
    model = tmp_path_factory.mktemp("model")
    (model / "config.json").write_text(json.dumps({"max_position_embeddings": 8192}))
    for path in [*data.glob("runs/*/spec.json"), *data.glob("experiments/*/experiment.json")]:
        text = path.read_text().replace("/tmp/gpu/models/smollm2-135m-random", str(model))
        path.write_text(text)
    for rid in (BEFORE, AFTER):
        spec_path = settings.runs_dir / rid / "spec.json"
        spec = json.loads(spec_path.read_text())
        spec["server"]["device"] = "auto"
        spec_path.write_text(json.dumps(spec))
    path = os.pathsep.join([str(FAKE_SGLANG_PATH), str(REPO), os.environ.get("PYTHONPATH", "")])
    env = {
        **os.environ,
        "SERVELAB_DATA_DIR": str(data),
        "SERVELAB_WORKER": "off",
        "PYTHONPATH": path.rstrip(os.pathsep),
    }
    with _portal(env, data.parent / "portal.log") as base:
        yield base, settings


def test_explain_button_queues_the_factorial_over_exactly_the_differing_knobs(
    demo: tuple[str, Settings],
) -> None:
    base, settings = demo
    ARTIFACTS.mkdir(exist_ok=True)
    exps = settings.data_dir / "experiments"
    before = {p.name for p in exps.iterdir()}
    spec_a = json.loads((settings.runs_dir / BEFORE / "spec.json").read_text())
    pw, browser = _browser()
    try:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(f"{base}/compare?runs={BEFORE},{AFTER}")
        page.get_by_text("More differs than the knob under test").wait_for(timeout=90_000)
        page.screenshot(path=str(ARTIFACTS / "explain-00-compare-top.png"))
        button = page.get_by_role("button", name="Explain this difference")
        button.wait_for(timeout=60_000)
        # the explain block's sentence (the verdict above also says "differs from")
        block = page.get_by_text(f"{AFTER} differs from {BEFORE}").first
        text = block.inner_text()
        assert "server.cuda_graphs" in text and "server.mem_fraction_static" in text, text
        assert "2 knobs" in text, text
        page.get_by_text("0.5.17 → 0.5.18; ServeLab cannot set it").wait_for(timeout=30_000)
        assert "Not explainable: facts.engine_version" in page.inner_text("body")
        page.get_by_text("4 arms × 3 trials = 12 runs").wait_for(timeout=30_000)
        # the demo's 2x2 already varies exactly these knobs: offered before a new one
        answer = page.get_by_role("link", name="Open the experiment that already answers this")
        assert "exp-20261201-041412-6b50" in (answer.get_attribute("href") or "")
        trials = page.get_by_label("Trials", exact=True)
        trials.fill("80")  # refused beside the field, not clamped to 50
        trials.press("Enter")
        page.get_by_text("Trials: give between 1 and 50 trials, not 80").wait_for(timeout=30_000)
        assert button.count() == 0
        trials.fill("2")
        trials.press("Enter")
        page.get_by_text("4 arms × 2 trials = 8 runs").wait_for(timeout=30_000)
        button.scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / "explain-01-compare.png"), full_page=True)
        button.click()
        queued = page.get_by_text("Queued experiment exp-")
        queued.wait_for(timeout=60_000)
        (exp_id,) = {p.name for p in exps.iterdir()} - before
        assert f"{exp_id}: 4 arms × 2 trials = 8 runs" in queued.inner_text()
        link = page.get_by_role("link", name=f"Open experiment {exp_id}")
        link.scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / "explain-02-queued.png"), full_page=True)
        link.click()
        page.get_by_text(
            f"Explain {BEFORE} → {AFTER}: cuda_graphs × mem_fraction_static"
        ).first.wait_for(timeout=60_000)
        page.get_by_text("No results yet: 8 run(s) queued or running").wait_for(timeout=60_000)
        assert exp_id in page.url
        body = page.inner_text("body")
        assert "4 arms × 2 trials" in body, body
        page.screenshot(path=str(ARTIFACTS / "explain-03-experiment.png"), full_page=True)
    finally:
        browser.close()
        pw.stop()

    # on disk: the factorial over exactly the two knobs, A's values first, A's other fields
    record = load_experiment(settings, exp_id)
    assert record is not None
    spec = record.spec
    assert spec["kind"] == "explain" and spec["trials"] == 2
    assert spec["grid"]["knobs"] == {GRAPHS: [False, True], MEM: [0.85, 0.92]}
    assert spec["grid"]["after"] == {GRAPHS: True, MEM: 0.92}
    cells = {(arm["changes"][GRAPHS], arm["changes"][MEM]) for arm in spec["arms"]}
    assert cells == {(False, 0.85), (False, 0.92), (True, 0.85), (True, 0.92)}
    assert all(set(arm["changes"]) == {GRAPHS, MEM} for arm in spec["arms"])
    baseline = next(a for a in spec["arms"] if a["label"] == spec["baseline"])
    assert baseline["changes"] == {GRAPHS: False, MEM: 0.85}
    held = {
        k: v for k, v in spec_a["server"].items() if k not in ("cuda_graphs", "mem_fraction_static")
    }
    runs = experiment_runs(settings, record)
    assert len(runs) == 8 and {r.arm for r in runs} == {a["label"] for a in spec["arms"]}
    for r in runs:
        server = r.view.spec["server"]
        arm = next(a for a in spec["arms"] if a["label"] == r.arm)
        assert (server["cuda_graphs"], server["mem_fraction_static"]) == (
            arm["changes"][GRAPHS],
            arm["changes"][MEM],
        )
        assert {k: server[k] for k in held} == held  # every other field at A's value
        # A's points, read as points (an old spec without a workload is the fixed default)
        points = [Point.model_validate(p) for p in r.view.spec["plan"]["points"]]
        assert points == [Point.model_validate(p) for p in spec_a["plan"]["points"]]
        assert r.view.status.state == "queued"  # the worker is off: nothing started
    # the catalog indexes the queued runs like any other
    catalog = Catalog(settings.catalog_path, settings.runs_dir)
    catalog.sync()
    rows = catalog.list_runs(tag=f"exp:{exp_id}")
    assert sorted(r["run_id"] for r in rows) == sorted(r.view.run_id for r in runs)
    assert {r["state"] for r in rows} == {"queued"}


def test_experiment_page_of_a_finished_grid_shows_the_waterfall_and_the_verdict(
    demo: tuple[str, Settings],
) -> None:
    base, _ = demo
    ARTIFACTS.mkdir(exist_ok=True)
    pw, browser = _browser()
    try:
        page = browser.new_page(viewport={"width": 1400, "height": 1400})
        page.goto(f"{base}/experiment?experiment={GRID}")
        page.get_by_text("Attribution: which knob did it").wait_for(timeout=90_000)
        verdict = page.get_by_text(re.compile(r"^Of the ")).first
        verdict.wait_for(timeout=60_000)
        sentence = verdict.inner_text()
        assert "output throughput at concurrency 4" in sentence, sentence
        assert "cuda_graphs off→on +9" in sentence, sentence
        assert "mem_fraction_static 0.85→0.92 -21" in sentence, sentence
        waterfall = chart_in_frames(page, "part by part", timeout=60)
        waterfall.scroll_into_view_if_needed()
        assert waterfall.locator("g.point").count() >= 4  # 2 knobs, interaction, total
        assert "Confounders" not in page.inner_text("body")  # the grid's knobs are declared
        page.screenshot(path=str(ARTIFACTS / "explain-04-attribution.png"), full_page=True)
    finally:
        browser.close()
        pw.stop()
