"""Cold page loads of the portal on the shipped H200 demo, in headless Debian chromium.

Each page is opened ``--repeats`` times, each time in a fresh browser context (no cookies,
no cache, no Streamlit session: a cold load). Two times per load, from navigation:

* ``main``: the first table or form element a user reads is drawn (``PAGES``: Runs' run
  list, Launch's form, the Run page's steps table, Compare's and Experiment's summary
  card, Import/Export's file picker);
* ``charts``: the script is idle (Streamlit's status widget gone) and every plotly chart
  of the page is drawn.

The median of the repeats is reported with the host's load average before and after (a
busy host slows everything; compare runs only at a similar load).

    python -m bench.page_speed [--repeats 5] [--repo DIR] [--against DIR] [--pages run,compare]

``--repo`` runs the portal of another checkout (e.g. ``git archive`` of an older commit
unpacked in /tmp) on the same data; ``--against`` a second one beside it, the loads of the
two interleaved, for a before/after on a host whose load moves.
"""

from __future__ import annotations

import argparse
import contextlib
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
# page -> (path, the CSS selector of its main content: the first table or form element
# a user reads, each drawn by a lazily loaded front-end chunk of its own, so it is there only
# once its data is; how many plotly charts the page draws)
TABLE = '[data-testid="stTable"], [data-testid="stDataFrame"]'
PAGES = {
    "runs": ("/", '[data-testid="stDataFrame"]', 0),
    "launch": ("/launch", '[data-testid="stForm"]', 0),
    "run": (f"/run?run={OFF}", TABLE, 2),
    "compare": (f"/compare?runs={ON},{OFF}", TABLE, 4),
    "experiment": (f"/experiment?experiment={EXP}", TABLE, 3),
    "import_export": ("/import_export", '[data-testid="stFileUploader"]', 0),
}
IDLE_JS = "() => !document.querySelector('[data-testid=\"stStatusWidget\"]')"
# every plotly chart of the page drawn (Streamlit renders the whole page, not the first
# screen only), in the page or in a chart's own frame (pages/_chart.py)
CHARTS_JS = """(n) => [document, ...[...document.querySelectorAll('iframe')]
    .map(f => { try { return f.contentDocument } catch (e) { return null } })]
  .filter(d => d)
  .flatMap(d => [...d.querySelectorAll('.js-plotly-plot')])
  .filter(p => p.querySelector('.main-svg')).length >= n"""


def _load() -> float:
    return os.getloadavg()[0]


def time_page(browser: Any, url: str, selector: str, charts_n: int, repeats: int) -> dict[str, Any]:
    main, charts = [], []
    for _ in range(repeats):
        ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
        page = ctx.new_page()
        t = time.perf_counter()
        page.goto(url)
        page.locator(selector).first.wait_for(state="visible", timeout=120_000)
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
    ap.add_argument(
        "--against",
        type=Path,
        help="a second checkout (e.g. the 'before'): its portal too, the two pages' loads "
        "interleaved, so both meet the same host load",
    )
    ap.add_argument("--name", default="page-speed")
    ap.add_argument(
        "--pages", default=",".join(PAGES), help="comma-separated, of " + ", ".join(PAGES)
    )
    a = ap.parse_args()
    repos = {"this": a.repo, **({"against": a.against} if a.against else {})}
    from playwright.sync_api import sync_playwright

    res: dict[str, Any] = {
        "repos": {k: str(r) for k, r in repos.items()},
        "repeats": a.repeats,
        "load_before": _load(),
    }
    with sync_playwright() as pw, contextlib.ExitStack() as stack:
        bases = {}
        for key, repo in repos.items():
            env = demo_portal_env(repo)
            log = Path(env["SERVELAB_DATA_DIR"]).parent / "portal.log"
            bases[key] = stack.enter_context(portal(repo.resolve(), env, log))
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        stack.callback(browser.close)
        # warm each server: its imports, and each page's first run in the process
        for base in bases.values():
            for path, selector, n in PAGES.values():
                time_page(browser, base + path, selector, n, 1)
        for name in a.pages.split(","):
            path, selector, n = PAGES[name]
            loads: dict[str, dict[str, list[float]]] = {
                k: {"main_s": [], "charts_s": []} for k in bases
            }
            for _ in range(a.repeats):
                for key, base in bases.items():  # one load of each in turn
                    one = time_page(browser, base + path, selector, n, 1)
                    loads[key]["main_s"] += one["main_s"]
                    loads[key]["charts_s"] += one["charts_s"]
            for key, got in loads.items():
                res.setdefault(key, {})[name] = {
                    "main_median_s": statistics.median(got["main_s"]),
                    "charts_median_s": statistics.median(got["charts_s"]),
                    **got,
                }
                print(
                    f"{name:13s} {key:8s} main {statistics.median(got['main_s']):.2f} s  "
                    f"charts {statistics.median(got['charts_s']):.2f} s  (load {_load():.1f})",
                    flush=True,
                )
    res["load_after"] = _load()
    res["machine"] = machine()
    print(
        f"load average before {res['load_before']:.1f}, after {res['load_after']:.1f}; "
        f"host yardstick {res['machine']['yardstick_s']:.3f} s (bench.common.yardstick_s)"
    )
    save(a.name, res)


if __name__ == "__main__":
    main()
