"""`python -m dynamo_lite.engines.mock --model NAME --port P ...`: one mock engine.

Serves until SIGTERM or SIGINT, then stops accepting, aborts in-flight
requests, stops the engine loop and closes the KV-event sockets.
"""

from __future__ import annotations

import logging
import sys

import prometheus_client
from aiohttp import web

from dynamo_lite.engines.mock.args import parse_args
from dynamo_lite.engines.mock.server import build_app


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    prometheus_client.disable_created_metrics()  # as vLLM: no *_created series
    logging.getLogger(__name__).info(
        "mock engine %s on %s:%d (timing %s, speed-up %g, %d blocks of %d)",
        args.model_name, args.host, args.port, args.timing, args.speedup_ratio, args.num_gpu_blocks, args.block_size,
    )  # fmt: skip
    web.run_app(build_app(args), host=args.host, port=args.port, access_log=None, print=None, shutdown_timeout=2.0)


if __name__ == "__main__":
    main(sys.argv[1:])
