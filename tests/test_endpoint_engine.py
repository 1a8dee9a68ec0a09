"""The endpoint engine picks how to ask for exact output lengths by asking the server:
``ignore_eos`` where it is honoured (SGLang: the fake server, a real process), the
``generation_config`` of ``transformers serve`` where ``ignore_eos`` is refused with HTTP 422,
none where neither works; the run records which one it used."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from core.engines.endpoint import choose_exact_length
from core.run.launcher import ManagedServer, free_port
from core.run_folder import RunFolder
from core.settings import Settings

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def fake_sglang_url(fake_sglang: Path, tmp_path: Path) -> Iterator[str]:
    """The fake SGLang server, ending replies after 2 tokens unless ignore_eos is set."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = ManagedServer(
        [sys.executable, "-m", "sglang.launch_server", "--model-path", "m", "--port", str(port)],
        tmp_path / "server.log",
        url + "/health",
        {"FAKE_SGLANG_EOS_AFTER": "2", "FAKE_SGLANG_STARTUP_S": "0.1"},
    )
    server.start()
    try:
        server.wait_ready(60)
        yield url
    finally:
        server.stop()


class _StrictServer(BaseHTTPRequestHandler):
    """What `transformers serve` 5.24 does with these fields (docs/ENGINES.md): HTTP 422
    for ``ignore_eos``; ``generation_config={"eos_token_id": -1}`` runs to max_tokens.
    ``honour_generation_config=False``: a server that takes the field and ignores it."""

    honour_generation_config = True

    def log_message(self, *_args: object) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if "ignore_eos" in body:
            self._send(
                422,
                {
                    "detail": [
                        {"loc": ["body", "ignore_eos"], "msg": "Extra inputs are not permitted"}
                    ]
                },
            )
            return
        config = json.loads(body.get("generation_config") or "{}")
        full = config.get("eos_token_id") == -1 and type(self).honour_generation_config
        tokens = body["max_tokens"] if full else 2
        self._send(
            200,
            {
                "choices": [
                    {
                        "message": {"content": "OK " * tokens},
                        "finish_reason": "length" if full else "stop",
                    }
                ],
                "usage": {"completion_tokens": tokens},
            },
        )

    def _send(self, code: int, payload: dict[str, object]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def strict_url() -> Iterator[str]:
    _StrictServer.honour_generation_config = True
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _StrictServer)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_sglang_gets_ignore_eos(fake_sglang_url: str) -> None:
    mechanism, body, why = choose_exact_length(fake_sglang_url, "m")
    assert (mechanism, body) == ("ignore_eos", {"ignore_eos": True})
    assert "full length" in why


def test_a_server_that_refuses_ignore_eos_gets_generation_config(strict_url: str) -> None:
    mechanism, body, why = choose_exact_length(strict_url, "m")
    assert mechanism == "generation_config"
    assert json.loads(body["generation_config"]) == {"eos_token_id": -1}
    assert "ignore_eos: refused with HTTP 422" in why


def test_no_mechanism_when_the_server_ignores_every_one(strict_url: str) -> None:
    _StrictServer.honour_generation_config = False
    mechanism, body, why = choose_exact_length(strict_url, "m")
    assert (mechanism, body) == ("none", {})
    assert "stopped after 2 token(s)" in why and "not exact" in why


def _endpoint_run(
    settings: Settings, url: str, tokenizer: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    """`python -m core run --engine endpoint` at ``url``, 6 output tokens, no probe."""
    env = {**os.environ, "SERVELAB_DATA_DIR": str(settings.data_dir)}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "core",
            "run",
            "--engine",
            "endpoint",
            "--endpoint-url",
            url,
            "--model",
            "m",
            "--tokenizer",
            str(tokenizer),
            "--no-probe",
            *args,
            "--output-len",
            "6",
            "--quiet",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_an_endpoint_run_records_the_mechanism_and_gets_exact_lengths(
    fake_sglang_url: str, settings: Settings, tiny_tokenizer_dir: Path
) -> None:
    out = _endpoint_run(
        settings, fake_sglang_url, tiny_tokenizer_dir, "--concurrency", "2", "--num-prompts", "4"
    )
    assert out.returncode == 0, out.stdout + out.stderr
    (path,) = settings.runs_dir.iterdir()
    folder = RunFolder(path)
    launch = folder.read("launch.json")
    assert launch["exact_length"]["mechanism"] == "ignore_eos"
    assert launch["exact_length_body"] == {"ignore_eos": True}
    step = next(s for s in folder.status()["steps"] if s["step"] == "exact_length")
    assert step["outcome"] == "ok" and step["detail"].startswith("ignore_eos: ")
    records = pq.read_table(path / "points/000/records.parquet").to_pylist()
    assert [r["output_tokens_server"] for r in records] == [6] * 4  # not cut at 2


def test_switched_off_exact_lengths_ask_nothing_and_say_so(
    fake_sglang_url: str, settings: Settings, tiny_tokenizer_dir: Path
) -> None:
    out = _endpoint_run(
        settings,
        fake_sglang_url,
        tiny_tokenizer_dir,
        "--no-exact-length",
        "--concurrency",
        "1",
        "--num-prompts",
        "2",
    )
    assert out.returncode == 0, out.stdout + out.stderr
    (path,) = settings.runs_dir.iterdir()
    folder = RunFolder(path)
    assert folder.read("launch.json")["exact_length"] == {
        "mechanism": "none",
        "why": "plan.ignore_eos is off",
    }
    assert not any(s["step"] == "exact_length" for s in folder.status()["steps"])
    records = pq.read_table(path / "points/000/records.parquet").to_pylist()
    assert [r["output_tokens_server"] for r in records] == [2, 2]  # the model's own EOS
