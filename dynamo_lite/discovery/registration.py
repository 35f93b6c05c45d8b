"""A worker's registration in etcd: a typed record on a lease that is kept alive.

The record lives at `/dynamo_lite/<ns>/workers/<role>/<worker_id>` for as long as
the lease does. `stop()` revokes the lease so routers drop the worker at once; a
worker that dies without stopping disappears when the lease expires (its TTL).
If etcd restarts, or the lease is lost, the keep-alive loop grants a new lease
and writes the record again.
"""

from __future__ import annotations

import asyncio
import logging

import aetcd
import msgspec

from dynamo_lite.discovery.etcd_client import ETCD_UNAVAILABLE, refusal
from dynamo_lite.protocol import WorkerRecord, worker_key
from dynamo_lite.tasks import cancel_and_wait

log = logging.getLogger(__name__)


class WorkerRegistration:
    def __init__(self, client: aetcd.Client, namespace: str, record: WorkerRecord, ttl_s: int = 10) -> None:
        self.client = client
        self.key = worker_key(namespace, record.role, record.worker_id).encode()
        self.record = record
        self.ttl_s = ttl_s
        self.lease_id: int | None = None
        self._task: asyncio.Task[None] | None = None
        self.registered = asyncio.Event()
        """Set while the record is known to be in etcd; cleared while re-registering."""

    async def start(self, timeout_s: float = 30.0) -> None:
        """Register (retrying while etcd is unreachable, up to `timeout_s`), then keep the lease alive.

        Raises EtcdAuthError at once if etcd refuses the client's credentials."""
        if self._task is not None:
            return
        deadline = asyncio.get_running_loop().time() + timeout_s
        while True:
            try:
                await self._register()
                break
            except ETCD_UNAVAILABLE as e:
                if (refused := refusal(e)) is not None:
                    raise refused from e
                if asyncio.get_running_loop().time() > deadline:
                    raise RuntimeError(f"worker {self.record.worker_id}: etcd unreachable for {timeout_s:.0f} s") from e
                log.warning("worker %s: etcd unreachable (%s); retrying registration",
                            self.record.worker_id, type(e).__name__)
                await asyncio.sleep(0.5)
        self._task = asyncio.create_task(self._keep_alive(), name=f"lease-keepalive-{self.record.worker_id}")

    async def update(self, record: WorkerRecord) -> None:
        """Replace the record (same key) under the current lease."""
        self.record = record
        if self.lease_id is not None:
            await self.client.put(self.key, msgspec.json.encode(record), lease=self.lease_id)

    async def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the keep-alive and revoke the lease, which deletes the record at once."""
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None
        if self.lease_id is not None:
            try:
                await asyncio.wait_for(self.client.revoke_lease(self.lease_id), timeout_s)
            except ETCD_UNAVAILABLE as e:
                log.warning("worker %s: could not revoke lease (%s); it expires in %d s",
                            self.record.worker_id, e, self.ttl_s)
            self.lease_id = None
        self.registered.clear()

    async def _register(self) -> None:
        lease = await self.client.lease(self.ttl_s)
        await self.client.put(self.key, msgspec.json.encode(self.record), lease=lease.id)
        self.lease_id = lease.id
        self.registered.set()
        log.info("worker %s registered at %s (lease %x, ttl %d s)",
                 self.record.worker_id, self.key.decode(), lease.id, self.ttl_s)

    async def _keep_alive(self) -> None:
        interval = max(self.ttl_s / 3, 0.5)
        while True:
            await asyncio.sleep(interval)
            try:
                if await self._lease_alive():
                    continue
                log.warning("worker %s: lease lost; registering again", self.record.worker_id)
                self.registered.clear()
                await self._register()
            except ETCD_UNAVAILABLE as e:
                self.registered.clear()
                if (refused := refusal(e)) is not None:
                    log.error("worker %s: %s; retrying in %.1f s", self.record.worker_id, refused, interval)
                    continue
                log.warning("worker %s: etcd unreachable (%s); retrying in %.1f s",
                            self.record.worker_id, type(e).__name__, interval)

    async def _lease_alive(self) -> bool:
        assert self.lease_id is not None
        reply = await self.client.refresh_lease(self.lease_id)
        if reply is None or reply.TTL <= 0:
            return False
        # After an etcd restart the lease survives, but make sure our record does too.
        if not self.registered.is_set():
            await self.client.put(self.key, msgspec.json.encode(self.record), lease=self.lease_id)
            self.registered.set()
        return True
