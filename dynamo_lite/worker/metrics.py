"""The worker agent's own Prometheus metrics (the engine's `vllm:*` are scraped from the engine).

Served on the agent's `/metrics` (its URL is `agent_url` in the worker's etcd record).
Labels `namespace`, `model`, `role` and `worker_id` are added by Prometheus from the
file-based service discovery that `orchestrator up` writes, not repeated here.
"""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST

log = logging.getLogger(__name__)
P = "dynamo_lite_worker_"


class WorkerMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        r = registry
        self.registered = Gauge(P + "registered", "1 while the worker's record is in etcd under a live lease",
                                registry=r)
        self.kv_batches = Counter(P + "kv_event_batches", "Engine KV event batches relayed to NATS, by path "
                                  "(live, or replayed after a gap)", ["path"], registry=r)  # fmt: skip
        self.load_reports = Counter(P + "load_reports", "Load reports published", registry=r)
        self.kv_snapshots = Counter(P + "kv_snapshots", "KV snapshots (the engine's cached blocks) sent to frontends",
                                    registry=r)
        self.prefill_jobs = Counter(P + "prefill_jobs", "Prefill jobs taken from the queue, by outcome "
                                    "(done, failed: handed back or reported)", ["outcome"], registry=r)  # fmt: skip
        self.prefill_seconds = Histogram(P + "prefill_job_seconds", "Engine time of one prefill job",
                                         buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60), registry=r)


class MetricsServer:
    """A tiny HTTP server for one registry on 127.0.0.1 (or `host`), port chosen by the OS."""

    def __init__(self, registry: CollectorRegistry, host: str = "127.0.0.1") -> None:
        self.registry = registry
        self.host = host
        self.port = 0
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/health", self._health)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        if self._runner is not None:
            await asyncio.shield(self._runner.cleanup())
            self._runner = None

    async def _metrics(self, _: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _health(self, _: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})
