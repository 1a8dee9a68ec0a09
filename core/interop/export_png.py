"""PNG charts: each figure through kaleido driving Debian's chromium (``/usr/bin/chromium``,
or ``BROWSER_PATH``), falling back to a Playwright screenshot. Neither downloads a browser."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import plotly.graph_objects as go

from core.interop.selection import ExportError
from core.settings import browser_path

__all__ = ["CHROMIUM_ARGS", "DEFAULT_CHROMIUM", "chromium_path", "write_pngs"]

DEFAULT_CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
PNG_WIDTH, PNG_HEIGHT = 1000, 420


def chromium_path() -> str | None:
    """Debian's chromium (or ``BROWSER_PATH``): kaleido and Playwright never download one."""
    given = browser_path()
    if given:
        return given
    return DEFAULT_CHROMIUM if Path(DEFAULT_CHROMIUM).exists() else None


def _kaleido_pngs(figs: dict[str, go.Figure], out_dir: Path) -> list[Path]:
    import kaleido

    paths = [out_dir / f"{name}.png" for name in figs]
    items = [
        {
            "fig": fig,
            "path": str(path),
            "opts": {"format": "png", "width": PNG_WIDTH, "height": PNG_HEIGHT},
        }
        for fig, path in zip(figs.values(), paths, strict=True)
    ]
    kopts: dict[str, Any] = {"mathjax": False}  # the default MathJax is a CDN URL
    if (browser := chromium_path()) is not None:
        kopts["path"] = browser
    kaleido.write_fig_from_object_sync(items, kopts=kopts)
    missing = [p.name for p in paths if not p.is_file() or p.stat().st_size == 0]
    if missing:
        raise ExportError(f"kaleido wrote no {', '.join(missing)}")
    return paths


def _playwright_pngs(figs: dict[str, go.Figure], out_dir: Path) -> list[Path]:
    from playwright.sync_api import sync_playwright

    browser_path = chromium_path()
    if browser_path is None:
        raise ExportError("no chromium: install Debian's chromium or set BROWSER_PATH")
    paths = []
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=browser_path, headless=True, args=CHROMIUM_ARGS
        )
        try:
            page = browser.new_page(viewport={"width": PNG_WIDTH + 40, "height": PNG_HEIGHT + 40})
            for name, fig in figs.items():
                page_path = Path(tmp) / f"{name}.html"
                fig.write_html(
                    page_path,
                    include_plotlyjs="directory",
                    full_html=True,
                    default_width=f"{PNG_WIDTH}px",
                    default_height=f"{PNG_HEIGHT}px",
                )
                page.goto(page_path.as_uri())
                page.wait_for_selector(".main-svg", timeout=30_000)
                out = out_dir / f"{name}.png"
                page.locator(".plotly-graph-div").first.screenshot(path=str(out))
                paths.append(out)
        finally:
            browser.close()
    return paths


def write_pngs(figs: dict[str, go.Figure], out_dir: Path) -> tuple[list[Path], str]:
    """Each figure as ``<name>.png``; returns the paths and which renderer drew them
    (kaleido first; a Playwright screenshot where kaleido cannot start the browser)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        return _kaleido_pngs(figs, out_dir), "kaleido"
    except Exception as exc:  # kaleido missing, or it could not drive the browser
        kaleido_error = f"{type(exc).__name__}: {exc}"
    try:
        return _playwright_pngs(figs, out_dir), f"playwright (kaleido failed: {kaleido_error})"
    except Exception as exc:
        raise ExportError(
            f"no PNG renderer worked. kaleido: {kaleido_error}; playwright: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
