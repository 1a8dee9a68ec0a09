"""core/load/requests.py: one request of a point. Its body carries the engine's exact-length
fields and asks for the server's counts; a process's Connections take the raw SSE pool for
plain http:// and httpx otherwise, with the event loop and JSON parser it was given; a request
that outlives its timeout is a failed record, not an exception."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from core.load.openai import loads_std
from core.load.prompts import Prompt
from core.load.requests import (
    ClientOptions,
    Connections,
    LoadOptions,
    event_loop_factory,
    event_loop_name,
    payload,
)
from core.records import RequestRecord


def _opts(**kw: object) -> LoadOptions:
    base: dict[str, object] = {
        "base_url": "http://127.0.0.1:9",
        "model": "m",
        "concurrency": 1,
        "request_rate": float("inf"),
        "seed": 0,
        "exact_length_body": {"ignore_eos": True},
        "request_timeout_s": 5.0,
        "point_timeout_s": 5.0,
    }
    return LoadOptions(**{**base, **kw})  # type: ignore[arg-type]


def test_a_prompt_asks_for_its_length_and_the_servers_counts() -> None:
    body = payload(_opts(), Prompt(text="hi there", prompt_tokens=2, output_len=7))
    assert body["messages"] == [{"role": "user", "content": "hi there"}]
    assert body["max_tokens"] == 7 and body["ignore_eos"] is True and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize(
    ("url", "http", "raw"),
    [
        ("http://127.0.0.1:9", "auto", True),
        ("http://127.0.0.1:9", "httpx", False),
        ("https://example.test", "auto", False),
    ],
)
def test_connections_take_the_raw_pool_only_for_plain_http(url: str, http: str, raw: bool) -> None:
    conns = Connections(ClientOptions(url, 4, 5.0, http=http, json_parser="json"))
    try:
        assert (conns.raw is not None) is raw and conns.json_parser == "json"
        assert conns.loads is loads_std
    finally:
        asyncio.run(conns.aclose())


def test_the_event_loop_is_the_one_asked_for() -> None:
    assert event_loop_factory("asyncio") is None and event_loop_name("asyncio") == "asyncio"
    pytest.importorskip("uvloop")
    assert event_loop_name("auto") == "uvloop"


def test_a_request_past_its_timeout_is_a_failed_record() -> None:
    async def slow(_request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(5)
        return httpx.Response(200)

    async def go() -> RequestRecord:
        conns = Connections(ClientOptions("http://test", 1, 0.2, http="httpx"))
        await conns.httpx.aclose()  # the same client, on a server that never answers
        conns.httpx = httpx.AsyncClient(base_url="http://test", transport=httpx.MockTransport(slow))
        rec = RequestRecord(index=0, send_s=0.0, prompt_tokens=1, output_tokens_requested=1)
        try:
            await conns.send(
                _opts(request_timeout_s=0.2), rec, Prompt("x", 1, 1), time.perf_counter()
            )
        finally:
            await conns.aclose()
        return rec

    rec = asyncio.run(go())
    assert not rec.ok and rec.error == "timeout after 0.2 s"
