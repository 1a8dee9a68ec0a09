"""core.load.sse_client, the load generator's raw HTTP/1.1 path: the same records as httpx on the
fake SGLang, keep-alive reuse, a stale idle connection retried once, Content-Length bodies."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator
from pathlib import Path

from core.load.generator import LoadGenerator, LoadOptions
from core.load.prompts import Prompt
from core.load.sse_client import SSEConnectionPool
from tests.test_loadgen import fake_server


def _opts(base: str, c: int) -> LoadOptions:
    return LoadOptions(
        base_url=base,
        model="m",
        concurrency=c,
        request_rate=float("inf"),
        seed=1,
        exact_length_body={"ignore_eos": True},
        request_timeout_s=30.0,
        point_timeout_s=60.0,
    )


def test_raw_and_httpx_paths_record_the_same(fake_sglang: Path, tmp_path: Path) -> None:
    prompts = [Prompt(text=" alpha bravo", prompt_tokens=2, output_len=6)] * 8
    with fake_server(tmp_path / "s.log") as base:
        out = {}
        for http in ("auto", "httpx"):
            with LoadGenerator(base, 4, 30.0, http=http) as gen:
                assert (gen._conns.raw is not None) == (http == "auto")
                gen.run(_opts(base, 4), prompts[:4])
                out[http], _ = gen.run(_opts(base, 4), prompts)
    for a, b in zip(out["auto"], out["httpx"], strict=True):
        assert a.ok and b.ok
        assert (
            len(a.chunk_s),
            a.output_tokens_server,
            a.prompt_tokens_server,
            a.finish_reason,
            a.status_code,
        ) == (
            len(b.chunk_s),
            b.output_tokens_server,
            b.prompt_tokens_server,
            b.finish_reason,
            b.status_code,
        )
        assert a.generated_text.split() and len(a.generated_text.split()) == 6
        assert a.send_s <= a.chunk_s[0] <= (a.end_s or 0)


SSE = (
    b'data: {"choices":[{"delta":{"content":" hi"},"finish_reason":null}]}\n\n'
    b'data: {"choices":[{"delta":{},"finish_reason":"length"}]}\n\ndata: [DONE]\n\n'
)


@contextlib.asynccontextmanager
async def _server(
    close_after_response: bool, content_length_error: bool
) -> AsyncIterator[tuple[str, list[int]]]:
    connections: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(
                    next(
                        line.split(b":")[1]
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length")
                    )
                )
                await reader.readexactly(length)
                if content_length_error:
                    body = b'{"error": "nope"}'
                    writer.write(
                        b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: %d\r\n\r\n%s"
                        % (len(body), body)
                    )
                else:
                    writer.write(
                        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                        + b"%X\r\n%s\r\n0\r\n\r\n" % (len(SSE), SSE)
                    )
                await writer.drain()
                if close_after_response:  # an idle keep-alive connection the server drops
                    await asyncio.sleep(0.05)
                    writer.close()
                    return
        except asyncio.IncompleteReadError:
            pass  # the client closed its keep-alive connection
        finally:
            writer.close()  # this side of the connection too, whoever ended it

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", connections
    finally:
        server.close()
        await server.wait_closed()


def test_keep_alive_reuse_and_stale_connection_retry() -> None:
    async def main() -> None:
        for close_after, expect_conns in ((False, 1), (True, 3)):
            async with _server(close_after, False) as (base, conns):
                pool = SSEConnectionPool(base)
                for _ in range(3):
                    got: list[bytes] = []
                    result = await pool.post_stream(
                        pool.request_bytes("/v1/chat/completions", {"x": 1}),
                        lambda d, _t, got=got: got.append(d) or d == b"[DONE]",
                        lambda: None,
                    )
                    assert result.status == 200 and got[-1] == b"[DONE]" and len(got) == 3
                    await asyncio.sleep(0.1)
                pool.close()
                assert len(conns) == expect_conns

    asyncio.run(main())


def test_content_length_error_body() -> None:
    async def main() -> None:
        async with _server(False, True) as (base, _conns):
            pool = SSEConnectionPool(base)
            result = await pool.post_stream(
                pool.request_bytes("/x", {}), lambda d, t: False, lambda: None
            )
            assert result.status == 503 and bytes(result.body) == b'{"error": "nope"}'
            assert result.complete
            pool.close()

    asyncio.run(main())


def _payloads(stream: bytes, cuts: list[int]) -> list[bytes]:
    """What the raw client hands on for ``stream`` arriving in reads cut at ``cuts``."""
    from core.load.sse_client import _Conn

    conn, got = _Conn(), []
    conn.on_data = lambda data, _t: got.append(data) is not None  # never stops
    loop = asyncio.new_event_loop()
    conn.waiter = loop.create_future()
    for a, b in itertools.pairwise([0, *cuts, len(stream)]):
        conn.data_received(stream[a:b])
    loop.close()
    return got


def test_whole_frames_and_split_frames_give_the_same_events() -> None:
    """One read holding every frame (the shortcut for "data: X\\n\\n" frames) and reads of
    one byte (the general path) hand on the same payloads, odd frames included."""

    def frame(body: bytes) -> bytes:
        return b"%X\r\n%s\r\n" % (len(body), body)

    events = [
        b'data: {"a":1}\n\n',
        b'data:{"b":2}\n\n',
        b'data: {"c":3}\r\n\r\n',
        b'data: {"d":4}\n\ndata: {"e":5}\n\n',
        b": comment\n\n",
        b"data: \n\n",
        b'data: {"f"',
        b":6}\n\n",
        b"data: [DONE]\n\n",
    ]
    stream = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        + b"".join(frame(e) for e in events)
        + b"0\r\n\r\n"
    )
    whole = _payloads(stream, [])
    assert whole == [
        b'{"a":1}',
        b'{"b":2}',
        b'{"c":3}',
        b'{"d":4}',
        b'{"e":5}',
        b"",
        b'{"f":6}',
        b"[DONE]",
    ]
    assert _payloads(stream, list(range(1, len(stream)))) == whole
