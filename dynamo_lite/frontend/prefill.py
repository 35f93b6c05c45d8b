"""Where one attempt's prefill runs, and running it on a prefill worker: the I/O around disagg.py's rules.

`PrefillPlacer.place` reads the prefill queue's depth when the decision needs it and returns a
`Placement`: why prefill runs where it does, and the predicted time to first token of that path
(what admission by prediction compares). `run` submits the job of a `REMOTE` placement and
returns the decode step's kv params (None and `PREFILL_FAILED` when the job fails: the decode
worker then prefills itself). The placer learns, per model, what remote prefills cost beyond
their compute (`RemoteTimings`) from the submit-to-result times and, via `first_token`, from
the first token of each remotely prefilled request.
"""

from __future__ import annotations

import dataclasses
import logging
import time

from dynamo_lite.frontend.disagg import (
    DisaggPolicy,
    Placement,
    Readings,
    Reason,
    RemoteTimings,
    place_before_queue,
    place_on_queue,
)
from dynamo_lite.frontend.fleet import ModelFleet
from dynamo_lite.frontend.metrics import ModelMetrics
from dynamo_lite.frontend.request import GenerationRequest
from dynamo_lite.protocol import KvTransferParams, Role, WorkerRecord
from dynamo_lite.queue import PrefillError, PrefillSubmitter
from router import Decision

log = logging.getLogger(__name__)


class PrefillPlacer:
    def __init__(self, submitter: PrefillSubmitter | None, policy: DisaggPolicy, timeout_s: float) -> None:
        self.submitter = submitter
        self.policy = policy
        self.timeout_s = timeout_s
        self.timings: dict[str, RemoteTimings] = {}  # per model

    async def place(self, req: GenerationRequest, mm: ModelMetrics, fleet: ModelFleet, worker: WorkerRecord,
                    decision: Decision, prompt: list[int]) -> Placement:  # fmt: skip
        prefill_workers = fleet.count(Role.PREFILL) if self.submitter is not None else 0
        # Blocks that only a prompt just sent to this worker claims may still be in its prefill (or its KV still
        # on the way from a prefill worker): decide as if they were not there, and by the threshold rule, since
        # the local prediction counted them cached. Else a prompt that shares a prefix with one just sent would
        # prefill all of it on the decode worker.
        uncached = decision.confirmed_uncached_tokens
        readings = Readings(worker.role, prefill_workers, uncached, decision.predicted_ttft_s,
                            comparable=not decision.promised_tokens)  # fmt: skip
        if worker.role is not Role.AGGREGATED and prefill_workers:
            router = fleet.router
            readings = dataclasses.replace(
                readings,
                prefill_s=router.prefill_seconds(len(prompt)),  # the prefill worker's: the whole prompt
                stall_s=router.prefill_seconds(uncached, len(prompt) - uncached, fixed=False),
                streaming=router.streaming(worker.worker_id), itl_target_s=router.config.itl_target_s)
        timings = self._timings(req.model)
        early = place_before_queue(readings, self.policy, timings)
        if early is not None:
            return early
        assert self.submitter is not None
        try:
            depth = await self.submitter.depth(req.model)
            pending, in_flight = depth.pending, depth.in_flight
            mm.queue_depth.set(pending)
        except Exception as e:  # noqa: BLE001 - no depth known: treat the queue as backed up
            log.warning("request %s: prefill queue depth unavailable (%s); prefilling locally", req.request_id, e)
            pending, in_flight = self.policy.max_prefill_queue, 0
        return place_on_queue(readings, self.policy, timings, pending, in_flight)

    async def run(self, req: GenerationRequest, mm: ModelMetrics, worker: WorkerRecord, placement: Placement,
                  prompt: list[int]) -> tuple[KvTransferParams | None, Reason]:  # fmt: skip
        """Prefill a `REMOTE` placement's prompt on a prefill worker."""
        assert self.submitter is not None and placement.reason is Reason.REMOTE
        timings = self._timings(req.model)
        if placement.prefill_s is not None:
            timings.submitted(placement.prefill_s)
        started = time.monotonic()
        try:
            done = await self.submitter.prefill(req.request_id, req.model, prompt, self.timeout_s)
        except PrefillError as e:
            log.warning("request %s: remote prefill failed (%s); prefilling on %s", req.request_id, e,
                        worker.worker_id)
            return None, Reason.PREFILL_FAILED
        took = time.monotonic() - started
        mm.queue_wait.observe(took)
        if placement.prefill_s is not None:
            timings.prefilled(took, placement.wait_s, placement.prefill_s)
        return done.kv_transfer_params, Reason.REMOTE

    def first_token(self, model: str, seconds: float) -> None:
        """A remotely prefilled request's first token came `seconds` after it was sent to the decode worker."""
        self._timings(model).first_token(seconds)

    def _timings(self, model: str) -> RemoteTimings:
        timings = self.timings.get(model)
        if timings is None:
            timings = self.timings[model] = RemoteTimings()
        return timings
