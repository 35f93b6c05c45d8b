"""`python -m dynamo_lite.frontend -f cluster.yaml --nats-url URL --etcd-url URL`: the OpenAI API.

Serves on `frontend.host:frontend.port` of the spec (or --host/--port) until
SIGTERM or SIGINT; then it stops accepting, lets in-flight requests finish for
up to --shutdown-timeout seconds, and closes its connections.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from aiohttp import web

from dynamo_lite.config import ConfigError, load_cluster_spec
from dynamo_lite.frontend.app import FrontendConfig, build_app
from dynamo_lite.frontend.tokenizer import load_tokenizer
from dynamo_lite.infra.entrypoint import add_spec_args, configure_logging

log = logging.getLogger("dynamo_lite.frontend")
IDLE_CONNECTION_TIMEOUT_S = 75.0  # as nginx: an idle or header-less connection is closed after this long


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m dynamo_lite.frontend", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_spec_args(p)
    p.add_argument("--host", help="default: frontend.host of the spec")
    p.add_argument("--port", type=int, help="default: frontend.port of the spec")
    p.add_argument("--shutdown-timeout", type=float, default=30.0, help="seconds in-flight requests may finish")
    return p.parse_args(argv)


async def serve(app: web.Application, host: str, port: int, shutdown_timeout_s: float, stop: asyncio.Event) -> None:
    # handler_cancellation: a client that disconnects cancels its handler, which closes
    # the engine connection and so aborts the engine request. keepalive_timeout also closes a
    # connection that never completes its request headers (aiohttp's default is an hour).
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=shutdown_timeout_s,
                           keepalive_timeout=IDLE_CONNECTION_TIMEOUT_S)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        log.info("OpenAI API on http://%s:%d/v1", host, port)
        await stop.wait()
    finally:
        await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    configure_logging(args.log_level)
    try:
        spec = load_cluster_spec(args.file)
        api_keys = spec.frontend.api_keys.load()
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    cache = spec.resolved_state_dir() / "models"
    tokenizers = {m.name: load_tokenizer(m.path, cache) for m in spec.models}
    app = build_app(FrontendConfig.from_spec(spec, args.nats_url, args.etcd_url), tokenizers, api_keys=api_keys)
    if api_keys:
        log.info("API keys required on /v1 (%d accepted)", len(api_keys))

    async def run() -> None:
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            asyncio.get_running_loop().add_signal_handler(sig, stop.set)
        await serve(app, args.host or spec.frontend.host, spec.frontend.port if args.port is None else args.port,
                    args.shutdown_timeout, stop)

    asyncio.run(run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
