"""Submit prefill jobs to the global queue and await their typed results.

A submitter owns one reply subscription (`<inbox>.*`); each job names its own
reply subject under it, so results come back to this process only. A result is
matched to its waiting caller by job id; a late or duplicate result (the job
was redelivered and done twice) finds no waiter and is dropped.

The queue depth a routing decision reads is polled (`QueueSettings.depth_poll_s`) by one
task the submitter owns, for every model asked about, rather than asked of JetStream for
each request that might prefill remotely.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid

import msgspec
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import Error as NatsError

from dynamo_lite.protocol import (
    JobId,
    PrefillJob,
    PrefillResult,
    RequestId,
    prefill_subject,
)
from dynamo_lite.queue.stream import (
    QueueDepth,
    QueueSettings,
    ensure_stream,
    queue_depth,
)
from dynamo_lite.tasks import cancel_and_wait

log = logging.getLogger(__name__)


class PrefillError(RuntimeError):
    """A prefill job failed; the message says why (from the worker, or a timeout)."""


class PrefillTimeout(PrefillError):
    """No result within the caller's bound; the job may still be queued or running."""


class PrefillSubmitter:
    def __init__(self, nc: NatsClient, namespace: str, settings: QueueSettings = QueueSettings()) -> None:
        self.nc = nc
        self.js = nc.jetstream()
        self.namespace = namespace
        self.settings = settings
        self._inbox = nc.new_inbox()
        self._waiters: dict[JobId, asyncio.Future[PrefillResult]] = {}
        self._sub: Subscription | None = None
        self._depths: dict[str, tuple[float, QueueDepth]] = {}  # model -> (read at, depth)
        self._poller: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if self._sub is not None:
            return
        await ensure_stream(self.js, self.namespace, self.settings)
        self._sub = await self.nc.subscribe(f"{self._inbox}.*", cb=self._on_result)
        self._poller = asyncio.create_task(self._poll_depths(), name="prefill-queue-depth")

    async def stop(self) -> None:
        if self._poller is not None:
            await cancel_and_wait(self._poller)
            self._poller = None
        if self._sub is not None:
            await self._sub.unsubscribe()
            self._sub = None
        for job_id, waiter in self._waiters.items():
            if not waiter.done():
                waiter.set_exception(PrefillError(f"prefill job {job_id}: submitter stopped"))
        self._waiters.clear()

    async def prefill(
        self, request_id: RequestId, model: str, token_ids: list[int], timeout_s: float
    ) -> PrefillResult:
        """Queue one prefill and wait for it; raises PrefillError or PrefillTimeout."""
        if self._sub is None:
            raise RuntimeError("PrefillSubmitter.start() was not called")
        job_id = JobId(uuid.uuid4().hex)
        now = time.time()
        job = PrefillJob(
            job_id=job_id,
            request_id=request_id,
            model=model,
            token_ids=token_ids,
            reply_subject=f"{self._inbox}.{job_id}",
            submitted_at=now,
            deadline=now + timeout_s,
        )
        waiter = asyncio.get_running_loop().create_future()
        self._waiters[job_id] = waiter
        try:
            async with asyncio.timeout(timeout_s):
                await self.js.publish(
                    prefill_subject(self.namespace, model),
                    msgspec.json.encode(job),
                    headers={"Nats-Msg-Id": job_id},
                )
                result = await waiter
        except TimeoutError:
            raise PrefillTimeout(
                f"request {request_id}: prefill job {job_id} got no result within {timeout_s:.1f} s"
            ) from None
        finally:
            self._waiters.pop(job_id, None)
        if result.error is not None:
            raise PrefillError(f"request {request_id}: prefill job {job_id} failed: {result.error}")
        return result

    async def depth(self, model: str) -> QueueDepth:
        """The model's queue depth as last polled; asked of JetStream when there is no recent reading."""
        read = self._depths.get(model)
        if read is not None and time.monotonic() - read[0] <= 4 * self.settings.depth_poll_s:
            return read[1]
        depth = await queue_depth(self.js, self.namespace, model)
        self._depths[model] = (time.monotonic(), depth)
        return depth

    async def _poll_depths(self) -> None:
        while True:
            await asyncio.sleep(self.settings.depth_poll_s)
            for model in list(self._depths):
                try:
                    self._depths[model] = (time.monotonic(), await queue_depth(self.js, self.namespace, model))
                except Exception as e:  # noqa: BLE001 - the reading ages out; `depth` then asks (and raises)
                    log.debug("queue depth of %s unavailable: %s", model, e)

    async def _on_result(self, msg: Msg) -> None:
        if msg.reply:  # confirm receipt: the worker sends the result again until it hears this
            with contextlib.suppress(NatsError):
                await msg.respond(b"")
        try:
            result = msgspec.json.decode(msg.data, type=PrefillResult)
        except msgspec.ValidationError as e:
            log.warning("dropping malformed prefill result on %s: %s", msg.subject, e)
            return
        waiter = self._waiters.get(result.job_id)
        if waiter is None or waiter.done():
            log.debug("prefill job %s: result arrived with no waiter (late or duplicate)", result.job_id)
            return
        waiter.set_result(result)
