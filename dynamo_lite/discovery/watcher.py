"""A live view of the worker set: one snapshot, then a watch from its revision.

The watch resumes from the last revision it applied after any error (etcd
restarting, the connection dropping), so no put or delete is lost; if etcd has
compacted that revision away, the view is rebuilt from a fresh snapshot and the
difference is reported as changes. Listeners are called for every change, in
order, on the event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

import aetcd
import aetcd.exceptions
import msgspec

from dynamo_lite.discovery.etcd_client import ETCD_UNAVAILABLE, refusal
from dynamo_lite.protocol import Role, WorkerId, WorkerRecord, workers_prefix
from dynamo_lite.tasks import cancel_and_wait

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WorkerChange:
    """A worker appeared or changed (`record` set), or went away (`record` None)."""

    worker_id: WorkerId
    record: WorkerRecord | None
    previous: WorkerRecord | None


Listener = Callable[[WorkerChange], None]


class WorkerWatcher:
    def __init__(self, client: aetcd.Client, namespace: str, retry_s: float = 0.5) -> None:
        self.client = client
        self.prefix = workers_prefix(namespace).encode()
        self.retry_s = retry_s
        self.workers: dict[WorkerId, WorkerRecord] = {}
        self.revision = 0
        """The etcd revision the view reflects."""
        self._listeners: list[Listener] = []
        self._task: asyncio.Task[None] | None = None
        self._changed = asyncio.Condition()

    def add_listener(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def by_role(self, role: Role, model: str | None = None) -> list[WorkerRecord]:
        return [w for w in self.workers.values() if w.role == role and (model is None or w.model == model)]

    async def start(self) -> None:
        """Take the snapshot (raises if etcd is unreachable; EtcdAuthError if it refuses the
        client's credentials), then watch in the background."""
        if self._task is not None:
            return
        try:
            await self._resync()
        except ETCD_UNAVAILABLE as e:
            if (refused := refusal(e)) is not None:
                raise refused from e
            raise
        self._task = asyncio.create_task(self._watch_forever(), name="worker-watcher")

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None

    async def wait_for(self, predicate: Callable[[dict[WorkerId, WorkerRecord]], bool], timeout_s: float) -> None:
        """Wait until `predicate(self.workers)` holds; raises TimeoutError after `timeout_s`."""
        async with asyncio.timeout(timeout_s):
            async with self._changed:
                await self._changed.wait_for(lambda: predicate(self.workers))

    async def _resync(self) -> None:
        snapshot = await self.client.get_prefix(self.prefix)
        fresh = {}
        for kv in snapshot:
            record = self._decode(kv.key, kv.value)
            if record is not None:
                fresh[record.worker_id] = record
        for worker_id in set(self.workers) - set(fresh):
            await self._apply(worker_id, None)
        for worker_id, record in fresh.items():
            await self._apply(worker_id, record)
        self.revision = snapshot.header.revision if snapshot.header else self.revision
        log.info("worker view: %d workers at revision %d", len(self.workers), self.revision)

    async def _watch_forever(self) -> None:
        while True:
            try:
                await self._watch_once()
            except aetcd.exceptions.RevisionCompactedError:
                log.warning("worker watch: revision %d compacted; resyncing", self.revision + 1)
                await self._retry(self._resync)
            except ETCD_UNAVAILABLE as e:
                reason = refusal(e) or type(e).__name__
                log.warning("worker watch interrupted (%s); resuming from revision %d", reason, self.revision)
                await asyncio.sleep(self.retry_s)

    async def _watch_once(self) -> None:
        watch = await self.client.watch_prefix(self.prefix, start_revision=self.revision + 1)
        try:
            async for event in watch:
                worker_id = self._worker_id(event.kv.key)
                record = self._decode(event.kv.key, event.kv.value) if event.kind == "PUT" else None
                await self._apply(worker_id, record)
                self.revision = max(self.revision, event.kv.mod_revision)
        finally:
            await asyncio.shield(self._cancel(watch))

    async def _cancel(self, watch: object) -> None:
        try:
            await watch.cancel()  # type: ignore[attr-defined]
        except ETCD_UNAVAILABLE:
            pass

    async def _retry(self, step: Callable[[], object]) -> None:
        while True:
            try:
                await step()  # type: ignore[misc]
                return
            except ETCD_UNAVAILABLE:
                await asyncio.sleep(self.retry_s)

    async def _apply(self, worker_id: WorkerId, record: WorkerRecord | None) -> None:
        previous = self.workers.get(worker_id)
        if record == previous:
            return  # e.g. a worker re-writing its record after an etcd restart
        if record is None:
            del self.workers[worker_id]
        else:
            self.workers[worker_id] = record
        change = WorkerChange(worker_id, record, previous)
        for listener in self._listeners:
            listener(change)
        async with self._changed:
            self._changed.notify_all()

    def _worker_id(self, key: bytes) -> WorkerId:
        return WorkerId(key.decode().rsplit("/", 1)[-1])

    def _decode(self, key: bytes, value: bytes) -> WorkerRecord | None:
        try:
            return msgspec.json.decode(value, type=WorkerRecord)
        except msgspec.ValidationError as e:
            log.warning("ignoring malformed worker record at %s: %s", key.decode(errors="replace"), e)
            return None
