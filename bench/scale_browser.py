"""Part 4 of docs/BENCHMARKS.md, in the browser: the portal started on the synthetic data
folder (SERVELAB_DATA_DIR), each page opened in headless Debian chromium through Playwright,
timed from navigation to the page's last element being drawn (Streamlit's "running" indicator
gone and the page-specific text visible). Each page is opened ``--repeats`` times in fresh
tabs of one browser (the first open of a page in a new session is included as ``first``).

    python -m bench.scale_browser --data bench/out/scale/data [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path
from typing import Any

from bench.common import OUT, REPO, machine, portal, save
from core.interop.export_png import CHROMIUM_ARGS, DEFAULT_CHROMIUM

CHROMIUM = DEFAULT_CHROMIUM
ARGS = CHROMIUM_ARGS


def wait_idle(page: Any, text: str, timeout_ms: int = 60_000) -> None:
    page.get_by_text(text).first.wait_for(timeout=timeout_ms)
    # Streamlit shows a status widget while the script runs; wait until it is gone.
    page.wait_for_function(
        "() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=timeout_ms
    )


def time_page(browser: Any, url: str, done_text: str, repeats: int, shot: Path) -> dict[str, Any]:
    times = []
    for i in range(repeats):
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        t = time.perf_counter()
        page.goto(url)
        wait_idle(page, done_text)
        times.append(time.perf_counter() - t)
        if i == 0:
            page.screenshot(path=str(shot), full_page=True)
        page.close()
    return {
        "first_s": times[0],
        "median_s": statistics.median(times),
        "max_s": max(times),
        "all_s": times,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", type=Path, default=Path("bench/out/scale/data"))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--name", default="scale-browser")
    a = ap.parse_args()
    if not Path(CHROMIUM).exists():
        raise SystemExit(f"needs {CHROMIUM} (apt-get install chromium)")
    data = a.data.resolve()
    ids = sorted(p.name for p in (data / "runs").iterdir())
    heavy = ids[-20:]
    env = {**os.environ, "SERVELAB_DATA_DIR": str(data), "HF_HUB_OFFLINE": "1"}
    from playwright.sync_api import sync_playwright

    res: dict[str, Any] = {"runs": len(ids)}
    with portal(REPO, env, OUT / "scale-portal.log") as base, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        # one throw-away open: Streamlit's first script run imports the pages' modules
        warm = browser.new_page()
        warm.goto(base + "/")
        wait_idle(warm, "run(s)")
        warm.close()
        pages = {
            "runs_page": (base + "/", "run(s)"),
            "run_page_heavy": (f"{base}/run?run={heavy[0]}", "Raw artifacts"),
            "compare_2_heavy": (f"{base}/compare?runs={heavy[0]},{heavy[1]}", "Memory headroom"),
            "compare_15_heavy": (f"{base}/compare?runs={','.join(heavy[:15])}", "Memory headroom"),
        }
        for name, (url, text) in pages.items():
            res[name] = time_page(browser, url, text, a.repeats, OUT / f"{a.name}-{name}.png")
            r = res[name]
            print(
                f"{name:18} first {r['first_s'] * 1000:7.0f} ms  median "
                f"{r['median_s'] * 1000:7.0f} ms  max {r['max_s'] * 1000:7.0f} ms",
                flush=True,
            )
        browser.close()
    path = save(f"{a.name}.json", {"machine": machine(), **res})
    print(f"written {path}")


if __name__ == "__main__":
    main()
