"""The shipped demo, copied into an empty data folder so a new user sees real GPU results on
first start (docs/BENCHMARKS.md §5): the CUDA-graph A/B of `transformers serve` and the real
SGLang 0.5.17 experiment (CUDA graphs x mem-fraction-static, with the seed's one-restart pair
as two plain runs), both measured on an H200. Every folder under data/demo/ is installed."""

from __future__ import annotations

import shutil
from pathlib import Path

from core.settings import DEMO_DIR, Settings

__all__ = ["install_demo"]


def install_demo(settings: Settings, demo_dir: Path = DEMO_DIR) -> list[str]:
    """Copy the demo's run and experiment folders that the data folder lacks; return the
    ids copied. Never overwrites; a user who deletes a demo run gets it back only by
    deleting the whole data folder."""
    copied: list[str] = []
    marker = settings.data_dir / ".demo-installed"
    if marker.exists() or not demo_dir.is_dir():
        return copied
    for kind in ("runs", "experiments"):
        src_root = demo_dir / kind
        if not src_root.is_dir():
            continue
        dst_root = settings.data_dir / kind
        dst_root.mkdir(parents=True, exist_ok=True)
        for src in sorted(src_root.iterdir()):
            dst = dst_root / src.name
            if src.is_dir() and not dst.exists():
                shutil.copytree(src, dst)
                copied.append(src.name)
    marker.write_text("\n".join(copied) + "\n")
    return copied
