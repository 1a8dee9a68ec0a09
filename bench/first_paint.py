"""What a freshly started portal paints first: the sidebar's links and the page's text,
sampled every 250 ms from the first paint of the first visit (the moment issue 37 saw the
sidebar list ~19 module names of pages/ for 3-4 s), with screenshots at 1440 and 400 px.

    python -m bench.first_paint [--out bench/out/first-paint] [--seconds 8]

Needs Debian chromium (tests/helpers.py CHROMIUM). Starts its own portal on a copy of the
shipped demo (worker off), so the first visit is the server's first script run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from bench.common import portal
from core.portal.demo import install_demo
from core.settings import REPO_ROOT, Settings

WIDTHS = (1440, 400)


def _nav(page) -> list[str]:  # type: ignore[no-untyped-def]
    links = page.locator('[data-testid="stSidebarNav"] a').all_inner_texts()
    return [t.strip().splitlines()[-1] for t in links if t.strip()]


def sample(base: str, out: Path, width: int, seconds: float, tag: str) -> list[dict[str, object]]:
    """The sidebar's links and the body's first words every 250 ms after navigation, and a
    screenshot at the first paint and at the end."""
    from playwright.sync_api import sync_playwright

    from tests.helpers import CHROMIUM

    rows: list[dict[str, object]] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": width, "height": 900})
        t0 = time.monotonic()
        page.goto(base + "/", wait_until="commit")
        shot = 0
        while time.monotonic() - t0 < seconds:
            nav = _nav(page)
            body = page.evaluate("document.body ? document.body.innerText.slice(0, 200) : ''")
            rows.append({"t_s": round(time.monotonic() - t0, 2), "nav": nav, "body": body})
            if shot == 0 and body.strip():
                page.screenshot(path=str(out / f"{tag}-{width}-first-paint.png"))
                shot = 1
            page.wait_for_timeout(250)
        page.wait_for_timeout(1500)
        page.screenshot(path=str(out / f"{tag}-{width}-settled.png"), full_page=True)
        browser.close()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, default=REPO_ROOT / "bench" / "out" / "first-paint")
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--tag", default="home")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    report: dict[str, object] = {}
    for width in WIDTHS:  # a fresh portal per width: each visit is its server's first run
        with tempfile.TemporaryDirectory() as tmp:
            data = Path(tmp) / "data"
            data.mkdir()
            exe = sys.executable
            install_demo(Settings(data_dir=data, sglang_python=exe, transformers_python=exe))
            env = {
                **{k: v for k, v in os.environ.items() if not k.startswith("SERVELAB_")},
                "SERVELAB_DATA_DIR": str(data),
                "SERVELAB_WORKER": "off",
            }
            with portal(REPO_ROOT, env, Path(tmp) / "portal.log") as base:
                rows = sample(base, args.out, width, args.seconds, args.tag)
        report[str(width)] = rows
        seen = sorted({n for r in rows for n in r["nav"]})  # type: ignore[attr-defined]
        print(f"{width} px: sidebar links ever shown: {seen}")
    (args.out / f"{args.tag}-samples.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
