"""Input safety shared by the launch form, the CLI, imports and the run process.

* **Model paths** (``server.model``, ``server.tokenizer``) are confined to the allowed
  model roots (``Settings.allowed_model_roots``: ``data/models`` plus ``SERVELAB_MODEL_ROOTS``,
  by default the home folder, ``/models``, ``/opt``, ``/mnt`` and ``/data``). A value is
  the bundled default, a hub id (``name`` or ``owner/name``, when no such folder exists
  relative to the working directory), or an absolute path (``~`` expanded) that resolves,
  symlinks followed, inside one of the roots. Anything else is refused with a message.
* **Secrets** passed to an engine (``--api-key X``, ``--admin-api-key=X``, environment
  variables named like ``*_TOKEN``) never reach a stored file: ``redact_argv`` and
  ``redact_env`` are what ``launch.json``/``server.log`` show, ``split_secrets`` takes them
  out of ``spec.json`` (the run process gets them back from a private, short-lived
  ``.secrets.json``, see ``RunFolder``), and ``scrub`` removes their values from anything
  an engine echoed (facts, logs).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from core.config import DEFAULT_MODEL, ServerConfig
from core.engines.registry import find_engine

__all__ = [
    "REDACTED",
    "api_key",
    "is_secret_flag",
    "is_secret_name",
    "model_path_problem",
    "redact_argv",
    "redact_env",
    "redact_spec",
    "restore_secrets",
    "scrub",
    "secret_values",
    "server_path_problems",
    "split_secrets",
]

REDACTED = "***"
# A name is secret when one of its `-`/`_`-separated words is one of these (so `--hf-token`
# and `OPENAI_API_KEY` are, `--max-total-tokens` and `--tokenizer-path` are not).
_SECRET_WORDS = frozenset(
    {"token", "secret", "password", "passwd", "credential", "credentials", "apikey"}
)
# A hub id: `name` or `owner/name` (no leading dot, no `..`).
_HUB_ID_RE = re.compile(r"[A-Za-z0-9][\w.\-]{0,95}(?:/[A-Za-z0-9_][\w.\-]{0,95})?")
_MIN_SECRET_LEN = 4  # shorter values are not scrubbed from text (too many false hits)


# --- model paths ----------------------------------------------------------------------------


def model_path_problem(
    value: str, roots: Sequence[Path], *, must_exist: bool, cwd: Path | None = None
) -> str | None:
    """Why ``value`` may not be used as a model or tokenizer location; None when it may.

    ``roots`` are the allowed folders; ``must_exist`` also requires a path to exist (at
    launch time, not when a stored spec is read back on another host)."""
    where = ", ".join(str(r) for r in roots)
    try:
        path = Path(value).expanduser() if value.startswith("~") else Path(value)
    except RuntimeError:  # ~someone who has no home here
        return f"{value[:80]!r}: cannot find that home folder; give an absolute path"
    if not path.is_absolute():
        if not _HUB_ID_RE.fullmatch(value) or ".." in value:
            return (
                f"{value[:80]!r} is neither an absolute path nor a hub id (owner/name); "
                f"give the model folder's absolute path inside one of: {where}"
            )
        local = (cwd or Path.cwd()) / value
        if not local.exists():
            return None  # a hub id: the engine fetches (or finds in its cache) by name
        path = local
    try:
        resolved = path.resolve()
    except (OSError, RuntimeError) as exc:  # a symlink loop, an unreadable folder
        return f"{value[:80]!r} cannot be resolved: {exc}"
    for root in roots:
        try:
            if resolved.is_relative_to(root.expanduser().resolve()):
                break
        except (OSError, RuntimeError):
            continue
    else:
        return (
            f"{value[:80]!r} is outside the allowed model folders ({where}); move the "
            "model into one of them or add its folder to SERVELAB_MODEL_ROOTS"
        )
    if must_exist and not resolved.exists():
        return f"{value[:80]!r} does not exist on this host"
    return None


def server_path_problems(
    server: ServerConfig, roots: Sequence[Path], *, must_exist: bool
) -> dict[str, str]:
    """{field: why} for ``server.model`` and ``server.tokenizer``; {} when both may be used.

    The endpoint engine's model is the name the server serves under, checked as a path
    only when it looks like one (it may be read as the tokenizer)."""
    out: dict[str, str] = {}
    model = server.model
    path_like = model.startswith(("/", "~", "."))
    # else: an endpoint's served name. An unknown engine (refused by the config check, with
    # this one in the same pass) gets the strict check of a launched one.
    spec = find_engine(server.engine)
    launched = spec is None or spec.launched
    if model != DEFAULT_MODEL and (launched or path_like):
        exist = must_exist and launched
        if why := model_path_problem(model, roots, must_exist=exist):
            out["server.model"] = why
    if server.tokenizer and (
        why := model_path_problem(server.tokenizer, roots, must_exist=must_exist)
    ):
        out["server.tokenizer"] = why
    return out


# --- secrets ----------------------------------------------------------------------------------


def is_secret_name(name: str) -> bool:
    """``api_key``, ``HF_TOKEN``, ``--admin-api-key``: names whose values are secrets."""
    words = [w for w in re.split(r"[-_.]+", name.lower()) if w]
    return any(
        w in _SECRET_WORDS or (w == "key" and i > 0 and words[i - 1] == "api")
        for i, w in enumerate(words)
    )


def is_secret_flag(item: str) -> bool:
    """``--api-key``, ``--admin-api-key``, ``--hf-token``... (the flag part of an argv item)."""
    return item.startswith("-") and is_secret_name(item.split("=", 1)[0])


def _secret_slots(argv: Sequence[str]) -> Iterable[tuple[int, str, str]]:
    """(index, prefix, secret) for each argv item that holds a secret: the value after a
    secret flag, or the part after ``=`` of ``--flag=value``."""
    for i, item in enumerate(argv):
        if not is_secret_flag(item):
            continue
        if "=" in item:
            flag, value = item.split("=", 1)
            yield i, flag + "=", value
        elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            yield i + 1, "", argv[i + 1]


def redact_argv(argv: Sequence[str]) -> list[str]:
    """The argv as it may be stored or shown: every secret value replaced by ``***``."""
    out = [str(a) for a in argv]
    for i, prefix, _secret in _secret_slots(out):
        out[i] = prefix + REDACTED
    return out


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: (REDACTED if is_secret_name(k) and v else v) for k, v in env.items()}


def split_secrets(args: Sequence[str]) -> tuple[tuple[str, ...], dict[str, str]]:
    """(the args with secrets redacted, {index: original item}) for ``spec.json``."""
    redacted = redact_argv(args)
    hidden = {str(i): a for i, (a, r) in enumerate(zip(args, redacted, strict=True)) if a != r}
    return tuple(redacted), hidden


def restore_secrets(args: Sequence[str], hidden: Mapping[str, str]) -> tuple[str, ...]:
    """Undo ``split_secrets`` (only where the stored item still holds the placeholder)."""
    out = list(args)
    for key, original in hidden.items():
        if key.isdigit() and int(key) < len(out) and out[int(key)].endswith(REDACTED):
            out[int(key)] = original
    return tuple(out)


def secret_values(argv: Sequence[str], env: Mapping[str, str] | None = None) -> list[str]:
    """The secret strings in an argv (and an env), longest first, for ``scrub``."""
    values = {s for _i, _p, s in _secret_slots(list(argv))}
    values |= {v for k, v in (env or {}).items() if is_secret_name(k)}
    return sorted(
        (v for v in values if len(v) >= _MIN_SECRET_LEN and v != REDACTED), key=len, reverse=True
    )


def api_key(argv: Sequence[str]) -> str | None:
    """The value of ``--api-key`` in an engine argv: what a client must send as Bearer."""
    for i, item in enumerate(argv):
        if item == "--api-key" and i + 1 < len(argv):
            return argv[i + 1]
        if item.startswith("--api-key="):
            return item.split("=", 1)[1]
    return None


def redact_spec(data: Any) -> Any:
    """A spec dump (or anything holding spec dumps, e.g. an experiment) with every
    ``extra_args`` list redacted, for files that are not the run's own spec.json."""
    if isinstance(data, dict):
        return {
            k: redact_argv(v)
            if k == "extra_args" and isinstance(v, list | tuple)
            else redact_spec(v)
            for k, v in data.items()
        }
    if isinstance(data, list | tuple):
        return [redact_spec(v) for v in data]
    return data


def scrub(obj: Any, secrets: Sequence[str]) -> Any:
    """A copy of a JSON-like value with every secret string replaced by ``***``, and the
    value of every key named like a secret (``api_key``, ``hf_token``...) redacted."""
    if isinstance(obj, str):
        for s in secrets:
            obj = obj.replace(s, REDACTED)
        return obj
    if isinstance(obj, dict):
        return {
            k: (
                REDACTED
                if isinstance(k, str) and is_secret_name(k) and isinstance(v, str) and v
                else scrub(v, secrets)
            )
            for k, v in obj.items()
        }
    if isinstance(obj, list | tuple):
        return [scrub(v, secrets) for v in obj]
    return obj
