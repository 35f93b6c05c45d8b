"""A warm router index at start: each worker that joins the fleet (every worker already there
when the frontend starts, too) is asked for its agent's KV snapshot, so that blocks stored
before this frontend subscribed to the KV events still attract their prompts.

One fetch per worker: subscribe an inbox, send a `KvSnapshotRequest` on
`<ns>.kv_snapshot.<worker_id>` with the inbox as reply subject, collect `KvSnapshotChunk`s
until the last, within `timeout_s`. Meanwhile `Fleet` buffers that worker's live KV batches
(`begin_sync`); `end_sync` loads the snapshot as the baseline and applies them on top. A
fetch that fails (no agent listening, no answer in time, a malformed or incomplete answer)
is logged and counted, and the worker's index is built from live events only, as without
snapshots.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable

import msgspec
from nats.aio.client import NO_RESPONDERS_STATUS
from nats.aio.client import Client as NatsClient
from prometheus_client import CollectorRegistry, Counter

from dynamo_lite.discovery import WorkerChange, WorkerWatcher
from dynamo_lite.frontend.fleet import Fleet, KvSnapshot
from dynamo_lite.frontend.state import FrontendState
from dynamo_lite.protocol import (
    KvSnapshotChunk,
    KvSnapshotRequest,
    WorkerId,
    kv_snapshot_subject,
)
from dynamo_lite.tasks import cancel_and_wait

log = logging.getLogger(__name__)
P = "dynamo_lite_frontend_"


class SnapshotFailed(Exception):
    """A worker's KV snapshot could not be had; `outcome` names why (a metric label)."""

    def __init__(self, outcome: str, detail: str) -> None:
        super().__init__(detail)
        self.outcome = outcome


class SnapshotMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.snapshots = Counter(P + "kv_snapshots", "KV snapshots asked of worker agents, by outcome (loaded, "
                                 "timeout, no_responders, malformed, error)", ["model", "outcome"], registry=registry)
        self.blocks = Counter(P + "kv_snapshot_blocks", "Blocks loaded into the router from KV snapshots", ["model"],
                              registry=registry)


async def fetch_snapshot(nc: NatsClient, namespace: str, worker_id: WorkerId, frontend_id: str,
                         timeout_s: float) -> KvSnapshot:
    """Ask a worker's agent for its snapshot. Raises `SnapshotFailed`."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    batches = []
    try:
        request = msgspec.json.encode(KvSnapshotRequest(frontend_id=frontend_id))
        await nc.publish(kv_snapshot_subject(namespace, worker_id), request, reply=inbox)
        async with asyncio.timeout(timeout_s):
            while True:
                msg = await sub.next_msg(timeout=None)
                if msg.headers and msg.headers.get("Status") == NO_RESPONDERS_STATUS:
                    raise SnapshotFailed("no_responders", "no agent listens for snapshot requests")
                try:
                    chunk = msgspec.json.decode(msg.data, type=KvSnapshotChunk)
                except msgspec.DecodeError as e:
                    raise SnapshotFailed("malformed", f"undecodable chunk: {e}") from e
                if chunk.index != len(batches) or chunk.worker_id != worker_id:
                    raise SnapshotFailed("malformed", f"chunk {chunk.index} of {chunk.worker_id} out of order")
                batches.append(chunk.batch)
                if chunk.last:
                    return KvSnapshot(worker_id, chunk.seq, batches)
    except TimeoutError as e:
        raise SnapshotFailed("timeout", f"no complete answer in {timeout_s:g} s ({len(batches)} chunks)") from e
    finally:
        await sub.unsubscribe()


class KvSnapshots:
    """Fetches and loads snapshots; owns one task per worker being synced, cancelled by `stop`.

    `on_worker_change` is a `WorkerWatcher` listener; `sync` starts one worker's fetch
    (superseding one in progress for it); `wait` awaits those in progress.
    """

    def __init__(self, nc: NatsClient, namespace: str, fleet: Fleet, metrics: SnapshotMetrics, frontend_id: str,
                 timeout_s: float) -> None:
        self._nc, self._ns, self._fleet, self._metrics = nc, namespace, fleet, metrics
        self._frontend_id, self._timeout_s = frontend_id, timeout_s
        self._tasks: dict[WorkerId, asyncio.Task[None]] = {}
        self._stopped = False

    def on_worker_change(self, change: WorkerChange) -> None:
        if self._stopped:
            return
        if change.record is None:
            task = self._tasks.pop(change.worker_id, None)
            if task is not None:
                task.cancel()
        else:
            self.sync(change.worker_id)

    def sync(self, worker_id: WorkerId) -> None:
        token = self._fleet.begin_sync(worker_id)
        if token is None:
            return  # not routed here (a prefill worker, an unknown model)
        previous = self._tasks.pop(worker_id, None)
        if previous is not None:
            previous.cancel()
        task = asyncio.create_task(self._sync(worker_id, token), name=f"kv-snapshot-{worker_id}")
        self._tasks[worker_id] = task
        task.add_done_callback(lambda t: self._tasks.pop(worker_id) if self._tasks.get(worker_id) is t else None)

    async def start(self, workers: Iterable[WorkerId]) -> None:
        """Sync every worker in `workers` and wait for them (at most the timeout, with a margin)."""
        for worker_id in workers:
            self.sync(worker_id)
        await self.wait()

    async def wait(self) -> None:
        if self._tasks:
            await asyncio.wait(list(self._tasks.values()), timeout=self._timeout_s + 1.0)

    async def stop(self) -> None:
        self._stopped = True
        tasks = list(self._tasks.values())
        await cancel_and_wait(*tasks)

    async def _sync(self, worker_id: WorkerId, token: int) -> None:
        snapshot = None
        model = self._fleet.model_of(worker_id) or ""
        try:
            snapshot = await fetch_snapshot(self._nc, self._ns, worker_id, self._frontend_id, self._timeout_s)
        except SnapshotFailed as e:
            self._metrics.snapshots.labels(model, e.outcome).inc()
            log.warning("worker %s: no KV snapshot (%s: %s); its index builds from live KV events", worker_id,
                        e.outcome, e)
        except Exception as e:  # noqa: BLE001 - NATS trouble: same fallback, never a dead task
            self._metrics.snapshots.labels(model, "error").inc()
            log.warning("worker %s: KV snapshot failed (%s: %s); its index builds from live KV events", worker_id,
                        type(e).__name__, e)
        finally:
            outcome = self._fleet.end_sync(worker_id, token, snapshot)
        if snapshot is not None and outcome is not None:
            self._metrics.snapshots.labels(model, "loaded").inc()
            self._metrics.blocks.labels(model).inc(outcome.stored)
            log.info("worker %s: KV snapshot loaded: %d blocks at seq %d (%d orphaned, %d rejected)", worker_id,
                     outcome.stored, snapshot.seq, outcome.orphaned, outcome.rejected)


async def open_snapshots(stack: contextlib.AsyncExitStack, nc: NatsClient, state: FrontendState,
                         watcher: WorkerWatcher, frontend_id: str) -> None:
    """Sync the workers `watcher` knows (waiting for them, bounded) and each that joins later,
    unless `frontend.kv_snapshot_timeout_s` is 0; stopped when `stack` closes. Call it after
    subscribing to the KV events, so that no batch falls between a snapshot and the live ones."""
    timeout_s = state.config.frontend.kv_snapshot_timeout_s
    if timeout_s <= 0:
        return
    snapshots = KvSnapshots(nc, state.config.namespace, state.fleet, SnapshotMetrics(state.metrics.registry),
                            frontend_id, timeout_s)
    stack.push_async_callback(snapshots.stop)
    watcher.add_listener(snapshots.on_worker_change)
    await snapshots.start(list(watcher.workers))
