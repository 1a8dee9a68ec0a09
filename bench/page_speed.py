"""Cold page loads of the portal on the shipped H200 demo, in headless Debian chromium.

Each page is opened ``--repeats`` times, each time in a fresh browser context (no cookies,
no Streamlit session: a cold load). Two times per load, from navigation:

* ``main``: the page's title and its first block of content are drawn;
* ``charts``: the script is idle (Streamlit's status widget gone) and every plotly chart
  of the page is drawn.

The median of the repeats is reported with the host's load average before and after (a
busy host slows everything; compare runs only at a similar load).

    python -m bench.page_speed [--repeats 5] [--repo DIR]

``--repo`` runs the portal of another checkout (e.g. a git worktree of an older commit) on
the same data, for a before/after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import REPO, machine, portal, save
from core.interop.export_png import CHROMIUM_ARGS, DEFAULT_CHROMIUM
from core.portal.demo import install_demo
from core.settings import Settings

CHROMIUM = DEFAULT_CHROMIUM
ARGS = CHROMIUM_ARGS
EXP = "exp-20261130-045815-42d8"
OFF, ON = "20261130-045815-c6a73d", "20261130-045815-c6b21c"
# page -> (path, a text of its answer that every version of the page has drawn: the
# first block of content, or for Compare and Experiment the metrics / verdict)
# and how many plotly charts the page draws
PAGES = {
    "runs": ("/", "run(s)", 0),
    "run": (f"/run?run={OFF}", "Launch command", 2),
    "compare": (f"/compare?runs={ON},{OFF}", "Metrics", 4),
    "experiment": (f"/experiment?experiment={EXP}", "Verdict", 3),
    "launch": ("/launch", "Queue runs", 0),
}
IDLE_JS = "() => !document.querySelector('[data-testid=\"stStatusWidget\"]')"
# every plotly chart of the page drawn (Streamlit renders the whole page, not the first
# screen only)
CHARTS_JS = """(n) => [...document.querySelectorAll('.js-plotly-plot')]
  .filter(p => p.querySelector('.main-svg')).length >= n"""


def _load() -> float:
    return os.getloadavg()[0]


def time_page(browser: Any, url: str, text: str, charts_n: int, repeats: int) -> dict[str, Any]:
    main, charts = [], []
    for _ in range(repeats):
        ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
        page = ctx.new_page()
        t = time.perf_counter()
        page.goto(url)
        page.get_by_text(text).first.wait_for(timeout=120_000)
        main.append(time.perf_counter() - t)
        page.wait_for_function(IDLE_JS, timeout=120_000)
        page.wait_for_function(CHARTS_JS, arg=charts_n, timeout=120_000)
        charts.append(time.perf_counter() - t)
        ctx.close()
    return {
        "main_median_s": statistics.median(main),
        "charts_median_s": statistics.median(charts),
        "main_s": main,
        "charts_s": charts,
    }


def demo_portal_env(repo: Path) -> dict[str, str]:
    """The environment of a portal (``repo``'s checkout, worker off) on a fresh data folder
    holding the shipped demo; exits when Debian's chromium is missing."""
    if not Path(CHROMIUM).exists():
        raise SystemExit(f"needs {CHROMIUM} (apt-get install chromium)")
    data = Path(tempfile.mkdtemp(prefix="servelab-pages-")) / "data"
    install_demo(
        Settings(data_dir=data, sglang_python=sys.executable, transformers_python=sys.executable)
    )
    return {
        **os.environ,
        "SERVELAB_DATA_DIR": str(data),
        "SERVELAB_WORKER": "off",
        "PYTHONPATH": str(repo.resolve()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--repo", type=Path, default=REPO, help="checkout whose portal to time")
    ap.add_argument("--name", default="page-speed")
    a = ap.parse_args()
    env = demo_portal_env(a.repo)
    from playwright.sync_api import sync_playwright

    res: dict[str, Any] = {"repo": str(a.repo), "repeats": a.repeats, "load_before": _load()}
    log = Path(env["SERVELAB_DATA_DIR"]).parent / "portal.log"
    with portal(a.repo.resolve(), env, log) as base, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            time_page(browser, base + "/", "run(s)", 0, 1)  # warm the server's imports
            for name, (path, text, n) in PAGES.items():
                res[name] = time_page(browser, base + path, text, n, a.repeats)
                print(
                    f"{name:11s} main {res[name]['main_median_s']:.2f} s  charts "
                    f"{res[name]['charts_median_s']:.2f} s",
                    flush=True,
                )
        finally:
            browser.close()
    res["load_after"] = _load()
    res["machine"] = machine()
    print(f"load average before {res['load_before']:.1f}, after {res['load_after']:.1f}")
    save(a.name, res)


if __name__ == "__main__":
    main()
