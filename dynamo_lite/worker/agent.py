"""The worker agent: sits beside one engine and connects it to the cluster.

Start order: bind the KV-event relay (so the engine has a subscriber from its first
event), connect NATS and answer KV snapshot requests (the relayed events also feed a
`KvView` of what the engine caches, sent to frontends that start later), start or
attach the engine, register in etcd under a lease, publish load, and on prefill
workers pull jobs from the prefill queue.
Stop order (bounded at every step): revoke the lease (routers drop the worker at
once), stop pulling and hand back unfinished jobs, let the engine finish the
requests it runs, stop load, KV-event and snapshot publishing, drain NATS, stop the engine.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable
from dataclasses import dataclass

import aiohttp
import msgspec
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from prometheus_client import CollectorRegistry

from dynamo_lite.discovery import WorkerRegistration, etcd_client
from dynamo_lite.protocol import (
    KvEventBatch,
    KvSnapshotChunk,
    KvSnapshotRequest,
    LoadReport,
    PrefillJob,
    PrefillResult,
    RelayedKvEvents,
    Role,
    WorkerId,
    WorkerRecord,
    kv_events_subject,
    kv_snapshot_subject,
    load_subject,
)
from dynamo_lite.queue import PrefillConsumer, QueueSettings, connect_nats
from dynamo_lite.worker.coalesce import Coalescer
from dynamo_lite.worker.engine import EngineHandle
from dynamo_lite.worker.kv_relay import KvEventRelay
from dynamo_lite.worker.kv_view import KvView
from dynamo_lite.worker.load_reporter import (
    LoadReporter,
    cache_blocks,
    parse_engine_metrics,
)
from dynamo_lite.worker.metrics import MetricsServer, WorkerMetrics
from dynamo_lite.worker.prefill import EnginePrefill

log = logging.getLogger(__name__)
KV_EVENTS_WINDOW_S = 0.005
"""KV event batches are published at most once per this window, several to a message under load
(coalesce.py): a router learns of a block up to this much later, and the agent, nats-server and
every frontend handle one message per window instead of one per engine batch."""


@dataclass(frozen=True)
class AgentSettings:
    """What one worker agent needs to know; built by the CLI from cluster.yaml."""

    worker_id: WorkerId
    namespace: str
    role: Role
    model: str  # served model name
    block_size: int
    pool: str
    nats_url: str
    etcd_url: str
    lease_ttl_s: int = 10
    load_interval_s: float = 1.0
    prefill_concurrency: int = 4
    queue: QueueSettings = QueueSettings()
    drain_timeout_s: float = 30.0


class WorkerAgent:
    def __init__(self, settings: AgentSettings, engine: EngineHandle) -> None:
        self.settings = settings
        self.engine = engine
        self.nc: NatsClient | None = None
        self.session: aiohttp.ClientSession | None = None
        self.etcd = etcd_client(settings.etcd_url)
        self.registration: WorkerRegistration | None = None
        self.consumer: PrefillConsumer | None = None
        self.registry = CollectorRegistry()
        self.metrics = WorkerMetrics(self.registry)
        self.metrics.registered.set_function(
            lambda: float(self.registration is not None and self.registration.registered.is_set()))
        self.metrics_server = MetricsServer(self.registry)
        self.prefill_handler: EnginePrefill | None = None
        self.kv_view = KvView()  # what the engine caches, from the relayed events; served as snapshots
        self._kv_out: Coalescer[RelayedKvEvents] = Coalescer(self._send_events, KV_EVENTS_WINDOW_S)
        self._snapshots: Subscription | None = None
        self.relay = KvEventRelay(settings.worker_id, engine.kv_events_bind, self._publish_events,
                                  replay_endpoint=engine.kv_events_replay)
        self.load = LoadReporter(settings.worker_id, engine.url, self._publish_load, settings.load_interval_s)

    async def start(self) -> None:
        s = self.settings
        await self.metrics_server.start()
        self.relay.start()
        self.nc = await connect_nats(s.nats_url, f"worker-{s.worker_id}")
        self._snapshots = await self.nc.subscribe(kv_snapshot_subject(s.namespace, s.worker_id),
                                                  cb=self._serve_snapshot)
        await self.engine.start()
        self.session = aiohttp.ClientSession()
        await self.etcd.connect()
        self.registration = WorkerRegistration(self.etcd, s.namespace, await self._record(), s.lease_ttl_s)
        await self.registration.start()
        self.load.start(self.session)
        if s.role == Role.PREFILL:
            self.prefill_handler = EnginePrefill(s.worker_id, self.engine.url, self.session)
            self.consumer = PrefillConsumer(self.nc, s.namespace, s.model, s.worker_id, self._prefill,
                                            concurrency=s.prefill_concurrency, settings=s.queue)
            await self.consumer.start()
        log.info("worker %s (%s, %s) ready: engine %s", s.worker_id, s.role.value, s.model, self.engine.url)

    async def stop(self) -> None:
        """Orderly shutdown; safe to call after a partial start."""
        s = self.settings
        steps: list[tuple[str, Awaitable[object] | None]] = [
            ("revoking lease", self.registration.stop() if self.registration else None),
            ("handing back prefill jobs", self.consumer.stop(s.drain_timeout_s) if self.consumer else None),
            ("draining engine", self._drain_engine(s.drain_timeout_s) if self.session else None),
            ("stopping load reports", self.load.stop()),
            ("stopping KV event relay", self.relay.stop()),
            ("sending the last KV events", self._kv_out.close()),
            ("stopping KV snapshots", self._snapshots.unsubscribe() if self._snapshots is not None else None),
            ("draining NATS", self.nc.drain() if self.nc is not None and not self.nc.is_closed else None),
            ("closing etcd client", self.etcd.close()),
            ("closing HTTP session", self.session.close() if self.session else None),
            ("stopping engine", self.engine.stop()),
            ("stopping metrics server", self.metrics_server.stop()),
        ]
        for what, step in steps:
            if step is None:
                continue
            started = time.monotonic()
            await step
            log.info("worker %s: %s: done in %.1f s", s.worker_id, what, time.monotonic() - started)
        log.info("worker %s stopped", s.worker_id)

    async def _drain_engine(self, timeout_s: float) -> None:
        """Wait, at most `timeout_s`, until the engine has no running or waiting request.

        Routers dropped this worker when its lease went, so nothing new arrives
        (a request routed just before gets a moment: idle must be seen twice).
        """
        assert self.session is not None
        deadline, idle_seen = time.monotonic() + timeout_s, 0
        while idle_seen < 2:
            if time.monotonic() > deadline:
                log.warning("worker %s: engine still busy after %.0f s of draining", self.settings.worker_id, timeout_s)
                return
            try:
                async with self.session.get(f"{self.engine.url}/metrics",
                                            timeout=aiohttp.ClientTimeout(total=5)) as resp:
                    m = parse_engine_metrics(await resp.text())
            except (aiohttp.ClientError, TimeoutError):
                return  # the engine is gone: nothing left to drain
            busy = m.get("vllm:num_requests_running", 0) + m.get("vllm:num_requests_waiting", 0)
            idle_seen = idle_seen + 1 if busy == 0 else 0
            await asyncio.sleep(0.25)

    async def _record(self) -> WorkerRecord:
        assert self.session is not None
        async with self.session.get(f"{self.engine.url}/metrics") as resp:
            capacity = cache_blocks(await resp.text())
        s = self.settings
        return WorkerRecord(
            worker_id=s.worker_id, role=s.role, model=s.model, engine_url=self.engine.url,
            block_size=s.block_size, kv_capacity_blocks=capacity, nixl_side_channel=self.engine.nixl_side_channel,
            pool=s.pool, pid=self.engine.pid or os.getpid(), started_at=time.time(),
            agent_url=self.metrics_server.url,
        )

    async def _prefill(self, job: PrefillJob) -> PrefillResult:
        assert self.prefill_handler is not None
        started = time.monotonic()
        try:
            result = await self.prefill_handler(job)
        except BaseException:
            self.metrics.prefill_jobs.labels("failed").inc()
            raise
        self.metrics.prefill_jobs.labels("done").inc()
        self.metrics.prefill_seconds.observe(time.monotonic() - started)
        return result

    async def _publish_events(self, relayed: RelayedKvEvents, replayed: bool) -> None:
        self.metrics.kv_batches.labels("replayed" if replayed else "live").inc()
        self.kv_view.apply(relayed)
        await self._kv_out.add(relayed)

    async def _send_events(self, batches: list[RelayedKvEvents]) -> None:
        """One message of consecutive batches, in order (`KV_EVENTS_WINDOW_S`)."""
        if self.nc is not None and not self.nc.is_closed:
            await self.nc.publish(kv_events_subject(self.settings.namespace, self.settings.worker_id),
                                  msgspec.json.encode(batches))

    async def _publish_load(self, report: LoadReport) -> None:
        self.metrics.load_reports.inc()
        if self.nc is not None:
            await self.nc.publish(load_subject(self.settings.namespace, self.settings.worker_id),
                                  msgspec.json.encode(report))

    async def _serve_snapshot(self, msg: Msg) -> None:
        """Answer a `KvSnapshotRequest` with the view's chunks, all rendered at once (one `seq`)."""
        s = self.settings
        try:
            asker = msgspec.json.decode(msg.data, type=KvSnapshotRequest).frontend_id
        except msgspec.DecodeError as e:
            log.warning("worker %s: malformed KV snapshot request on %s: %s", s.worker_id, msg.subject, e)
            return
        if not msg.reply or self.nc is None:
            return
        seq = -1 if self.kv_view.seq is None else self.kv_view.seq
        batches = self.kv_view.snapshot() or [KvEventBatch(ts=0.0, events=[])]
        for i, batch in enumerate(batches):
            chunk = KvSnapshotChunk(worker_id=s.worker_id, seq=seq, index=i, last=i == len(batches) - 1, batch=batch)
            await self.nc.publish(msg.reply, msgspec.json.encode(chunk))
        self.metrics.kv_snapshots.inc()
        log.info("worker %s: KV snapshot of %d blocks at seq %d (%d chunks) sent to frontend %s", s.worker_id,
                 len(self.kv_view), seq, len(batches), asker)
