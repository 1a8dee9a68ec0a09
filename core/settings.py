"""Host-level settings, read once from the environment (prefix ``SERVELAB_``).

Nothing else in ``core`` reads environment variables for its own configuration.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Settings", "load_settings"]

REPO_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Settings:
    data_dir: Path
    # The Python that has SGLang installed (SGLang usually lives in its own venv).
    sglang_python: str
    # The Python that runs `transformers serve` (defaults to ServeLab's own).
    transformers_python: str
    # The portal's worker starts queued runs; off in page tests (SERVELAB_WORKER=off).
    worker_enabled: bool = True

    @property
    def runs_dir(self) -> Path:
        return self.data_dir / "runs"

    @property
    def models_dir(self) -> Path:
        return self.data_dir / "models"

    @property
    def catalog_path(self) -> Path:
        return self.data_dir / "servelab.duckdb"


def load_settings() -> Settings:
    env = os.environ
    return Settings(
        data_dir=Path(env.get("SERVELAB_DATA_DIR", str(REPO_ROOT / "data"))).resolve(),
        sglang_python=env.get("SERVELAB_SGLANG_PYTHON", sys.executable),
        transformers_python=env.get("SERVELAB_TRANSFORMERS_PYTHON", sys.executable),
        worker_enabled=env.get("SERVELAB_WORKER", "on").lower() not in ("off", "0", "false"),
    )
