"""Host-level settings, read from the environment (prefix ``SERVELAB_``) when asked for,
never at import time.

This is the one module that reads an environment variable by name: ServeLab's own settings
(``load_settings`` -> ``Settings``, the portal's access variables included) and the few
variables others set for this process (``CUDA_VISIBLE_DEVICES``, set per run by Ray;
``BROWSER_PATH``; the ones passed on to Ray nodes): the functions at the end. Passing the
whole environment on to a child process (``{**os.environ, ...}``) is not reading it.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from core.errors import ConfigError

__all__ = [
    "Settings",
    "browser_path",
    "cuda_visible_devices",
    "environ_values",
    "load_settings",
    "model_roots_from_env",
]

REPO_ROOT = Path(__file__).resolve().parent.parent
# The shipped H200 demo's run and experiment folders (core/portal/demo.py installs them).
DEMO_DIR = REPO_ROOT / "data" / "demo"
# The shipped request traces (Mooncake, with their licence): a workload's trace may name one.
WORKLOADS_DIR = REPO_ROOT / "data" / "workloads"
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
    # Who may use the portal (core/portal/access.py): the address it listens on, shared
    # sign-in tokens, and with OIDC login who may launch / view (addresses or @domain).
    bind: str = "127.0.0.1"
    token_view: str | None = None
    token_launch: str | None = None
    launchers: tuple[str, ...] = ()
    viewers: tuple[str, ...] = ()
    # How long a token sign-in is remembered in the browser (core/portal/session.py), and
    # the secret that signs it (unset: one generated into data_dir/session-secret, 0600).
    session_hours: float = 12.0
    session_secret: str | None = None

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


MIN_SESSION_SECRET_LEN = 32


def _session_hours(text: str | None) -> float:
    if text is None or not text.strip():
        return 12.0
    try:
        hours = float(text)
    except ValueError:
        hours = math.nan
    if not math.isfinite(hours) or hours <= 0:
        raise ConfigError(
            "SERVELAB_SESSION_HOURS",
            f"must be a positive number of hours, e.g. 12 (got {text!r}); it is how long "
            "a token sign-in is remembered in the browser",
        )
    return hours


def _session_secret(text: str | None) -> str | None:
    if not text:
        return None
    if len(text) < MIN_SESSION_SECRET_LEN:
        raise ConfigError(
            "SERVELAB_SESSION_SECRET",
            f"must be at least {MIN_SESSION_SECRET_LEN} characters (e.g. `python -c 'import "
            "secrets; print(secrets.token_urlsafe(32))'`), or unset it to use the one "
            "generated into the data folder",
        )
    return text


def _names(text: str) -> tuple[str, ...]:
    return tuple(n.strip().lower() for n in text.split(",") if n.strip())


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    """The settings of this process's environment (``env``: another one, e.g. in tests).
    Raises ``ConfigError`` naming the variable when a value cannot be used."""
    env = os.environ if env is None else env
    return Settings(
        data_dir=Path(env.get("SERVELAB_DATA_DIR", str(REPO_ROOT / "data"))).resolve(),
        sglang_python=env.get("SERVELAB_SGLANG_PYTHON", sys.executable),
        transformers_python=env.get("SERVELAB_TRANSFORMERS_PYTHON", sys.executable),
        worker_enabled=env.get("SERVELAB_WORKER", "on").lower() not in ("off", "0", "false"),
        model_roots=model_roots_from_env(env),
        executor=env.get("SERVELAB_EXECUTOR", "local").strip().lower() or "local",
        ray_address=env.get("SERVELAB_RAY_ADDRESS", "").strip() or None,
        ray_forward_env=tuple(
            n.strip() for n in env.get("SERVELAB_RAY_FORWARD_ENV", "").split(",") if n.strip()
        ),
        ray_repo=Path(env.get("SERVELAB_RAY_REPO", str(REPO_ROOT))),
        event_loop="asyncio" if env.get("SERVELAB_EVENT_LOOP") == "asyncio" else "auto",
        json_parser="json" if env.get("SERVELAB_JSON") == "json" else "auto",
        bind=env.get("SERVELAB_BIND", "").strip() or "127.0.0.1",
        token_view=env.get("SERVELAB_TOKEN_VIEW") or None,
        token_launch=env.get("SERVELAB_TOKEN_LAUNCH") or None,
        launchers=_names(env.get("SERVELAB_LAUNCHERS", "")),
        viewers=_names(env.get("SERVELAB_VIEWERS", "")),
        session_hours=_session_hours(env.get("SERVELAB_SESSION_HOURS")),
        session_secret=_session_secret(env.get("SERVELAB_SESSION_SECRET")),
    )


# --- variables of the process environment that are not ServeLab's own ---------------------


def cuda_visible_devices() -> str | None:
    """``CUDA_VISIBLE_DEVICES`` as this process was given it (Ray sets it per run; unset:
    every GPU), read each time it is asked."""
    return os.environ.get("CUDA_VISIBLE_DEVICES")


def browser_path() -> str | None:
    """``BROWSER_PATH``: the chromium for PNG export (core/interop/export_png.py), if set."""
    return os.environ.get("BROWSER_PATH") or None


def environ_values(names: Iterable[str]) -> dict[str, str]:
    """The variables among ``names`` that are set here, e.g. the ones passed on to runs on
    Ray nodes (``Settings.ray_forward_env``, ``PYTHONPATH``, ``HF_HOME``)."""
    return {n: os.environ[n] for n in names if n in os.environ}
