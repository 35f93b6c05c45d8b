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

import logging
import time
from dataclasses import dataclass

from dynamo_lite.frontend.disagg import (
    DisaggPolicy,
    Reason,
    RemoteTimings,
    decide_before_queue,
    decide_on_queue,
    queue_wait_s,
    remote_ttft_s,
    stalls_decodes,
)
from dynamo_lite.frontend.fleet import ModelFleet
from dynamo_lite.frontend.metrics import ModelMetrics
from dynamo_lite.frontend.request import GenerationRequest
from dynamo_lite.protocol import KvTransferParams, Role, WorkerRecord
from dynamo_lite.queue import PrefillError, PrefillSubmitter
from router import Decision

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Placement:
    reason: Reason
    predicted_ttft_s: float | None  # of the path taken: the router's local one, or the remote one when known
    prefill_s: float | None = None  # remote: this prompt's predicted prefill on a prefill worker
    wait_s: float = 0.0  # remote: the predicted queue wait when the depth was read
    guarded: bool = False  # remote only because the decode guard ruled the decode worker out


class PrefillPlacer:
    def __init__(self, submitter: PrefillSubmitter | None, policy: DisaggPolicy, timeout_s: float) -> None:
        self.submitter = submitter
        self.policy = policy
        self.timeout_s = timeout_s
        self.timings: dict[str, RemoteTimings] = {}  # per model

    async def place(self, req: GenerationRequest, mm: ModelMetrics, fleet: ModelFleet, worker: WorkerRecord,
                    decision: Decision, prompt: list[int]) -> Placement:  # fmt: skip
        policy = self.policy
        prefill_workers = fleet.count(Role.PREFILL) if self.submitter is not None else 0
        # Blocks that only a prompt just sent to this worker claims may still be in its prefill (or its KV still
        # on the way from a prefill worker): decide as if they were not there, and by the threshold rule, since
        # the local prediction counted them cached. Else a prompt that shares a prefix with one just sent would
        # prefill all of it on the decode worker.
        uncached = decision.confirmed_uncached_tokens
        local = decision.predicted_ttft_s
        compare = local if not decision.promised_tokens else None  # the predicted rule's local side
        prefill_s = floor = None
        guard = False
        timings = self._timings(req.model)
        if worker.role is not Role.AGGREGATED and prefill_workers:
            router = fleet.router
            # What the prefill worker computes is not indexed: the whole prompt (conservative).
            prefill_s = router.prefill_seconds(len(prompt))
            if prefill_s is not None and timings.ready:
                floor = remote_ttft_s(0.0, prefill_s, timings)
            if compare is not None and policy.rule == "predicted":
                guard = stalls_decodes(router.streaming(worker.worker_id),
                                       router.prefill_seconds(uncached, len(prompt) - uncached, fixed=False),
                                       router.config.itl_target_s)  # fmt: skip
        reason = decide_before_queue(worker.role, prefill_workers, uncached, policy, compare, floor, guard)
        if reason is not None:
            return Placement(reason, local)
        assert self.submitter is not None
        try:
            depth = await self.submitter.depth(req.model)
            pending, in_flight = depth.pending, depth.in_flight
            mm.queue_depth.set(pending)
        except Exception as e:  # noqa: BLE001 - no depth known: treat the queue as backed up
            log.warning("request %s: prefill queue depth unavailable (%s); prefilling locally", req.request_id, e)
            pending, in_flight = policy.max_prefill_queue, 0
        wait = remote = None
        if prefill_s is not None:
            wait = queue_wait_s(pending, in_flight, prefill_workers, timings.job_s or prefill_s)
            remote = wait + floor if floor is not None else None
        reason = decide_on_queue(pending, policy, compare, remote, guard)
        if reason is not Reason.REMOTE:
            return Placement(reason, local)
        guarded = guard and decide_on_queue(pending, policy, compare, remote) is Reason.PREDICTED_LOCAL
        return Placement(reason, remote if remote is not None else local, prefill_s, wait or 0.0, guarded)

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
