"""`python -m dynamo_lite.frontend -f cluster.yaml --nats-url URL --etcd-url URL`: the OpenAI API.

Serves on `frontend.host:frontend.port` of the spec (or --host/--port) until
SIGTERM or SIGINT; then it stops accepting, lets in-flight requests finish for
up to --shutdown-timeout seconds, and closes its connections.

One of several processes on one port (`frontend.processes`, started by `orchestrator
up`): --reuse-port binds the port with SO_REUSEPORT, so the kernel spreads new
connections over the processes bound to it, and a process that dies leaves the port
to the others. --process-index tags its log lines; --metrics-port serves this
process's own /metrics and /health (a scrape of the shared port reaches any one of
them). Runs on uvloop when it is installed.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from dataclasses import dataclass

from aiohttp import web

from dynamo_lite.config import ConfigError, load_cluster_spec
from dynamo_lite.frontend import handlers, harmony
from dynamo_lite.frontend.app import FrontendConfig, build_app
from dynamo_lite.frontend.state import STATE
from dynamo_lite.frontend.tokenizer import load_tokenizer
from dynamo_lite.frontend.tools.reasoning_own import unreadable
from dynamo_lite.infra.entrypoint import add_spec_args, configure_logging, run_loop, tune_gc

log = logging.getLogger("dynamo_lite.frontend")
IDLE_CONNECTION_TIMEOUT_S = 75.0  # as nginx: an idle or header-less connection is closed after this long


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m dynamo_lite.frontend", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_spec_args(p)
    p.add_argument("--host", help="default: frontend.host of the spec")
    p.add_argument("--port", type=int, help="default: frontend.port of the spec")
    p.add_argument("--shutdown-timeout", type=float, default=30.0, help="seconds in-flight requests may finish")
    p.add_argument("--reuse-port", action="store_true",
                   help="bind the port with SO_REUSEPORT: one of several frontend processes on it")
    p.add_argument("--process-index", type=int, help="which of the frontend processes this is (for logs)")
    p.add_argument("--metrics-port", type=int, help="also serve this process's /metrics and /health on this port")
    return p.parse_args(argv)


@dataclass(frozen=True)
class Listen:
    host: str
    port: int
    reuse_port: bool = False  # SO_REUSEPORT: share the port with the other frontend processes
    metrics_port: int | None = None  # this process's own /metrics and /health


async def serve(app: web.Application, listen: Listen, shutdown_timeout_s: float, stop: asyncio.Event) -> None:
    # handler_cancellation: a client that disconnects cancels its handler, which closes
    # the engine connection and so aborts the engine request. keepalive_timeout also closes a
    # connection that never completes its request headers (aiohttp's default is an hour).
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=shutdown_timeout_s,
                           keepalive_timeout=IDLE_CONNECTION_TIMEOUT_S)
    await runner.setup()
    own: web.AppRunner | None = None
    try:
        site = web.TCPSite(runner, listen.host, listen.port, reuse_port=listen.reuse_port or None)
        try:
            await site.start()
        except OSError as e:  # the port is taken (or the host is not this machine's)
            raise SystemExit(f"error: cannot listen on {listen.host}:{listen.port}: {e}") from None
        log.info("OpenAI API on http://%s:%d/v1%s", listen.host, listen.port,
                 " (SO_REUSEPORT, shared with the other frontend processes)" if listen.reuse_port else "")
        if listen.metrics_port is not None:
            # After the shared site: /health answering here means this process serves the shared port.
            own = web.AppRunner(_own_endpoints(app), access_log=None)
            await own.setup()
            await web.TCPSite(own, listen.host, listen.metrics_port).start()
            log.info("this process's /metrics and /health on http://%s:%d", listen.host, listen.metrics_port)
        await stop.wait()
    finally:
        if own is not None:
            await own.cleanup()
        await runner.cleanup()


def _own_endpoints(app: web.Application) -> web.Application:
    """/metrics and /health of this process alone, from the main app's state."""
    own = web.Application()
    own[STATE] = app[STATE]
    own.router.add_get("/metrics", handlers.metrics)
    own.router.add_get("/health", handlers.health)
    return own


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    configure_logging(args.log_level, None if args.process_index is None else f"frontend {args.process_index}")
    try:
        spec = load_cluster_spec(args.file)
        api_keys = spec.frontend.api_keys.load()
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from dynamo_lite.engines.models import ModelNotFound

    cache = spec.resolved_state_dir() / "models"
    try:
        tokenizers = {m.name: load_tokenizer(m.path, cache) for m in spec.models}
    except ModelNotFound as e:
        print(f"error: {args.file}: {e}", file=sys.stderr)
        return 2
    for i, model in enumerate(spec.models):
        tok = tokenizers[model.name]
        if problem := harmony.mismatch(model.tool_call_parser, model.reasoning_parser, tok.harmony) or \
                (model.reasoning_parser and unreadable(model.reasoning_parser, tok.vocab_id)):
            print(f"error: {args.file}: models[{i}] ({model.name}): {problem}", file=sys.stderr)
            return 2
    app = build_app(FrontendConfig.from_spec(spec, args.nats_url, args.etcd_url), tokenizers, api_keys=api_keys)
    if api_keys:
        log.info("API keys required on /v1 (%d accepted)", len(api_keys))
    tune_gc()

    async def run() -> None:
        log.info("event loop: %s", type(asyncio.get_running_loop()).__module__.split(".")[0])
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            asyncio.get_running_loop().add_signal_handler(sig, stop.set)
        listen = Listen(args.host or spec.frontend.host, spec.frontend.port if args.port is None else args.port,
                        args.reuse_port, args.metrics_port)
        await serve(app, listen, args.shutdown_timeout, stop)

    run_loop(run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
