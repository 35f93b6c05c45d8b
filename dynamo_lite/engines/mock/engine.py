"""The async shell around the pure scheduler: the step loop, per-request
token streams, metrics and KV-event publishing.

One task (`MockEngine.start()` creates it, `stop()` cancels and awaits it)
runs passes back to back while there is work: plan a pass, advance the
simulated clock by its duration (pacing against the wall clock), apply it, hand
each sampled token to its request's queue, publish the pass's KV events. Idle,
it waits for a request or for the next KV transfer to land.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from dynamo_lite.engines.mock.clock import SimClock
from dynamo_lite.engines.mock.kv_publisher import KvPublisher
from dynamo_lite.engines.mock.metrics import EngineMetrics
from dynamo_lite.engines.mock.scheduler import Scheduler, StepPlan
from dynamo_lite.engines.mock.sequence import FinishReason, Sequence
from dynamo_lite.engines.mock.timing import TimingModel
from dynamo_lite.tasks import cancel_and_wait

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TokenEvent:
    """One sampled token of a request; the last one carries its finish reason."""

    token_id: int | None  # None when the request ends without a token (abort)
    finish_reason: FinishReason | None


class RequestStream:
    """What a request handler holds: the sequence and its queue of tokens."""

    def __init__(self, seq: Sequence, external_id: str) -> None:
        self.seq = seq
        self.external_id = external_id
        self.queue: asyncio.Queue[TokenEvent] = asyncio.Queue()

    async def batches(self) -> AsyncIterator[list[TokenEvent]]:
        """Tokens as they come, grouped when several are ready; ends after the last."""
        while True:
            events = [await self.queue.get()]
            while not self.queue.empty():
                events.append(self.queue.get_nowait())
            yield events
            if events[-1].finish_reason is not None:
                return


class MockEngine:
    def __init__(
        self,
        scheduler: Scheduler,
        timing: TimingModel,
        metrics: EngineMetrics,
        publisher: KvPublisher,
        clock: SimClock,
        external_connector: bool = False,
    ) -> None:
        self.scheduler = scheduler
        self.timing = timing
        self.metrics = metrics
        self.publisher = publisher
        self.clock = clock
        self._external_connector = external_connector
        self._streams: dict[str, RequestStream] = {}
        self._ids = itertools.count()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # --- lifecycle ---------------------------------------------------------------
    async def start(self) -> None:
        if self._task is None:
            await self.publisher.start()
            self._task = asyncio.create_task(self._run(), name="mock-engine-loop")

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None
        for internal_id in list(self._streams):
            self.abort(internal_id)
        await self.publisher.stop()

    # --- requests ------------------------------------------------------------------
    def internal_id(self, external_id: str) -> str:
        """Unique per engine even when clients reuse ids (as P and D share X-Request-Id)."""
        return f"{external_id}-{next(self._ids)}"

    def submit(self, seq: Sequence, external_id: str) -> RequestStream:
        stream = RequestStream(seq, external_id)
        seq.arrival = self.clock.arrival()
        self.scheduler.add(seq)
        self._streams[seq.request_id] = stream
        self._wake.set()
        return stream

    def abort(self, internal_id: str, reason: FinishReason = FinishReason.ABORT) -> None:
        """End a request now: the client went away (ABORT), or its text hit a stop string (STOP)."""
        stream = self._streams.pop(internal_id, None)
        seq = self.scheduler.abort(internal_id, reason)
        if stream is not None:
            stream.queue.put_nowait(TokenEvent(None, reason))
        if seq is not None:
            self.metrics.finished(seq, self.clock.now())
            log.debug("request %s aborted", internal_id)
        self._wake.set()

    def abort_external(self, external_ids: list[str] | None) -> int:
        """Abort by client-visible id; None aborts everything. Returns how many."""
        targets = [i for i, s in self._streams.items() if external_ids is None or s.external_id in external_ids]
        for internal_id in targets:
            self.abort(internal_id)
        return len(targets)

    def reset_prefix_cache(self) -> bool:
        done = self.scheduler.pool.reset_prefix_cache()
        self._publish_events()
        return done

    # --- the loop --------------------------------------------------------------------
    async def _run(self) -> None:
        clock = self.clock
        while True:
            if not self.scheduler.has_work():
                await self._idle_until(None)
                continue
            if clock.idle:
                clock.wake()
            plan = self.scheduler.schedule(clock.loop_time)
            self._account(plan)
            if plan.empty:  # only KV transfers in flight (or nothing fits)
                self._publish_events()
                await self._idle_until(self.scheduler.next_kv_ready_at())
                continue
            seconds = self.timing.step_seconds(plan.load)
            clock.advance(seconds)
            self.metrics.busy.inc(seconds)
            await clock.pace()
            self._apply(plan, clock.loop_time)

    async def _idle_until(self, sim_time: float | None) -> None:
        """Wait for new work, or until `sim_time` (a KV transfer landing)."""
        clock = self.clock
        clock.idle = True
        self._wake.clear()
        timeout = None if sim_time is None else max(0.0, (sim_time - clock.wall()) / clock.speedup)
        try:
            await asyncio.wait_for(self._wake.wait(), timeout)
        except TimeoutError:
            clock.wake(at_least=sim_time)
            return
        clock.wake()

    def _account(self, plan: StepPlan) -> None:
        for seq in plan.admitted:
            self.metrics.admitted(seq, self._external_connector)
        for seq in plan.kv_received:
            self.metrics.kv_received(
                self.scheduler.transfer_seconds(seq.num_external),
                seq.num_external * self.scheduler.config.kv_bytes_per_token,
            )

    def _apply(self, plan: StepPlan, now: float) -> None:
        outputs = self.scheduler.finish_step(plan, now)
        self.metrics.step(plan.load, plan.num_preempted, self.clock.lag())
        for out in outputs:
            self.metrics.token(out.seq, now, out.prev_token_at)
            stream = self._streams.get(out.seq.request_id)
            if out.finish_reason is not None:
                self.metrics.finished(out.seq, now)
                self._streams.pop(out.seq.request_id, None)
            if stream is not None:
                stream.queue.put_nowait(TokenEvent(out.token_id, out.finish_reason))
        self._publish_events()

    def _publish_events(self) -> None:
        self.publisher.publish(time.time(), self.scheduler.pool.take_events())
        sched = self.scheduler
        self.metrics.scheduler_state(sched.num_running, sched.num_waiting, sched.pool.usage)

