"""The prefill worker's side of the queue: pull jobs, run them, answer, ack.

Contract of the handler (`async (PrefillJob) -> PrefillResult`):
- returns a result: it is sent to the job's reply subject, then the job is acked;
- raises `RetryableJobError`: the job is nak'ed with a delay and goes to some
  worker again (another one, if another is pulling);
- raises `PoisonJobError`, or anything on the job's last delivery: the submitter
  is told why, and the job is terminated (never redelivered).
While a handler runs, the consumer sends `in_progress` heartbeats so a long job
is not redelivered; if this process dies, heartbeats stop and JetStream hands
the job to another worker after `ack_wait`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

import msgspec
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.errors import ConnectionClosedError, NoRespondersError
from nats.errors import Error as NatsError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext
from nats.js.errors import FetchTimeoutError

from dynamo_lite.protocol import PrefillJob, PrefillResult, WorkerId, prefill_subject
from dynamo_lite.queue.stream import (
    QueueSettings,
    consumer_config,
    ensure_stream,
    stream_name,
)
from dynamo_lite.tasks import cancel_and_wait

log = logging.getLogger(__name__)

_FETCH_WAIT_S = 1.0
_RESULT_ACK_S = 1.0  # how long a worker waits for the submitter to confirm a result before sending it again
_RESULT_RETRY_S = 10.0  # how long it keeps trying: a NATS restart and the submitter's reconnection fit in it
"""How long one pull request waits on the server for a job."""

Handler = Callable[[PrefillJob], Awaitable[PrefillResult]]


class RetryableJobError(RuntimeError):
    """The job may succeed later or elsewhere (engine busy, connection reset)."""


class PoisonJobError(RuntimeError):
    """The job can never succeed (malformed, prompt too long): do not redeliver it."""


class PrefillConsumer:
    def __init__(
        self,
        nc: NatsClient,
        namespace: str,
        model: str,
        worker_id: WorkerId,
        handler: Handler,
        concurrency: int = 4,
        settings: QueueSettings = QueueSettings(),
        nak_delay_s: float = 1.0,
    ) -> None:
        self.nc = nc
        self.js = nc.jetstream()
        self.namespace = namespace
        self.model = model
        self.worker_id = worker_id
        self.handler = handler
        self.concurrency = concurrency
        self.settings = settings
        self.nak_delay_s = nak_delay_s
        self._puller: asyncio.Task[None] | None = None
        self._sub: JetStreamContext.PullSubscription | None = None
        self._jobs: set[asyncio.Task[None]] = set()
        self._stopping = asyncio.Event()
        self.jobs_done = 0
        self.jobs_failed = 0

    async def start(self) -> None:
        if self._puller is not None:
            return
        await ensure_stream(self.js, self.namespace, self.settings)
        config = consumer_config(self.model, self.namespace, self.settings)
        sub = await self.js.pull_subscribe(
            prefill_subject(self.namespace, self.model),
            durable=config.durable_name,
            stream=stream_name(self.namespace),
            config=config,
        )
        self._stopping.clear()
        self._sub = sub
        self._puller = asyncio.create_task(self._pull(sub), name=f"prefill-puller-{self.worker_id}")
        log.info("worker %s: pulling prefill jobs for %s (%d at a time)", self.worker_id, self.model, self.concurrency)

    async def stop(self, drain_timeout_s: float = 30.0) -> None:
        """Stop pulling; let jobs in hand finish within the timeout, else hand them back.

        The puller is let finish its open fetch first: a pull request still open on
        the server would swallow a job handed back below until `ack_wait`.
        """
        self._stopping.set()
        if self._puller is None:
            return
        await asyncio.wait([self._puller], timeout=_FETCH_WAIT_S + 1.0)
        await cancel_and_wait(self._puller)
        self._puller = None
        if self._sub is not None:
            # Drop the fetch inbox: status replies left in it would stall a later NATS drain.
            with contextlib.suppress(NatsError):
                await self._sub.unsubscribe()
            self._sub = None
        if self._jobs:
            _, unfinished = await asyncio.wait(self._jobs, timeout=drain_timeout_s)
            await cancel_and_wait(*unfinished)  # _run_one naks the job it holds, so it is redelivered at once

    async def _pull(self, sub: object) -> None:
        """One fetch at a time (a pull subscription is not for concurrent fetches), up to
        `concurrency` jobs running."""
        slots = asyncio.Semaphore(self.concurrency)
        while not self._stopping.is_set():
            await slots.acquire()
            try:
                msgs = await sub.fetch(1, timeout=_FETCH_WAIT_S)  # type: ignore[attr-defined]
            except (FetchTimeoutError, NatsTimeoutError):
                slots.release()
                continue
            except ConnectionClosedError:
                log.info("worker %s: NATS connection closed; no more prefill jobs", self.worker_id)
                return
            except NatsError as e:  # disconnected or reconnecting: the client recovers by itself
                slots.release()
                log.warning("worker %s: fetching prefill jobs failed (%s); retrying", self.worker_id, e)
                await asyncio.sleep(_FETCH_WAIT_S / 2)
                continue
            for msg in msgs:
                job = asyncio.create_task(self._run_one(msg))
                self._jobs.add(job)
                job.add_done_callback(self._jobs.discard)
                job.add_done_callback(lambda _: slots.release())

    async def _run_one(self, msg: Msg) -> None:
        try:
            job = msgspec.json.decode(msg.data, type=PrefillJob)
        except msgspec.ValidationError as e:
            log.error("worker %s: terminating malformed prefill job: %s", self.worker_id, e)
            await msg.term()
            return
        if time.time() > job.deadline:
            log.warning("job %s (request %s): past its deadline, dropped", job.job_id, job.request_id)
            await msg.term()
            return
        heartbeat = asyncio.create_task(self._heartbeat(msg))
        try:
            result = await self.handler(job)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await asyncio.shield(msg.nak())
            raise
        except PoisonJobError as e:
            await self._give_up(msg, job, f"rejected by worker {self.worker_id}: {e}")
            return
        except Exception as e:  # noqa: BLE001 - any handler failure is retried, then reported
            if msg.metadata.num_delivered >= self.settings.max_deliver:
                await self._give_up(msg, job, f"failed {msg.metadata.num_delivered} times, last: {e}")
            else:
                log.warning("job %s (request %s): attempt %d failed (%s); retrying",
                            job.job_id, job.request_id, msg.metadata.num_delivered, e)
                await msg.nak(delay=self.nak_delay_s)
            return
        finally:
            heartbeat.cancel()
        await self._deliver(job, msgspec.json.encode(result))
        await msg.ack()
        self.jobs_done += 1

    async def _give_up(self, msg: Msg, job: PrefillJob, reason: str) -> None:
        log.error("job %s (request %s): %s", job.job_id, job.request_id, reason)
        failure = PrefillResult(job_id=job.job_id, worker_id=self.worker_id, error=reason)
        await self._deliver(job, msgspec.json.encode(failure))
        await msg.term()
        self.jobs_failed += 1

    async def _deliver(self, job: PrefillJob, payload: bytes) -> None:
        """Send a result until the submitter confirms it, for at most `_RESULT_RETRY_S`.

        Results travel on core NATS, which keeps nothing: one sent while the submitter's
        client is reconnecting (a NATS restart) would be lost, so the submitter answers each
        and an unanswered one is sent again (a duplicate finds no waiter and is dropped). A
        submitter gone for good (its frontend died) holds the worker no longer than that.
        """
        give_up = min(job.deadline, time.time() + _RESULT_RETRY_S)
        while True:
            try:
                await self.nc.request(job.reply_subject, payload, timeout=_RESULT_ACK_S)
                return
            except (NoRespondersError, NatsTimeoutError, NatsError, TimeoutError) as e:
                if time.time() > give_up:
                    log.warning("job %s (request %s): its submitter did not confirm the result (%s); dropped",
                                job.job_id, job.request_id, type(e).__name__)
                    return
                await asyncio.sleep(0.2)

    async def _heartbeat(self, msg: Msg) -> None:
        interval = max(self.settings.ack_wait_s / 3, 0.2)
        while True:
            await asyncio.sleep(interval)
            await msg.in_progress()
