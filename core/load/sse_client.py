"""A lean HTTP/1.1 client for the load generator's hot path: streamed POSTs over plain
``http://`` keep-alive connections, parsed in ``asyncio.Protocol.data_received``.

Why not httpx here: every network read of a stream goes through httpx, httpcore, h11 and
anyio (a cancel scope and an event per wait, five async generators deep). With chunks that
arrive one at a time (a server decoding at 10 ms per token) that cost 80 us of client CPU per
chunk, 2.5 times SGLang ``bench_serving``'s aiohttp client, so the client, not the server,
limited the rates ServeLab could measure (docs/BENCHMARKS.md, load-generator headroom). Here
a read is one callback: take the time, de-chunk, split SSE lines, hand each ``data:`` line to
the caller. The time taken is also closer to the kernel's arrival time (no task wake-up in
between).

Scope: HTTP/1.1 over TCP, ``Transfer-Encoding: chunked`` or ``Content-Length`` responses,
keep-alive with one retry when a reused idle connection turns out closed. ``https://`` and
anything else go through httpx (core/load/requests.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from typing import Any, cast
from urllib.parse import urlsplit

__all__ = ["ProtocolError", "SSEConnectionPool", "StreamResult"]

MAX_HEAD = 65536


class ProtocolError(Exception):
    """The server broke HTTP/1.1 (or closed the connection mid-response)."""


class StreamResult:
    """What one request got: status, the error body, how the message ended."""

    __slots__ = ("body", "complete", "status", "stopped")

    def __init__(self) -> None:
        self.status: int | None = None
        self.body = bytearray()  # non-200 responses only
        self.complete = False  # the HTTP message ended properly
        self.stopped = False  # on_data asked to stop (its [DONE] or an error)


OnData = Callable[[bytes, float], bool]  # (SSE data payload, arrival time) -> stop?


class _Conn(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.lost: BaseException | None = None
        self._reset()

    def _reset(self) -> None:
        self.result = StreamResult()
        self.on_data: OnData | None = None
        self.clock: Callable[[], float] = time.perf_counter
        self.waiter: asyncio.Future[None] | None = None
        self.received = 0
        self._buf = b""
        self._state = "head"
        self._remaining = 0  # bytes left in the current chunk / content-length body
        self._chunked = False
        self._keep_alive = True
        self._sse = b""

    # -- asyncio.Protocol ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, only alike
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        now = self.clock()
        self.received += len(data)
        if self.waiter is None or self._state == "done":
            return  # no request on this connection: ignored
        try:
            self._feed(data, now)
        except ProtocolError as exc:
            self._keep_alive = False
            self._finish(exc)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.lost = exc
        if self._state == "body_eof" and self.result.status is not None:
            self.result.complete = True  # a body delimited by the connection's end
            self._finish(None)
        else:
            why = f": {exc}" if exc else ""
            self._finish(ProtocolError(f"connection closed by the server{why}"))

    # -- parsing ---------------------------------------------------------------------------
    def _feed(self, data: bytes, now: float) -> None:
        # One read, parsed at an offset into it: slicing the buffer after every frame
        # copied the rest of the read once per chunk (flooded: dozens of events per read).
        buf = self._buf + data if self._buf else data
        pos, end_all = 0, len(buf)
        while pos < end_all and self._state != "done":
            state = self._state
            if state == "size":
                end = buf.find(b"\r\n", pos)
                if end < 0:
                    if end_all - pos > 1024:
                        raise ProtocolError("bad chunk size line")
                    break
                line = buf[pos:end]
                try:
                    size = int(line.split(b";", 1)[0] if b";" in line else line, 16)
                except ValueError as exc:
                    raise ProtocolError(f"bad chunk size {line[:40]!r}") from exc
                if size < 0:  # a negative size would never be consumed: a busy loop
                    raise ProtocolError(f"bad chunk size {line[:40]!r}")
                pos = end + 2
                if size == 0:
                    self._state = "trailer"
                    continue
                start, stop = pos, pos + size
                if (
                    stop + 2 <= end_all
                    and not self._sse
                    and self.on_data is not None
                    and self.result.status == 200
                    and not self.result.stopped
                    and buf[start : start + 6] == b"data: "
                    and buf[stop - 2 : stop + 2] == b"\n\n\r\n"
                    and buf.find(b"\n", start, stop) == stop - 2
                    and buf[stop - 3 : stop - 2] != b"\r"
                ):
                    # The usual frame, whole in this read: one event, "data: X\n\n".
                    # Straight to the caller: a third of the work of the general path.
                    pos = stop + 2
                    if self.on_data(buf[start + 6 : stop - 2], now):
                        self.result.stopped = True
                        self._finish(None)
                    continue
                self._remaining, self._state = size, "chunk"
            elif state == "chunk":
                stop = min(end_all, pos + self._remaining)
                self._remaining -= stop - pos
                self._body(buf[pos:stop], now)
                pos = stop
                if self._remaining == 0:
                    self._state = "chunk_end"
            elif state == "chunk_end":
                if end_all - pos < 2:
                    break
                if buf[pos : pos + 2] != b"\r\n":
                    raise ProtocolError("chunk not followed by CRLF")
                pos, self._state = pos + 2, "size"
            elif state == "head":
                end = buf.find(b"\r\n\r\n", pos)
                if end < 0:
                    if end_all - pos > MAX_HEAD:
                        raise ProtocolError("response headers too large")
                    break
                self._head(buf[pos:end].decode("latin-1"))
                pos = end + 4
            elif state == "trailer":
                end = buf.find(b"\r\n", pos)
                if end < 0:
                    break
                line, pos = buf[pos:end], end + 2
                if not line:
                    self._message_done()
            elif state == "length":
                stop = min(end_all, pos + self._remaining)
                self._remaining -= stop - pos
                self._body(buf[pos:stop], now)
                pos = stop
                if self._remaining == 0:
                    self._message_done()
            else:  # body_eof
                self._body(buf[pos:], now)
                pos = end_all
        self._buf = buf[pos:] if pos < end_all else b""

    def _head(self, head: str) -> None:
        lines = head.split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1."):
            raise ProtocolError(f"bad status line {lines[0][:80]!r}")
        try:
            status = int(parts[1])
        except ValueError as exc:
            raise ProtocolError(f"bad status line {lines[0][:80]!r}") from exc
        if 100 <= status < 200:  # an interim response: the real one follows
            return
        headers = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        self.result.status = status
        self._keep_alive = (
            headers.get("connection", "").lower() != "close" and parts[0] != "HTTP/1.0"
        )
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self._state = "size"
        elif "content-length" in headers:
            try:
                self._remaining = int(headers["content-length"])
            except ValueError as exc:
                raise ProtocolError("bad content-length") from exc
            if self._remaining < 0:  # never consumed: the loop would spin forever
                raise ProtocolError("bad content-length")
            self._state = "length"
            if self._remaining == 0:
                self._message_done()
        else:
            self._state, self._keep_alive = "body_eof", False

    def _body(self, data: bytes, now: float) -> None:
        if not data:
            return
        if self.result.status != 200 or self.on_data is None:
            self.result.body += data[: 4096 - len(self.result.body)]
            return
        if self.result.stopped:
            return  # after [DONE]: only the framing matters now
        lines = (self._sse + data if self._sse else data).split(b"\n")
        self._sse = lines.pop()  # an incomplete last line waits for the next read
        on_data = self.on_data
        for line in lines:
            if line[:5] == b"data:" and on_data(
                line[6:] if line[5:6] == b" " and line[-1:] != b"\r" else line[5:].strip(), now
            ):
                self.result.stopped = True
                self._finish(None)
                return

    def _message_done(self) -> None:
        self.result.complete = True
        self._state = "done"
        self._finish(None)

    def _finish(self, exc: BaseException | None) -> None:
        if self.waiter is not None and not self.waiter.done():
            if exc is None:
                self.waiter.set_result(None)
            else:
                self.waiter.set_exception(exc)

    @property
    def reusable(self) -> bool:
        return not self.closed and self._state == "done" and self._keep_alive and not self._buf


class SSEConnectionPool:
    """Keep-alive connections to one ``http://host:port``; one request per connection at
    a time (the caller's semaphore bounds how many there are)."""

    def __init__(self, base_url: str, headers: dict[str, str] | None = None) -> None:
        parts = urlsplit(base_url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"not a plain http:// URL: {base_url!r}")
        self.host = parts.hostname
        self.port = parts.port or 80
        self.prefix = parts.path.rstrip("/")
        host_header = self.host if parts.port is None else f"{self.host}:{parts.port}"
        if ":" in self.host and not self.host.startswith("["):
            host_header = f"[{self.host}]" + ("" if parts.port is None else f":{parts.port}")
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        self._head = (
            f"Host: {host_header}\r\nAccept: */*\r\nConnection: keep-alive\r\n"
            f"Content-Type: application/json\r\n{extra}"
        )
        self._idle: list[_Conn] = []

    def request_bytes(self, path: str, body: dict[str, Any]) -> bytes:
        payload = json.dumps(body).encode()
        return (
            f"POST {self.prefix}{path} HTTP/1.1\r\n{self._head}"
            f"Content-Length: {len(payload)}\r\n\r\n"
        ).encode("latin-1") + payload

    async def _connect(self) -> _Conn:
        loop = asyncio.get_running_loop()
        _, conn = await loop.create_connection(_Conn, self.host, self.port)
        return conn

    async def post_stream(
        self, request: bytes, on_data: OnData, on_send: Callable[[], None]
    ) -> StreamResult:
        """Send ``request``; ``on_send`` runs right before the bytes go to the socket;
        ``on_data(payload, t)`` gets every SSE ``data:`` payload of a 200 response with the
        arrival time of the read that completed it, and returns True to stop reading."""
        for attempt in (0, 1):
            conn = None
            while self._idle and conn is None:
                c = self._idle.pop()
                conn = None if c.closed else c
            reused = conn is not None
            if conn is None:
                conn = await self._connect()
            conn._reset()
            conn.on_data = on_data
            conn.waiter = asyncio.get_running_loop().create_future()
            assert conn.transport is not None
            on_send()
            conn.transport.write(request)
            try:
                await conn.waiter
            except ProtocolError:
                conn.transport.abort()
                if reused and attempt == 0 and conn.received == 0:
                    continue  # a stale keep-alive connection: retry once on a new one
                raise
            except BaseException:
                conn.transport.abort()  # cancelled (timeout, stop): never reuse it
                raise
            finally:
                conn.on_data = None
            result = conn.result
            if conn.reusable:
                self._idle.append(conn)
            else:
                # stopped ([DONE] or an error) before the message's end arrived, or the
                # server asked to close: not reusable
                conn.transport.abort()
            return result
        raise ProtocolError("unreachable")

    def close(self) -> None:
        for c in self._idle:
            if c.transport is not None:
                with contextlib.suppress(Exception):
                    c.transport.close()
        self._idle.clear()
