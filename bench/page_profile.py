"""Where a cold page load's time goes (the companion of bench/page_speed.py, same portal and
data): for each page, one cold load in headless Debian chromium with

* a timeline from navigation: the websocket's first and last script message, the plotly
  chunk of Streamlit's front end (fetched when the first chart arrives) requested / received,
  and each plotly chart's container created and drawn (its ``.main-svg``);
* the websocket messages from the server: count and bytes (the figures travel inside them);
* the renderer's CPU time over the load (V8 sampling profiler), by the script it ran in:
  the plotly chunk (parsing it and drawing), Streamlit's other chunks (React, markdown,
  tables), garbage collection, and the rest (style, layout, paint: ``(program)``).

    python -m bench.page_profile [--repeats 3] [--repo DIR]

Prints the median over ``--repeats`` loads per page; raw numbers go to bench/out/.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench.common import REPO, machine, portal, save
from bench.page_speed import ARGS, CHARTS_JS, CHROMIUM, IDLE_JS, PAGES, demo_portal_env

# Recorded in the page from its first script on (performance.now() is ms from navigation).
OBSERVER_JS = """
window.__plots = new Map();
window.__idle = null;
new MutationObserver(() => {
  for (const p of document.querySelectorAll('.js-plotly-plot')) {
    if (!__plots.has(p)) __plots.set(p, {created: performance.now(), drawn: null});
    const r = __plots.get(p);
    if (r.drawn === null && p.querySelector('.main-svg')) r.drawn = performance.now();
  }
}).observe(document, {subtree: true, childList: true});
"""
TIMELINE_JS = """() => {
  const res = performance.getEntriesByType('resource');
  const chunk = res.find(r => r.name.includes('PlotlyChart'));
  const js = res.filter(r => r.name.endsWith('.js'));
  return {
    plots: [...__plots.values()],
    plotly_chunk: chunk ? {start: chunk.startTime, end: chunk.responseEnd,
                           bytes: chunk.encodedBodySize, decoded: chunk.decodedBodySize} : null,
    js_files: js.length,
    js_bytes: js.reduce((a, r) => a + r.encodedBodySize, 0),
  };
}"""


def _bucket(url: str, fn: str) -> str:
    if "PlotlyChart" in url:
        return "plotly chunk"
    if url.endswith(".js") or ".js?" in url:
        return "streamlit front end"
    if fn in ("(garbage collector)", "(program)", "(idle)"):
        return {
            "(garbage collector)": "gc",
            "(program)": "style/layout/paint/other",
            "(idle)": "idle",
        }[fn]
    return "other" if url else "native/other"


def cpu_by_bucket(profile: dict[str, Any], until_us: float) -> dict[str, float]:
    """Self time (s) per bucket from a CDP Profiler profile, samples up to ``until_us``."""
    node_bucket = {
        n["id"]: _bucket(n["callFrame"].get("url", ""), n["callFrame"].get("functionName", ""))
        for n in profile["nodes"]
    }
    out: dict[str, float] = defaultdict(float)
    t = float(profile["startTime"])
    for node, dt in zip(profile["samples"], profile["timeDeltas"], strict=True):
        t += dt
        if t > until_us:
            break
        out[node_bucket[node]] += dt / 1e6
    return dict(out)


def profile_page(browser: Any, base: str, path: str, selector: str, n: int) -> dict[str, Any]:
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = ctx.new_page()
    page.add_init_script(OBSERVER_JS)
    # Same origin first, so the renderer (and the profiler in it) survives the navigation;
    # the health endpoint is plain text: nothing of the front end is cached by it.
    page.goto(base + "/_stcore/health")
    cdp = ctx.new_cdp_session(page)
    cdp.send("Profiler.enable")
    cdp.send("Profiler.setSamplingInterval", {"interval": 200})
    frames: list[tuple[float, int]] = []
    t0 = time.perf_counter()
    page.on(
        "websocket",
        lambda ws: ws.on(
            "framereceived",
            lambda f: frames.append(
                (time.perf_counter() - t0, len(f) if isinstance(f, bytes | str) else 0)
            ),
        ),
    )
    cdp.send("Profiler.start")
    t0 = time.perf_counter()
    page.goto(base + path)
    page.locator(selector).first.wait_for(state="visible", timeout=120_000)
    main_s = time.perf_counter() - t0
    page.wait_for_function(IDLE_JS, timeout=120_000)
    page.wait_for_function(CHARTS_JS, arg=n, timeout=120_000)
    charts_s = time.perf_counter() - t0
    timeline = page.evaluate(TIMELINE_JS)
    prof = cdp.send("Profiler.stop")["profile"]
    ctx.close()
    # the profile's clock is the renderer's: take the load's span from its own samples
    span_us = float(prof["startTime"]) + charts_s * 1e6
    cpu = cpu_by_bucket(prof, span_us)
    ms = 1000.0
    plots = sorted(timeline["plots"], key=lambda p: p["created"])
    chunk = timeline["plotly_chunk"]
    return {
        "main_s": main_s,
        "charts_s": charts_s,
        "ws_messages": len(frames),
        "ws_bytes": sum(b for _, b in frames),
        "ws_last_s": max((t for t, _ in frames), default=0.0),
        "js_files": timeline["js_files"],
        "js_bytes": timeline["js_bytes"],
        "plotly_chunk_requested_s": chunk["start"] / ms if chunk else None,
        "plotly_chunk_received_s": chunk["end"] / ms if chunk else None,
        "plotly_chunk_bytes": chunk["bytes"] if chunk else None,
        "first_chart_created_s": plots[0]["created"] / ms if plots else None,
        "first_chart_drawn_s": min((p["drawn"] for p in plots if p["drawn"]), default=0.0) / ms
        if plots
        else None,
        "charts_drawn_s": [None if p["drawn"] is None else p["drawn"] / ms for p in plots],
        "cpu_s": cpu,
    }


def _median(rows: list[dict[str, Any]], key: str) -> float | None:
    vals = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--repo", type=Path, default=REPO, help="checkout whose portal to profile")
    ap.add_argument("--name", default="page-profile")
    a = ap.parse_args()
    env = demo_portal_env(a.repo)
    from playwright.sync_api import sync_playwright

    res: dict[str, Any] = {
        "repo": str(a.repo),
        "repeats": a.repeats,
        "load_before": os.getloadavg()[0],
    }
    log = Path(env["SERVELAB_DATA_DIR"]).parent / "portal.log"
    with portal(a.repo.resolve(), env, log) as base, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            for path, selector, n in PAGES.values():  # warm the server: imports, first runs
                profile_page(browser, base, path, selector, n)
            for name, (path, selector, n) in PAGES.items():
                rows = [profile_page(browser, base, path, selector, n) for _ in range(a.repeats)]
                res[name] = rows
                cpu = {
                    k: statistics.median(r["cpu_s"].get(k, 0.0) for r in rows)
                    for k in sorted({k for r in rows for k in r["cpu_s"]})
                }
                print(
                    f"{name}: main {_median(rows, 'main_s'):.2f} s, charts "
                    f"{_median(rows, 'charts_s'):.2f} s; websocket "
                    f"{_median(rows, 'ws_messages'):.0f} msgs "
                    f"{(_median(rows, 'ws_bytes') or 0) / 1024:.0f} KiB, last at "
                    f"{_median(rows, 'ws_last_s'):.2f} s",
                    flush=True,
                )
                if n:
                    drawn = [d for r in rows for d in r["charts_drawn_s"] if d is not None]
                    print(
                        f"  plotly chunk {(_median(rows, 'plotly_chunk_bytes') or 0) / 1e6:.1f}"
                        f" MB requested {_median(rows, 'plotly_chunk_requested_s'):.2f} s, "
                        f"received {_median(rows, 'plotly_chunk_received_s'):.2f} s; first "
                        f"chart created {_median(rows, 'first_chart_created_s'):.2f} s, "
                        f"drawn {_median(rows, 'first_chart_drawn_s'):.2f} s; last drawn "
                        f"{max(drawn, default=0.0):.2f} s (max over repeats)"
                    )
                print(
                    "  renderer CPU s: "
                    + ", ".join(f"{k} {v:.2f}" for k, v in cpu.items() if k != "idle")
                    + f" (idle {cpu.get('idle', 0.0):.2f})",
                    flush=True,
                )
        finally:
            browser.close()
    res["load_after"] = os.getloadavg()[0]
    res["machine"] = machine()
    print(f"load average before {res['load_before']:.1f}, after {res['load_after']:.1f}")
    save(a.name, res)


if __name__ == "__main__":
    main()
