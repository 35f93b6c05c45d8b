"""The per-request disaggregation decision: prefill on a prefill worker, or locally on the decode worker.

Pure. Remote prefill pays a queue hop and a KV transfer; it wins only when the
prompt part the chosen decode worker still has to compute is long (short prompts
and follow-up turns whose prefix is cached there stay local) and the prefill
queue is not backed up.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from dynamo_lite.protocol import Role


class Reason(enum.StrEnum):
    """Why prefill ran where it did; a label of `dynamo_lite_frontend_disaggregation_decisions_total`."""

    REMOTE = "remote"  # long uncached prompt, queue not backed up: a prefill worker computes it
    SHORT_PROMPT = "short_prompt"  # uncached part <= max_local_prefill_tokens: local
    QUEUE_FULL = "queue_full"  # prefill queue holds >= max_prefill_queue jobs: local
    NO_PREFILL_WORKERS = "no_prefill_workers"  # the model has no prefill workers: local
    AGGREGATED_WORKER = "aggregated_worker"  # routed to an aggregated worker: it does both
    PREFILL_FAILED = "prefill_failed"  # the remote prefill failed or timed out: fell back to local


@dataclass(frozen=True)
class DisaggPolicy:
    max_local_prefill_tokens: int
    max_prefill_queue: int


def decide_before_queue(worker_role: Role, prefill_workers: int, uncached_tokens: int,
                        policy: DisaggPolicy) -> Reason | None:
    """The decision where it needs no queue depth; None: remote, if the queue allows (`decide_on_queue`)."""
    if worker_role == Role.AGGREGATED:
        return Reason.AGGREGATED_WORKER
    if prefill_workers == 0:
        return Reason.NO_PREFILL_WORKERS
    if uncached_tokens <= policy.max_local_prefill_tokens:
        return Reason.SHORT_PROMPT
    return None


def decide_on_queue(queue_pending: int, policy: DisaggPolicy) -> Reason:
    """Remote unless `queue_pending` jobs already wait (not yet picked up) at or over the bound."""
    return Reason.QUEUE_FULL if queue_pending >= policy.max_prefill_queue else Reason.REMOTE


def decide(worker_role: Role, prefill_workers: int, uncached_tokens: int, queue_pending: int,
           policy: DisaggPolicy) -> Reason:
    """Both steps at once (for callers that already know the queue depth)."""
    early = decide_before_queue(worker_role, prefill_workers, uncached_tokens, policy)
    return early if early is not None else decide_on_queue(queue_pending, policy)
