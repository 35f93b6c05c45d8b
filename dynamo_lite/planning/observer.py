"""What the planner looks at each tick: the prefill queue, decode load, frontend traffic.

- prefill queue depth: JetStream consumer info of the model's prefill queue;
- decode load: the latest `LoadReport` (NATS `<ns>.load.*`) of each live decode
  (or aggregated) worker of the model, live meaning registered in etcd now and
  reported within `stale_after_s`;
- traffic: the frontend's /metrics, differenced between ticks.
A source that cannot be read is absent from the observation, never a guess.
"""

from __future__ import annotations

import logging
import time

import msgspec
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import Error as NatsError
from nats.js.errors import Error as JsError

from dynamo_lite.discovery import WorkerWatcher
from dynamo_lite.planning.frontend_metrics import FrontendScraper
from dynamo_lite.protocol import LoadReport, Role
from dynamo_lite.queue import queue_depth
from planner.types import DecodeLoad, Observation

log = logging.getLogger(__name__)


class ClusterObserver:
    def __init__(self, nc: NatsClient, watcher: WorkerWatcher, namespace: str, model: str,
                 decode_role: Role, frontend: FrontendScraper | None, stale_after_s: float = 10.0) -> None:
        self.nc = nc
        self.js = nc.jetstream()
        self.watcher = watcher
        self.namespace = namespace
        self.model = model
        self.decode_role = decode_role
        self.frontend = frontend
        self.stale_after_s = stale_after_s
        self.reports: dict[str, LoadReport] = {}
        self._sub: Subscription | None = None

    async def start(self) -> None:
        if self._sub is None:
            self._sub = await self.nc.subscribe(f"{self.namespace}.load.*", cb=self._on_load)

    async def stop(self) -> None:
        if self._sub is not None:
            await self._sub.unsubscribe()
            self._sub = None

    async def _on_load(self, msg: Msg) -> None:
        try:
            report = msgspec.json.decode(msg.data, type=LoadReport)
        except msgspec.ValidationError as e:
            log.warning("planner: ignoring malformed load report on %s: %s", msg.subject, e)
            return
        self.reports[report.worker_id] = report

    def decode_loads(self, now_unix: float) -> tuple[DecodeLoad, ...]:
        live = {w.worker_id for w in self.watcher.by_role(self.decode_role, self.model)}
        self.reports = {k: r for k, r in self.reports.items() if k in live or now_unix - r.ts < self.stale_after_s}
        return tuple(DecodeLoad(r.worker_id, r.kv_usage, r.waiting, r.running) for k, r in sorted(self.reports.items())
                     if k in live and now_unix - r.ts < self.stale_after_s)

    async def observe(self, now: float) -> Observation:
        pending = in_flight = None
        try:
            depth = await queue_depth(self.js, self.namespace, self.model)
            pending, in_flight = depth.pending, depth.in_flight
        except (NatsError, JsError, TimeoutError) as e:
            log.debug("planner: prefill queue depth unavailable (%s)", e)
        traffic = await self.frontend.scrape(now) if self.frontend is not None else None
        return Observation(prefill_queue=pending, prefill_in_flight=in_flight,
                           decode=self.decode_loads(time.time()), traffic=traffic)
