"""`PlannerService`: the planner as a component of `orchestrator up`.

Every `interval_s`: observe the cluster, ask the `Planner` for a decision, record
metrics, log the decision with its reasons, and (unless dry-run) hand it to the
scaling connector, which applies it in the background. Serves its metrics on
`/metrics`. Runs inside the supervisor process, next to the pools it scales.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from dynamo_lite.infra.process import ProcessInfo
from dynamo_lite.planning.metrics import PlannerMetrics
from dynamo_lite.tasks import cancel_and_wait
from planner.connectors.base import ScalingConnector
from planner.core import Planner
from planner.sla_policy import SlaPolicy
from planner.types import Decision, Observation, Pool

log = logging.getLogger(__name__)

Observe = Callable[[float], Awaitable[Observation]]


class PlannerService:
    def __init__(self, planner: Planner, connector: ScalingConnector, observe: Observe, interval_s: float,
                 registry: CollectorRegistry, dry_run: bool = False, host: str = "127.0.0.1", port: int = 0,
                 on_start: Callable[[], Awaitable[None]] | None = None,
                 on_stop: Callable[[], Awaitable[None]] | None = None) -> None:
        self.name = f"planner ({planner.policy.name} policy{', dry run' if dry_run else ''})"
        self.planner = planner
        self.connector = connector
        self.observe = observe
        self.interval_s = interval_s
        self.metrics = PlannerMetrics(registry)
        self.dry_run = dry_run
        self.host, self.port = host, port
        self.decisions: list[Decision] = []  # the last few, newest last (for status and tests)
        self._on_start, self._on_stop = on_start, on_stop
        self._task: asyncio.Task[None] | None = None
        self._runner: web.AppRunner | None = None
        self.url: str | None = None
        self._failures_seen = 0

    def processes(self) -> list[ProcessInfo]:
        """The supervisor's own pid (the planner runs inside it), for `status` to show the metrics URL."""
        return [ProcessInfo(name="planner", pid=os.getpid(), url=self.url)] if self.url else []

    async def start(self) -> None:
        if self._task is not None:
            return
        if self._on_start is not None:
            await self._on_start()
        await self._serve_metrics()
        self.metrics.dry_run.set(1 if self.dry_run else 0)
        self._task = asyncio.create_task(self._run(), name="planner-loop")
        log.info("planner: %s, every %.0f s, metrics at %s", self.name, self.interval_s, self.url)

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None
        await self.connector.stop()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._on_stop is not None:
            await self._on_stop()

    async def _serve_metrics(self) -> None:
        async def metrics(_: web.Request) -> web.Response:
            body = generate_latest(self.metrics.registry)
            return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

        app = web.Application()
        app.router.add_get("/metrics", metrics)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://{self.host}:{port}/metrics"

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            await self.tick()

    async def tick(self) -> Decision:
        """One decision: observe, decide, record, apply (or only log, in dry-run)."""
        obs = await self.observe(self.planner.clock.now())
        await self.connector.refresh()
        decision = self.planner.tick(obs, self.connector.current())
        self.metrics.record(obs, decision)
        if isinstance(self.planner.policy, SlaPolicy):
            self.metrics.correction.labels(pool=Pool.PREFILL.value).set(self.planner.policy.prefill_correction)
            self.metrics.correction.labels(pool=Pool.DECODE.value).set(self.planner.policy.decode_correction)
            self.metrics.forecast_margin.set(self.planner.policy.margin)
        self.decisions = [*self.decisions[-99:], decision]
        if decision.changed:
            log.info("planner%s: %s", " (dry run)" if self.dry_run else "", decision.explain())
        else:
            log.debug("planner: %s", decision.explain())
        failures = getattr(self.connector, "failures", 0)  # scaling runs in the background: count since last tick
        if failures > self._failures_seen:
            self.metrics.scale_failures.inc(failures - self._failures_seen)
            self._failures_seen = failures
        if not self.dry_run:
            self.connector.apply(decision)
        return decision
