"""The least an aiohttp frontend can cost: a proxy that forwards each request's bytes to one engine.

A reference for benchmarks/overhead.py (target ``aiohttp-floor``), not a router: it does none of
the work the frontend does (no validation, tokenizer, routing, metrics, re-framing). It runs as
the frontend runs (uvloop, the same GC tuning) with one aiohttp server and one aiohttp client
session, so the CPU it uses per request is what aiohttp's server and client cost on this machine
before any of the frontend's own work. A streamed answer is relayed chunk by chunk as it comes.

    .venv/bin/python benchmarks/floor_proxy.py --port 8100 --engine-url http://127.0.0.1:8001
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

import aiohttp
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dynamo_lite.infra.entrypoint import tune_gc

SESSION = web.AppKey("session", aiohttp.ClientSession)
ENGINE = web.AppKey("engine", str)


async def forward(request: web.Request) -> web.StreamResponse:
    session, url = request.app[SESSION], request.app[ENGINE] + request.path
    body = await request.read()
    async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as upstream:
        if upstream.content_type != "text/event-stream":
            return web.Response(body=await upstream.read(), status=upstream.status,
                                content_type=upstream.content_type)
        response = web.StreamResponse(status=upstream.status, headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        async for chunk in upstream.content.iter_any():
            await response.write(chunk)
        await response.write_eof()
        return response


async def health(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


def build(engine_url: str) -> web.Application:
    app = web.Application()
    app[ENGINE] = engine_url.rstrip("/")

    async def session(app: web.Application):  # type: ignore[no-untyped-def]
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), auto_decompress=False) as s:
            app[SESSION] = s
            yield

    app.cleanup_ctx.append(session)
    app.router.add_post("/v1/completions", forward)
    app.router.add_post("/v1/chat/completions", forward)
    app.router.add_get("/health", health)
    return app


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--engine-url", required=True)
    args = p.parse_args()
    try:
        import uvloop
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass
    tune_gc()
    web.run_app(build(args.engine_url), host=args.host, port=args.port, access_log=None, print=None,
                handler_cancellation=True)  # as the frontend runs


if __name__ == "__main__":
    main()
