"""The errors a ServeLab user sees.

Every error names what went wrong and, where there is one, the fix. Per-request
failures during a benchmark are data (``RequestRecord.error``), never exceptions.

    ServeLabError
    ├── ConfigError            bad input: names the field and the fix
    ├── EngineUnavailable      the engine or one of its flags is not installed here
    ├── ServerLaunchError      the server did not become ready
    │   ├── ServerExitedError  the process exited (exit code, log tail)
    │   └── ServerStartTimeout never ready within startup_timeout_s (log tail)
    ├── ProbeFailed            the sanity probe's answer did not match
    ├── RunCancelled           the user cancelled the run
    └── StoreError             the catalog or a run folder could not be read or written
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "EngineUnavailable",
    "ProbeFailed",
    "RunCancelled",
    "ServeLabError",
    "ServerExitedError",
    "ServerLaunchError",
    "ServerStartTimeout",
    "StoreError",
]


class ServeLabError(Exception):
    """Base of every error ServeLab raises on purpose."""


class ConfigError(ServeLabError):
    """Invalid input; ``field`` names it so a form can show the message beside it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class EngineUnavailable(ServeLabError):
    """The engine, or a flag the configuration needs, is not available on this host."""


class ServerLaunchError(ServeLabError):
    """The server never became ready."""

    def __init__(self, message: str, log_tail: str = "") -> None:
        super().__init__(message)
        self.log_tail = log_tail


class ServerExitedError(ServerLaunchError):
    """The server process exited before (or while) it was needed."""

    def __init__(self, exit_code: int | None, log_tail: str = "", reason: str = "") -> None:
        what = reason or "the server process exited"
        super().__init__(f"{what} (exit code {exit_code})", log_tail)
        self.exit_code = exit_code
        self.reason = reason


class ServerStartTimeout(ServerLaunchError):
    """The server was alive but not ready within ``startup_timeout_s``."""

    def __init__(self, startup_timeout_s: float, log_tail: str = "") -> None:
        super().__init__(
            f"server not ready after {startup_timeout_s:.0f} s "
            "(raise startup_timeout_s if the model is large)",
            log_tail,
        )
        self.startup_timeout_s = startup_timeout_s


class ProbeFailed(ServeLabError):
    """The sanity probe's answer did not match the expected pattern."""

    def __init__(self, message: str, answer: str) -> None:
        super().__init__(message)
        self.answer = answer


class RunCancelled(ServeLabError):
    """The run was cancelled on request."""


class StoreError(ServeLabError):
    """The catalog or a run folder could not be read or written."""
