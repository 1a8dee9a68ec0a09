"""core/load/openai.py, the OpenAI-compatible API as the load generator, the probe, the run's
model discovery and the engines read it: a chat chunk into a record, a whole completion, the
models list, and the JSON parser chosen once per process."""

from __future__ import annotations

import json

import httpx
import pytest

from core.load.openai import (
    MODELS_PATH,
    Loads,
    chat_request,
    finish_stream,
    json_loads,
    loads_std,
    model_ids,
    read_chat_event,
    read_completion,
    served_models,
    sse_payloads,
)
from core.records import RequestRecord


def _rec() -> RequestRecord:
    return RequestRecord(index=0, send_s=0.0, prompt_tokens=3, output_tokens_requested=4)


@pytest.fixture(params=["auto", "json"])
def loads(request: pytest.FixtureRequest) -> Loads:
    """Each parser a run can choose (SERVELAB_JSON): both read a stream the same way."""
    return json_loads(request.param)[0]


def _events(rec: RequestRecord, payloads: list[bytes], loads: Loads) -> list[str]:
    parts: list[str] = []
    for k, data in enumerate(payloads):
        if read_chat_event(rec, data, float(k), parts, loads):
            break
    return parts


def test_a_stream_becomes_a_record_with_the_servers_counts(loads: Loads) -> None:
    rec = _rec()
    parts = _events(
        rec,
        [
            b'{"choices":[{"delta":{"role":"assistant"}}]}',
            b'{"choices":[{"delta":{"content":"Hel"}}]}',
            b'{"choices":[{"delta":{"reasoning_content":"lo"}}]}',
            b'{"choices":[{"delta":{"content":"!"},"finish_reason":"length"}]}',
            b'{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":3}}',
            b"[DONE]",
        ],
        loads,
    )
    finish_stream(rec, parts)
    assert rec.ok and rec.generated_text == "Hello!"
    assert rec.chunk_s == [1.0, 2.0, 3.0]  # one stamp per event with text, none for the role
    assert rec.finish_reason == "length" and rec.end_s == 5.0
    assert (rec.prompt_tokens_server, rec.output_tokens_server) == (3, 3)


@pytest.mark.parametrize(
    ("payload", "words"),
    [
        (b'{"error": {"message": "overloaded"}}', "server error in stream"),
        (b"{not json", "unparseable SSE data"),
        (b"[" * 5000, "unparseable SSE data"),  # a JSON bomb
        (b"[1, 2]", "malformed SSE event"),
        (b'{"choices": 7}', "malformed SSE event"),
        (b'{"choices": [{"delta": {"content": 5}}]}', "malformed SSE event"),
    ],
)
def test_a_bad_event_ends_the_request_with_the_reason(
    payload: bytes, words: str, loads: Loads
) -> None:
    rec = _rec()
    assert read_chat_event(rec, payload, 0.0, [], loads)
    assert rec.error is not None and rec.error.startswith(words)


def test_counts_that_are_not_token_counts_are_dropped() -> None:
    rec = _rec()
    usage = {"prompt_tokens": True, "completion_tokens": -1}
    read_chat_event(rec, json.dumps({"usage": usage}).encode(), 0.0, [], loads_std)
    assert rec.prompt_tokens_server is None and rec.output_tokens_server is None


@pytest.mark.parametrize(
    ("payloads", "error"),
    [
        ([b'{"choices":[{"delta":{"content":"a"}}]}'], "truncated"),  # no [DONE], no finish
        ([b'{"choices":[{"delta":{},"finish_reason":"stop"}]}'], "no content"),
        ([b'{"choices":[{"delta":{"content":"a"},"finish_reason":"stop"}]}'], None),  # no [DONE]
    ],
)
def test_how_a_stream_ended_decides_whether_it_is_complete(
    payloads: list[bytes], error: str | None
) -> None:
    rec = _rec()
    finish_stream(rec, _events(rec, payloads, loads_std))
    assert rec.ok is (error is None)
    assert error is None or error in (rec.error or "")


def test_sse_lines_split_across_reads_give_whole_payloads() -> None:
    events, rest = sse_payloads(b'data: {"a":1}\r\n\r\n: comment\ndata:{"b"')
    assert events == [b'{"a":1}'] and rest == b'data:{"b"'
    events, rest = sse_payloads(rest + b":2}\n\n")
    assert events == [b'{"b":2}'] and rest == b""


@pytest.mark.parametrize(
    "payload",
    [
        b'{"choices":[{"delta":{"content":"hi"}}]}',
        b' {"a": 1} ',
        b"[1, 2]",
        b'"x"',
        b"1e400",
        '{"content":"caf\u00e9 \u2603"}'.encode(),
    ],
)
def test_stdlib_chunk_parser_agrees_with_json_loads(payload: bytes) -> None:
    """The parser used where orjson is not installed reads what json.loads reads."""
    assert loads_std(payload) == json.loads(payload)


@pytest.mark.parametrize("payload", [b'{"a": 1} trailing', b"", b"{", b"[" * 100_000, b"nul"])
def test_stdlib_chunk_parser_refuses_what_json_loads_refuses(payload: bytes) -> None:
    with pytest.raises((ValueError, RecursionError)):
        loads_std(payload)


def test_the_parser_is_the_one_asked_for() -> None:
    pytest.importorskip("orjson")
    assert json_loads("auto")[1] == "orjson"
    assert json_loads("json") == (loads_std, "json")


def test_the_chat_request_is_greedy_and_streamed_with_the_engines_fields_last() -> None:
    body = chat_request("m", "hi", 8, usage=True, extra={"ignore_eos": True, "temperature": 1})
    assert body == {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 8,
        "temperature": 1,  # an engine's field wins
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
    }
    assert "stream_options" not in chat_request("m", "hi", 8, stream=False)


def test_a_whole_completion_gives_its_text_finish_and_count() -> None:
    body = {
        "choices": [{"message": {"content": "Paris"}, "finish_reason": "length"}],
        "usage": {"completion_tokens": 6},
    }
    assert read_completion(body) == ("Paris", "length", 6)
    assert read_completion({"choices": []}) == ("", None, None)
    for bad in ([1], {"choices": 7}, {"choices": [3]}, "x"):
        with pytest.raises(ValueError, match="not a chat completion"):
            read_completion(bad)


def test_models_list_ids_in_order_and_nothing_else() -> None:
    body = {"data": [{"id": "b"}, {"id": 3}, "x", {"name": "c"}, {"id": "a"}]}
    assert model_ids(body) == ["b", "a"]
    assert model_ids({"data": []}) == []
    assert model_ids({"data": "x"}) is None and model_ids([{"id": "a"}]) is None


def _client(status: int, body: bytes) -> httpx.Client:
    def answer(request: httpx.Request) -> httpx.Response:
        assert request.url.path == MODELS_PATH
        return httpx.Response(status, content=body)

    return httpx.Client(transport=httpx.MockTransport(answer))


def test_served_models_says_what_the_server_answered() -> None:
    with _client(200, b'{"data": [{"id": "m"}]}') as client:
        assert served_models(client, "http://test/") == (
            ["m"],
            'HTTP 200: \'{"data": [{"id": "m"}]}\'',
        )
    with _client(404, b"no such route") as client:
        assert served_models(client, "http://test") == (None, "HTTP 404: 'no such route'")
    with _client(200, b"[" * 5000) as client:
        ids, answer = served_models(client, "http://test")
        assert ids is None and answer.startswith("HTTP 200")

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    with httpx.Client(transport=httpx.MockTransport(refuse)) as client:
        assert served_models(client, "http://test") == (None, "no answer: ConnectError: refused")
