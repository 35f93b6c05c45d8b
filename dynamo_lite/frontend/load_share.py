"""Frontend processes share their in-flight load, as Dynamo's router replicas share active blocks.

Each router sees its own requests at once, and the others' only through the workers' load
reports, a second late. So this process publishes its own per-worker figures (`PeerLoad`, from
`Fleet.own_loads`: never what it learned from peers) on `<ns>.frontend_load.<frontend_id>`, and
feeds every other process's messages to its routers (`Fleet.on_peer_load`):
- as soon as its own load changes (`Fleet.load_changed`: a request sent, its first token, its
  end), at most once every `min_gap_s` (10 ms): changes closer together go in one message;
- every `interval_s` (100 ms) while it has requests in flight, so that peers keep counting them;
- once more when it goes idle, then nothing until the next change.
A process that stops publishing (killed) drops out of the others' figures after the router's
`peer_load_ttl_s`.

Why at once: a frontend routes blind to another's new request until that one's message comes.
With a message only every 100 ms, two clients sending a request at a time, one to each of two
frontends, ended up on one worker in 61 of 101 samples in one CI run (test_frontend_load_share.py):
once on one worker they finish together, route together, blind, and choose alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import msgspec
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from prometheus_client import CollectorRegistry, Counter

from dynamo_lite.frontend.fleet import Fleet
from dynamo_lite.frontend.state import FrontendState
from dynamo_lite.protocol import PeerLoad, WorkerId, WorkerLoad, frontend_load_subject
from dynamo_lite.tasks import cancel_and_wait

log = logging.getLogger(__name__)
P = "dynamo_lite_frontend_"
PUBLISH_INTERVAL_S = 0.1  # while requests are in flight, a message at least this often
MIN_GAP_S = 0.01  # and changes at most this often


class LoadShareMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.published = Counter(P + "load_shares_published", "Own in-flight load messages published for the "
                                 "other frontend processes", registry=registry)
        self.received = Counter(P + "load_shares_received", "In-flight load messages received from other frontend "
                                "processes", registry=registry)


class LoadShare:
    """Publishes this process's load and applies the others'; owns one task and one subscription."""

    def __init__(self, nc: NatsClient, namespace: str, fleet: Fleet, frontend_id: str, metrics: LoadShareMetrics,
                 interval_s: float = PUBLISH_INTERVAL_S, min_gap_s: float = MIN_GAP_S) -> None:
        self._nc, self._ns, self._fleet, self._metrics = nc, namespace, fleet, metrics
        self.frontend_id = frontend_id
        self._interval_s = interval_s
        self._min_gap_s = min(min_gap_s, interval_s)
        self._sub: Subscription | None = None
        self._task: asyncio.Task[None] | None = None
        self._last: dict[WorkerId, WorkerLoad] = {}  # what the others were last told

    async def start(self) -> None:
        if self._task is not None:
            return
        self._sub = await self._nc.subscribe(frontend_load_subject(self._ns, "*"), cb=self._on_peer)
        self._fleet.load_changed.set()  # tell what is in flight now, if anything
        self._task = asyncio.create_task(self._publish_forever(), name="frontend-load-share")

    async def stop(self) -> None:
        """Stop publishing (telling the others this process is idle, if it was not) and listening."""
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None
            if self._last and not self._nc.is_closed:
                await self._publish({})
        if self._sub is not None:
            if not self._nc.is_closed:  # a closed connection has dropped it already
                await self._sub.unsubscribe()
            self._sub = None

    async def _publish_forever(self) -> None:
        changed = self._fleet.load_changed
        published_at = float("-inf")
        while True:
            if self._last:  # requests in flight: a message every interval even without a change
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), self._interval_s)
            else:
                await changed.wait()
            changed.clear()
            wait = published_at + self._min_gap_s - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            loads = self._fleet.own_loads()
            if loads or loads != self._last:
                await self._publish(loads)
                published_at = time.monotonic()

    async def _publish(self, loads: dict[WorkerId, WorkerLoad]) -> None:
        load = PeerLoad(frontend_id=self.frontend_id, ts=time.time(), workers=loads)
        await self._nc.publish(frontend_load_subject(self._ns, self.frontend_id), msgspec.json.encode(load))
        self._metrics.published.inc()
        self._last = loads

    async def _on_peer(self, msg: Msg) -> None:
        try:
            load = msgspec.json.decode(msg.data, type=PeerLoad)
        except msgspec.DecodeError as e:
            log.warning("dropping malformed frontend load on %s: %s", msg.subject, e)
            return
        if load.frontend_id != self.frontend_id:
            self._fleet.on_peer_load(load)
            self._metrics.received.inc()


async def open_load_share(stack: contextlib.AsyncExitStack, nc: NatsClient, state: FrontendState,
                          frontend_id: str) -> None:
    """Share this process's load (unless `frontend.share_load` is false) until `stack` closes."""
    if not state.config.frontend.share_load:
        return
    share = LoadShare(nc, state.config.namespace, state.fleet, frontend_id, LoadShareMetrics(state.metrics.registry))
    await share.start()
    stack.push_async_callback(share.stop)
