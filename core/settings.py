"""Host-level settings, read from the environment (prefix ``SERVELAB_``) when asked for,
never at import time.

This is the one module that reads an environment variable by name: ServeLab's own settings
(``load_settings`` -> ``Settings``, the portal's access variables included) and the few
variables others set for this process (``CUDA_VISIBLE_DEVICES``, set per run by Ray;
``BROWSER_PATH``; the ones passed on to Ray nodes): the functions at the end. Passing the
whole environment on to a child process (``{**os.environ, ...}``) is not reading it.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from core.errors import ConfigError

__all__ = [
    "ENGINES_VAR",
    "INSTALLS_FILE",
    "INSTALLS_VAR",
    "INSTALL_NAME",
    "EngineInstall",
    "Settings",
    "browser_path",
    "cuda_visible_devices",
    "engine_modules_text",
    "environ_values",
    "installs_text",
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


# A named engine installation (README "Engines"): letters, digits and . _ - , e.g.
# sglang-0.5.14. The name is stored with every run, so it is short.
INSTALL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
# Engines besides the built-in ones (core/engines/registry.py; docs/ENGINES.md): entries
# NAME=MODULE separated by ";", e.g. "myengine=pkg.engine". A variable, so that every run
# process the worker starts sees the same engines as the portal that queued the run.
ENGINES_VAR = "SERVELAB_ENGINES"

# Named engine installations (README "Engines"): a JSON file in the data folder and this
# variable; the variable's entry wins over the file's of the same name.
INSTALLS_FILE = "engine-installs.json"
INSTALLS_VAR = "SERVELAB_ENGINE_INSTALLS"
# An engine's name as an installation entry gives it ("sglang:/opt/..."); which engines
# exist is the registry's (core/engines/registry.py), checked when the installation is used.
_ENGINE_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,31}")
_INSTALL_FIX = (
    f'e.g. {{"sglang-0.5.14": {{"engine": "sglang", "python": '
    f'"/opt/sglang-0.5.14/bin/python"}}}} in {INSTALLS_FILE}, or '
    f"{INSTALLS_VAR}='sglang-0.5.14=/opt/sglang-0.5.14/bin/python;"
    "name2=transformers:/opt/tf/bin/python'"
)


@dataclass(frozen=True)
class EngineInstall:
    """One named installation of an engine: the Python (or a wrapper script that execs
    one) that runs it. Runs choose one by name (``server.engine_install``)."""

    name: str
    engine: str  # "sglang" or "transformers"
    python: str
    source: str  # where it is defined: the file's path or the variable's name


@dataclass(frozen=True)
class Settings:
    data_dir: Path
    # The Python that has SGLang installed (SGLang usually lives in its own venv).
    sglang_python: str
    # The Python that runs `transformers serve` (defaults to ServeLab's own).
    transformers_python: str
    # The Python that has vLLM (SERVELAB_VLLM_PYTHON; its own virtual environment, usually).
    vllm_python: str = sys.executable
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
    # Named engine installations besides the default ones above (INSTALLS_FILE, INSTALLS_VAR).
    engine_installs: tuple[EngineInstall, ...] = ()
    # Where engine detection keeps what it learned (core/engines/detect_cache.py); None:
    # data_dir/cache. SERVELAB_CACHE_DIR lets several data folders (and a test session's
    # many temporary ones) share one: reading an option list costs seconds each time.
    cache_dir: Path | None = None

    def engine_install(self, name: str) -> EngineInstall | None:
        return next((i for i in self.engine_installs if i.name == name), None)

    def engine_python(self, engine: str, install: str | None = None) -> str:
        """The Python that runs ``engine``: the named installation's, or (None) the
        default one. ConfigError on ``server.engine_install`` for a name not configured
        here or an installation of another engine."""
        if install is None:
            # The default: the engine's own setting (SERVELAB_<ENGINE>_PYTHON) where it
            # has one, else the Python running ServeLab.
            default = getattr(self, f"{engine}_python", None)
            return default if isinstance(default, str) else sys.executable
        found = self.engine_install(install)
        if found is None:
            known = ", ".join(i.name for i in self.engine_installs) or "none"
            raise ConfigError(
                "server.engine_install",
                f"no engine installation named {install!r} here (configured: {known}); "
                f"define it in {self.data_dir / INSTALLS_FILE} or {INSTALLS_VAR} (README, "
                "'Engines'), or leave it unset for the default installation",
            )
        if found.engine != engine:
            raise ConfigError(
                "server.engine_install",
                f"{install} is an installation of {found.engine}, and server.engine is "
                f"{engine}: choose a {engine} installation or set server.engine={found.engine}",
            )
        return found.python

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

    @property
    def detect_cache_dir(self) -> Path:
        return self.cache_dir if self.cache_dir is not None else self.data_dir / "cache"


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


def _install(name: str, value: object, source: str) -> EngineInstall:
    """One entry: ``"python"`` (the engine read from the name's start) or
    ``{"engine": ..., "python": ...}``; ConfigError naming where it is and the fix."""
    where = f"{source}: entry {name!r}"
    if not INSTALL_NAME.fullmatch(name):
        raise ConfigError(
            INSTALLS_VAR if source == INSTALLS_VAR else source,
            f"{where}: a name is letters, digits and . _ - (up to 64, e.g. sglang-0.5.14); "
            + _INSTALL_FIX,
        )
    if isinstance(value, str):
        head, sep, rest = value.partition(":")
        if sep and _ENGINE_WORD.fullmatch(head):
            value = {"engine": head, "python": rest}
        else:  # the engine from the name: sglang-0.5.14
            lead, dash, _ = name.partition("-")
            value = {"engine": lead if dash else "", "python": value}
    if not isinstance(value, dict) or set(value) - {"engine", "python"}:
        raise ConfigError(
            source, f"{where}: give the python path, or engine and python; " + _INSTALL_FIX
        )
    engine, python = value.get("engine"), value.get("python")
    if not isinstance(engine, str) or not _ENGINE_WORD.fullmatch(engine):
        raise ConfigError(
            source,
            f"{where}: name the engine (got {engine!r}; a name starting with the engine's "
            "and a dash, e.g. sglang-0.5.14, needs none); " + _INSTALL_FIX,
        )
    if not isinstance(python, str) or not python.strip():
        raise ConfigError(
            source,
            f"{where}: python must be the path of the installation's Python (or a "
            "wrapper script that execs it); " + _INSTALL_FIX,
        )
    return EngineInstall(name, str(engine), python.strip(), source)


def _engine_installs(data_dir: Path, text: str) -> tuple[EngineInstall, ...]:
    """The installations of ``data_dir``'s INSTALLS_FILE, then INSTALLS_VAR's
    (``name=python;name=engine:python``), the variable's winning on a shared name."""
    found: dict[str, EngineInstall] = {}
    path = data_dir / INSTALLS_FILE
    if path.is_file():
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError(
                str(path), f"cannot be read as JSON ({exc}); " + _INSTALL_FIX
            ) from exc
        if not isinstance(data, dict):
            raise ConfigError(str(path), "must be a JSON object of name: entry; " + _INSTALL_FIX)
        for name, value in data.items():
            found[name] = _install(str(name), value, str(path))
    for item in (t.strip() for t in text.split(";")):
        if not item:
            continue
        name, sep, value = item.partition("=")
        if not sep or not value.strip():
            raise ConfigError(INSTALLS_VAR, f"entry {item!r} is not name=python; " + _INSTALL_FIX)
        found[name.strip()] = _install(name.strip(), value.strip(), INSTALLS_VAR)
    return tuple(found.values())


def installs_text(installs: Iterable[EngineInstall]) -> str:
    """INSTALLS_VAR's value for ``installs`` (what a run process is given: it then sees
    the same installations whatever its data folder holds)."""
    return ";".join(f"{i.name}={i.engine}:{i.python}" for i in installs)


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    """The settings of this process's environment (``env``: another one, e.g. in tests).
    Raises ``ConfigError`` naming the variable when a value cannot be used."""
    env = os.environ if env is None else env
    data_dir = Path(env.get("SERVELAB_DATA_DIR", str(REPO_ROOT / "data"))).resolve()
    return Settings(
        data_dir=data_dir,
        sglang_python=env.get("SERVELAB_SGLANG_PYTHON", sys.executable),
        vllm_python=env.get("SERVELAB_VLLM_PYTHON", sys.executable),
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
        engine_installs=_engine_installs(data_dir, env.get(INSTALLS_VAR, "")),
        cache_dir=Path(env["SERVELAB_CACHE_DIR"]).resolve()
        if env.get("SERVELAB_CACHE_DIR", "").strip()
        else None,
    )


# --- variables of the process environment that are not ServeLab's own ---------------------


def cuda_visible_devices() -> str | None:
    """``CUDA_VISIBLE_DEVICES`` as this process was given it (Ray sets it per run; unset:
    every GPU), read each time it is asked."""
    return os.environ.get("CUDA_VISIBLE_DEVICES")


def browser_path() -> str | None:
    """``BROWSER_PATH``: the chromium for PNG export (core/interop/export_png.py), if set."""
    return os.environ.get("BROWSER_PATH") or None


def engine_modules_text() -> str:
    """``SERVELAB_ENGINES`` (ENGINES_VAR) as this process was given it, read each time."""
    return os.environ.get(ENGINES_VAR, "")


def environ_values(names: Iterable[str]) -> dict[str, str]:
    """The variables among ``names`` that are set here, e.g. the ones passed on to runs on
    Ray nodes (``Settings.ray_forward_env``, ``PYTHONPATH``, ``HF_HOME``)."""
    return {n: os.environ[n] for n in names if n in os.environ}
