"""The frontend's HTTP/1.1 client for engine calls: kept-alive connections per engine, one
asyncio Protocol per connection, answers parsed by httptools (llhttp, the parser uvicorn uses).

Why not aiohttp's client: on the overhead workload it was half of what an aiohttp proxy
costs. A proxy that only forwards bytes used 0.22-0.30 ms of CPU a request with aiohttp's
client and 0.12-0.14 ms with a bare one, and added 0.5 against 0.2-0.3 ms at concurrency 1
(docs/benchmarks.md#router-overhead). The frontend needs little of what aiohttp's client
does: POST a JSON body, read one answer or its lines, close the connection to abort.

- `EnginePool.post` sends on an idle connection to that engine, or on a new one (within
  `connect_timeout_s`), and returns the `Response` once its status line and headers are in.
- `Response.read()` gives the whole body, `Response.lines()` the body line by line as it
  comes. Each waits at most `read_timeout_s` for the next bytes (TimeoutError).
- An answer read to its end on a kept-alive connection gives the connection back to the
  pool. `Response.close()` before that closes it: the engine sees the disconnect and aborts
  the request.
- A connection idle for more than `IDLE_S` is closed, not reused: the engine may be closing
  it at that moment (uvicorn's keep-alive timeout is 5 s), and a request sent then would be
  lost.
- Reading pauses while more than `HIGH_WATER` bytes wait to be read.

Errors: `ConnectTimeout`; `EngineDisconnected` (a ConnectionError) when the connection ends
before the answer does, or the answer is not HTTP; OSError from connecting.
"""

from __future__ import annotations

import asyncio
import collections
import ssl
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from urllib.parse import urlsplit

import httptools

IDLE_S = 2.0
HIGH_WATER = 1 << 18


class ConnectTimeout(Exception):
    """No connection to the engine within the connect timeout."""


class EngineDisconnected(ConnectionError):
    """The connection ended before the answer did, or what came was not HTTP."""


@dataclass(frozen=True)
class _Target:
    host: str
    port: int
    tls: bool
    prefix: str  # the base URL's path, without a trailing slash
    host_header: bytes


class _Connection(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.response: Response | None = None
        self.closed = False
        self.idle_since = 0.0

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as e:
            self._fail(EngineDisconnected(f"the engine's answer is not HTTP: {e}"))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail(EngineDisconnected("the engine closed the connection before its answer ended"
                                      + (f" ({exc})" if exc else "")))

    # httptools callbacks
    def on_headers_complete(self) -> None:
        if self.response is not None:
            self.response.status = self.parser.get_status_code()
            self.response._wake()

    def on_body(self, body: bytes) -> None:
        if self.response is not None:
            self.response._feed(body)

    def on_message_complete(self) -> None:
        if self.response is not None:
            self.response._complete(self.parser.should_keep_alive())

    def _fail(self, error: Exception) -> None:
        if self.response is not None and not self.response.complete:
            self.response._fail(error)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class Response:
    """One answer: `status` is set; read it with `read()` or `lines()`, or give it up with `close()`."""

    def __init__(self, conn: _Connection, pool: EnginePool, target: _Target, read_timeout_s: float) -> None:
        self.status = 0
        self.complete = False
        self._conn, self._pool, self._target, self._read_timeout_s = conn, pool, target, read_timeout_s
        self._chunks: collections.deque[bytes] = collections.deque()
        self._buffered = 0
        self._paused = False
        self._keep_alive = False
        self._error: Exception | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._done = False  # the connection went back to the pool or was closed

    # fed by the connection
    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _feed(self, data: bytes) -> None:
        self._chunks.append(data)
        self._buffered += len(data)
        if self._buffered > HIGH_WATER and not self._paused and self._conn.transport is not None:
            self._conn.transport.pause_reading()
            self._paused = True
        self._wake()

    def _complete(self, keep_alive: bool) -> None:
        self.complete, self._keep_alive = True, keep_alive
        self._wake()

    def _fail(self, error: Exception) -> None:
        if self._error is None:  # the first cause, not the close that follows it
            self._error = error
        self._wake()

    # read by the caller
    async def _next(self) -> None:
        """Wait for more bytes, the end, or a failure; at most the read timeout."""
        if self._error is not None:
            raise self._error
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            async with asyncio.timeout(self._read_timeout_s):
                await self._waiter
        finally:
            self._waiter = None

    async def _headers(self) -> None:
        while not self.status:
            await self._next()

    def _take(self) -> bytes:
        data = b"".join(self._chunks) if len(self._chunks) > 1 else self._chunks[0]
        self._chunks.clear()
        self._buffered = 0
        if self._paused and self._conn.transport is not None:
            self._conn.transport.resume_reading()
            self._paused = False
        return data

    async def read(self) -> bytes:
        parts: list[bytes] = []
        while True:
            if self._chunks:
                parts.append(self._take())
            if self.complete:
                self._finish()
                return b"".join(parts)
            await self._next()

    async def lines(self) -> AsyncIterator[bytes]:
        """The body's lines (without the newline) as they come; the last one even without a newline."""
        pending = b""
        while True:
            if self._chunks:
                *lines, pending = (pending + self._take()).split(b"\n")
                for line in lines:
                    yield line
                continue
            if self.complete:
                self._finish()
                if pending:
                    yield pending
                return
            await self._next()

    def close(self) -> None:
        """Give the answer up: unless it was read to its end, its connection is closed."""
        if not self._done:
            self._done = True
            self._conn.response = None
            self._conn.close()

    def _finish(self) -> None:
        if self._done:
            return
        self._done = True
        self._conn.response = None
        if self._keep_alive and not self._conn.closed and not self._paused:
            self._pool._give_back(self._target, self._conn)
        else:
            self._conn.close()


class EnginePool:
    """Kept-alive connections to engines, by base URL. `close()` closes the idle ones."""

    def __init__(self) -> None:
        self._targets: dict[str, _Target] = {}
        self._idle: dict[_Target, list[_Connection]] = {}
        self._ssl: ssl.SSLContext | None = None

    async def post(self, base_url: str, path: str, body: bytes, headers: dict[str, str], connect_timeout_s: float,
                   read_timeout_s: float) -> Response:  # fmt: skip
        target = self._target(base_url)
        head = [b"POST ", target.prefix.encode(), path.encode(), b" HTTP/1.1\r\nHost: ", target.host_header,
                b"\r\nContent-Length: ", str(len(body)).encode(), b"\r\n"]
        for name, value in headers.items():
            if "\r" in value or "\n" in value:
                raise ValueError(f"header {name}: a line break in its value")
            head += [name.encode(), b": ", value.encode("latin-1"), b"\r\n"]
        head += [b"\r\n", body]
        conn = self._idle_connection(target) or await self._connect(target, connect_timeout_s)
        response = Response(conn, self, target, read_timeout_s)
        conn.response = response
        assert conn.transport is not None
        conn.transport.write(b"".join(head))
        try:
            await response._headers()
        except BaseException:
            response.close()
            raise
        return response

    async def close(self) -> None:
        for conns in self._idle.values():
            for conn in conns:
                conn.close()
        self._idle.clear()

    def _target(self, base_url: str) -> _Target:
        target = self._targets.get(base_url)
        if target is None:
            url = urlsplit(base_url)
            if url.scheme not in ("http", "https") or not url.hostname:
                raise ValueError(f"engine URL {base_url!r}: expected http(s)://host[:port]")
            tls = url.scheme == "https"
            port = url.port or (443 if tls else 80)
            target = _Target(url.hostname, port, tls, url.path.rstrip("/"), url.netloc.encode())
            self._targets[base_url] = target
        return target

    def _idle_connection(self, target: _Target) -> _Connection | None:
        conns = self._idle.get(target)
        now = time.monotonic()
        while conns:
            conn = conns.pop()
            if not conn.closed and now - conn.idle_since <= IDLE_S:
                return conn
            conn.close()
        return None

    async def _connect(self, target: _Target, timeout_s: float) -> _Connection:
        if target.tls and self._ssl is None:
            self._ssl = ssl.create_default_context()
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout_s):
                _, conn = await loop.create_connection(_Connection, target.host, target.port,
                                                       ssl=self._ssl if target.tls else None)
        except TimeoutError:
            raise ConnectTimeout(f"no connection to {target.host}:{target.port} within {timeout_s:g} s") from None
        return conn

    def _give_back(self, target: _Target, conn: _Connection) -> None:
        conn.idle_since = time.monotonic()
        self._idle.setdefault(target, []).append(conn)
