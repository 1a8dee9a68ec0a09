"""The sanity probe against a real HTTP server on loopback: the answer is read only as far
as it needs to be, and a server that ignores ``stream`` still gets judged."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from core.config import ProbeSpec
from core.run.probe import run_probe

TOKENS = ["The", " capital", " of", " France", " is", " Paris", ".", " It", " is", " lovely"]


class _Handler(BaseHTTPRequestHandler):
    stream = True  # False: answer in one JSON piece although asked to stream
    events: list[dict[str, object]] | None = None  # the stream's events (default: TOKENS)

    def log_message(self, *_args: object) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if not type(self).stream:
            answer = "".join(TOKENS)
            data = json.dumps({"choices": [{"message": {"content": answer}}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        assert body["stream"] is True and body["max_tokens"] == 16
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        events = type(self).events or [{"choices": [{"delta": {"content": t}}]} for t in TOKENS]
        try:
            for event in events:
                self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
                self.wfile.flush()
                threading.Event().wait(0.05)  # a slow engine: one token at a time
            self.wfile.write(b"data: [DONE]\n\n")
        except (BrokenPipeError, ConnectionResetError):
            pass


@pytest.fixture
def server() -> Iterator[str]:
    _Handler.stream, _Handler.events = True, None
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_probe_stops_reading_once_the_answer_matches(server: str) -> None:
    result = run_probe(server, "m", ProbeSpec(expect="(?i)paris"))
    assert result.passed and result.answer == "The capital of France is Paris"


def test_probe_without_pattern_reads_the_whole_bounded_answer(server: str) -> None:
    result = run_probe(server, "m", ProbeSpec(expect=None))
    assert result.passed and result.answer == "".join(TOKENS)


def test_probe_that_does_not_match_says_what_it_got(server: str) -> None:
    result = run_probe(server, "m", ProbeSpec(expect="(?i)berlin"))
    assert not result.passed and "Paris" in result.reason


def test_a_server_that_ignores_stream_is_judged_on_its_whole_answer(server: str) -> None:
    _Handler.stream = False
    result = run_probe(server, "m", ProbeSpec(expect="(?i)paris"))
    assert result.passed and result.answer == "".join(TOKENS)


def test_a_reasoning_models_thinking_is_read_as_the_load_generator_reads_it(server: str) -> None:
    """One reading of a chat stream (core/load/openai.py): reasoning_content is text too."""
    _Handler.events = [
        {"choices": [{"delta": {"reasoning_content": "France's capital: "}}]},
        {"choices": [{"delta": {"content": "Paris"}}]},
    ]
    result = run_probe(server, "m", ProbeSpec(expect="(?i)paris"))
    assert result.passed and result.answer == "France's capital: Paris"


def test_an_error_in_the_stream_fails_the_probe_and_says_it(server: str) -> None:
    _Handler.events = [
        {"choices": [{"delta": {"content": "The"}}]},
        {"error": {"message": "CUDA out of memory"}},
    ]
    result = run_probe(server, "m", ProbeSpec(expect="(?i)paris"))
    assert not result.passed and result.answer == "The"
    assert result.reason.startswith("server error in stream") and "out of memory" in result.reason


def test_a_degenerate_stream_is_a_warning_not_a_pass(server: str) -> None:
    """SmolLM2's 'messagemessage…' (the shipped demo's probe): the run goes on, amber."""
    _Handler.events = [{"choices": [{"delta": {"content": "message"}}]} for _ in range(8)]
    result = run_probe(server, "m", ProbeSpec(expect=None))  # any answer: the demo's probe
    assert result.answer == "message" * 8
    assert result.passed and result.verdict == "warning"
    assert "'message' repeated 8 times" in result.reason


def test_tokens_that_read_as_no_text_are_a_warning_only_where_the_server_counts_them(
    server: str,
) -> None:
    """vLLM 0.26 on the Llama-3.1-8B shape with dummy weights and SmolLM2's tokenizer (H100,
    2026-12-06): greedy ids beyond the tokenizer's 49,152 decode to nothing, so the stream
    carries empty deltas and the usage event counts 16 tokens. That server works: amber, not
    invalid. Without the count (or with a pattern to match) an empty answer still fails."""
    empty = [{"choices": [{"delta": {"content": ""}}]} for _ in range(16)]
    usage = {"choices": [], "usage": {"prompt_tokens": 20, "completion_tokens": 16}}
    _Handler.events = [*empty, usage]
    result = run_probe(server, "m", ProbeSpec(expect=None))
    assert result.passed and result.verdict == "warning" and result.output_tokens == 16
    assert "generated 16 tokens" in result.reason
    assert not run_probe(server, "m", ProbeSpec(expect="(?i)paris")).passed
    _Handler.events = empty  # a server that reports no usage: nothing says it generated
    result = run_probe(server, "m", ProbeSpec(expect=None))
    assert not result.passed and result.reason == "empty answer"
