"""Streamlit's own cost of a cold page load on this host: a page with a title and one
``st.table``, timed as ``bench/page_speed.py`` times ServeLab's pages (a fresh chromium
context per load, until the table is drawn, median of ``--repeats`` after one warm-up).
What a ServeLab page takes above it is the page's own; docs/BENCHMARKS.md §7.6.

    python -m bench.streamlit_floor [--repeats 5]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
from pathlib import Path

from bench.common import machine, portal
from bench.page_speed import ARGS, CHROMIUM, TABLE, time_page

APP = 'import streamlit as st\n\nst.title("Hello")\nst.table({"a": [1, 2]})\n'


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    from playwright.sync_api import sync_playwright

    folder = Path(tempfile.mkdtemp(prefix="servelab-floor-"))
    (folder / "app.py").write_text(APP)
    with sync_playwright() as pw, contextlib.ExitStack() as stack:
        base = stack.enter_context(portal(folder, dict(os.environ), folder / "portal.log"))
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        stack.callback(browser.close)
        time_page(browser, base, TABLE, 0, 1)  # warm the server
        got = time_page(browser, base, TABLE, 0, a.repeats)
    print(
        f"hello-world page: table drawn after {got['main_median_s']:.2f} s (median of "
        f"{a.repeats}: {', '.join(f'{t:.2f}' for t in got['main_s'])}); "
        f"host yardstick {machine()['yardstick_s']:.3f} s"
    )


if __name__ == "__main__":
    main()
