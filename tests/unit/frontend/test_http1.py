"""The frontend's HTTP/1.1 client (frontend/http1.py) against real servers on loopback: an aiohttp
server (as the mock engine is) and a raw socket server that breaks off, stalls or answers nonsense."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from aiohttp import web

from dynamo_lite.frontend import http1
from dynamo_lite.frontend.http1 import ConnectTimeout, EngineDisconnected, EnginePool

JSON = {"Content-Type": "application/json"}


@pytest.fixture
async def engine() -> AsyncIterator[tuple[str, dict]]:
    """An aiohttp server: /whole echoes the body and the request id; /stream sends 3 SSE events, a
    pause between each. `seen["peers"]` holds each request's client port: one port, one connection."""
    seen: dict = {"peers": [], "aborted": asyncio.Event()}

    async def whole(request: web.Request) -> web.Response:
        seen["peers"].append(request.transport.get_extra_info("peername")[1])
        body = await request.read()
        return web.Response(body=b'{"id": "%s", "got": %s}' % (request.headers["X-Request-Id"].encode(), body),
                            content_type="application/json")

    async def stream(request: web.Request) -> web.StreamResponse:
        seen["peers"].append(request.transport.get_extra_info("peername")[1])
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        try:
            for i in range(3):
                await resp.write(b"data: %d\n\n" % i)
                await asyncio.sleep(0.05)
            await resp.write(b"data: [DONE]\n\n")
        except asyncio.CancelledError:
            seen["aborted"].set()
            raise
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/v1/whole", whole)
    app.router.add_post("/v1/stream", stream)
    runner = web.AppRunner(app, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}/v1", seen
    await runner.cleanup()


async def raw_server(answer: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
                     ) -> tuple[asyncio.Server, str]:  # fmt: skip
    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


async def read_request(reader: asyncio.StreamReader) -> None:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.lower().split(b"\r\n")
    length = next(int(line.split(b":")[1]) for line in lines if line.startswith(b"content-length"))
    await reader.readexactly(length)


async def test_a_whole_answer_then_another_on_the_same_connection(engine: tuple[str, dict]) -> None:
    url, seen = engine
    pool = EnginePool()
    for i in range(3):
        resp = await pool.post(url, "/whole", b'{"n": %d}' % i, {"X-Request-Id": f"r{i}", **JSON}, 5, 5)
        assert resp.status == 200
        assert await resp.read() == b'{"id": "r%d", "got": {"n": %d}}' % (i, i)
        resp.close()  # after the end: the connection stays
    assert len(seen["peers"]) == 3 and len(set(seen["peers"])) == 1, seen["peers"]
    await pool.close()


async def test_a_stream_comes_line_by_line_as_it_is_sent(engine: tuple[str, dict]) -> None:
    url, seen = engine
    pool = EnginePool()
    resp = await pool.post(url, "/stream", b"{}", JSON, 5, 5)
    got, times = [], []
    async for line in resp.lines():
        got.append(line)
        times.append(asyncio.get_running_loop().time())
    assert [line for line in got if line] == [b"data: 0", b"data: 1", b"data: 2", b"data: [DONE]"]
    assert times[-1] - times[0] > 0.1, "lines came as they were sent, not at the end"
    resp = await pool.post(url, "/whole", b"1", {"X-Request-Id": "x", **JSON}, 5, 5)
    assert await resp.read() == b'{"id": "x", "got": 1}'
    assert len(set(seen["peers"])) == 1, "the stream's connection was kept for the next request"
    await pool.close()


async def test_closing_an_answer_early_closes_its_connection_and_the_engine_sees_it(
        engine: tuple[str, dict]) -> None:  # fmt: skip
    url, seen = engine
    pool = EnginePool()
    resp = await pool.post(url, "/stream", b"{}", JSON, 5, 5)
    async for line in resp.lines():
        assert line == b"data: 0"
        break
    resp.close()
    await asyncio.wait_for(seen["aborted"].wait(), 5)
    resp = await pool.post(url, "/whole", b"2", {"X-Request-Id": "y", **JSON}, 5, 5)
    assert await resp.read() == b'{"id": "y", "got": 2}'
    assert len(set(seen["peers"])) == 2, "a new connection after the closed one"
    await pool.close()


async def test_an_idle_connection_is_not_reused_after_idle_s(engine: tuple[str, dict],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    url, seen = engine
    monkeypatch.setattr(http1, "IDLE_S", 0.05)
    pool = EnginePool()
    for i in range(2):
        resp = await pool.post(url, "/whole", b"0", {"X-Request-Id": "z", **JSON}, 5, 5)
        await resp.read()
        await asyncio.sleep(0.1)
    assert len(set(seen["peers"])) == 2
    await pool.close()


async def test_an_answer_broken_off_is_engine_disconnected() -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"partial\":")
        await writer.drain()
        writer.close()

    server, url = await raw_server(answer)
    pool = EnginePool()
    resp = await pool.post(url, "/x", b"{}", {}, 5, 5)
    with pytest.raises(EngineDisconnected, match="before its answer ended"):
        await resp.read()
    server.close()
    await pool.close()


async def test_a_connection_closed_before_any_answer_is_engine_disconnected() -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.close()

    server, url = await raw_server(answer)
    with pytest.raises(EngineDisconnected):
        await EnginePool().post(url, "/x", b"{}", {}, 5, 5)
    server.close()


async def test_an_answer_that_is_not_http_is_engine_disconnected() -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(1)

    server, url = await raw_server(answer)
    with pytest.raises(EngineDisconnected, match="not HTTP"):
        await EnginePool().post(url, "/x", b"{}", {}, 5, 5)
    server.close()


async def test_an_engine_that_stalls_is_a_read_timeout() -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
        await writer.drain()
        await asyncio.sleep(5)

    server, url = await raw_server(answer)
    resp = await EnginePool().post(url, "/x", b"{}", {}, 5, 0.2)
    lines = resp.lines()
    with pytest.raises(TimeoutError):
        await anext(lines)
    resp.close()
    server.close()


async def test_a_closed_port_is_an_os_error_and_a_silent_host_a_connect_timeout() -> None:
    server, url = await raw_server(read_request)
    server.close()
    await server.wait_closed()
    with pytest.raises(ConnectionRefusedError):
        await EnginePool().post(url, "/x", b"{}", {}, 5, 5)
    # a listening socket that never accepts, its queue full: Linux drops further SYNs, so connecting hangs
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    fillers = []
    for _ in range(4):
        filler = socket.socket()
        filler.setblocking(False)
        filler.connect_ex(listener.getsockname())
        fillers.append(filler)
    await asyncio.sleep(0.1)
    try:
        with pytest.raises(ConnectTimeout):
            await EnginePool().post(f"http://127.0.0.1:{listener.getsockname()[1]}", "/x", b"{}", {}, 0.3, 5)
    finally:
        for sock in (listener, *fillers):
            sock.close()


async def test_a_header_with_a_line_break_is_refused_before_anything_is_sent(engine: tuple[str, dict]) -> None:
    url, seen = engine
    with pytest.raises(ValueError, match="X-Request-Id"):
        await EnginePool().post(url, "/whole", b"{}", {"X-Request-Id": "a\r\nX-Evil: 1"}, 5, 5)
    assert seen["peers"] == []
