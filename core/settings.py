"""Host-level settings, read once from the environment (prefix ``SERVELAB_``).

Nothing else in ``core`` reads environment variables for its own configuration.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Settings", "load_settings"]

REPO_ROOT = Path(__file__).resolve().parent.parent
# The shipped H200 demo's run and experiment folders (core/portal/demo.py installs them).
DEMO_DIR = REPO_ROOT / "data" / "demo"
# Where model and tokenizer folders may live (besides data/models), unless
# SERVELAB_MODEL_ROOTS (os.pathsep-separated) says otherwise. See core/safety.py.
DEFAULT_MODEL_ROOTS = ("~", "/models", "/opt", "/mnt", "/data")


def model_roots_from_env(env: Mapping[str, str] | None = None) -> tuple[Path, ...]:
    raw = (os.environ if env is None else env).get("SERVELAB_MODEL_ROOTS", "")
    parts = [p.strip() for p in raw.split(os.pathsep) if p.strip()] or DEFAULT_MODEL_ROOTS
    roots = []
    for part in parts:
        try:
            roots.append(Path(part).expanduser())
        except RuntimeError:  # ~user without a home here: not a root
            continue
    return tuple(roots)


@dataclass(frozen=True)
class Settings:
    data_dir: Path
    # The Python that has SGLang installed (SGLang usually lives in its own venv).
    sglang_python: str
    # The Python that runs `transformers serve` (defaults to ServeLab's own).
    transformers_python: str
    # The portal's worker starts queued runs; off in page tests (SERVELAB_WORKER=off).
    worker_enabled: bool = True
    # Folders model/tokenizer paths must be inside (data/models is always allowed).
    model_roots: tuple[Path, ...] = field(default_factory=model_roots_from_env)
    # Where queued runs execute by default: "local" (this host) or "ray" (core/executors).
    executor: str = "local"
    # The Ray cluster for the ray executor (ray.init(address=...)), e.g. "10.0.0.5:6379".
    ray_address: str | None = None
    # Names of environment variables passed on to runs on Ray nodes (besides ServeLab's own).
    ray_forward_env: tuple[str, ...] = ()
    # The ServeLab checkout on the Ray nodes (default: the same path as here).
    ray_repo: Path = REPO_ROOT
    # The load generator's event loop: "auto" = uvloop where installed, "asyncio" forces
    # asyncio's (SERVELAB_EVENT_LOOP=asyncio, to measure one against the other).
    event_loop: str = "auto"
    # Its JSON parser per chunk: "auto" = orjson where installed, "json" forces the stdlib's
    # (SERVELAB_JSON=json). Both reach every shard worker through core.load.requests.ClientOptions.
    json_parser: str = "auto"

    @property
    def allowed_model_roots(self) -> tuple[Path, ...]:
        return (self.models_dir, *self.model_roots)

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
        executor=env.get("SERVELAB_EXECUTOR", "local").strip().lower() or "local",
        ray_address=env.get("SERVELAB_RAY_ADDRESS", "").strip() or None,
        ray_forward_env=tuple(
            n.strip() for n in env.get("SERVELAB_RAY_FORWARD_ENV", "").split(",") if n.strip()
        ),
        ray_repo=Path(env.get("SERVELAB_RAY_REPO", str(REPO_ROOT))),
        event_loop="asyncio" if env.get("SERVELAB_EVENT_LOOP") == "asyncio" else "auto",
        json_parser="json" if env.get("SERVELAB_JSON") == "json" else "auto",
    )
