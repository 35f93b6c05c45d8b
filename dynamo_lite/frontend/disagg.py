"""The per-request disaggregation decision: prefill on a prefill worker, or locally on the decode worker.

Pure. Remote prefill pays a queue hop and a KV transfer. Two rules decide
(`frontend.disaggregation.decision`):

- `threshold`: remote when the prompt part the chosen decode worker still has to
  compute is longer than `max_local_prefill_tokens` and the prefill queue is not
  backed up (short prompts and follow-up turns whose prefix is cached stay local).
- `predicted`: remote when the predicted time to the first token through the queue
  (`remote_ttft_s`: wait for the work ahead + this prompt's prefill + what the
  frontend measured of the hop and of the KV transfer) is below the decode
  worker's predicted local TTFT (the router's, ttft mode). Without a local
  prediction, or before the frontend has timed a remote prefill, it is `threshold`.
  A decode-side guard (`stalls_decodes`) keeps a prefill off a decode worker that is
  streaming other requests when it would hold them up for longer than the ITL target.

In both, a queue holding `max_prefill_queue` jobs or more keeps prefill local.
With no prefill workers, the threshold rule still labels the decision: a short
prompt is `short_prompt`, a long one `no_prefill_workers` (what a prefill
worker would have taken; the planner counts those when it weighs a prefill pool).

`place_before_queue` and, when the answer needs the queue's depth, `place_on_queue` apply the
rules to the `Readings` of the routed worker and return a `Placement`. The frontend's
`PrefillPlacer` takes these two steps, and so does the planner simulation.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Literal

from dynamo_lite.protocol import Role

DecisionRule = Literal["threshold", "predicted"]


class Reason(enum.StrEnum):
    """Why prefill ran where it did; a label of `dynamo_lite_frontend_disaggregation_decisions_total`."""

    REMOTE = "remote"  # a prefill worker computes it (long prompt, or predicted sooner through the queue)
    SHORT_PROMPT = "short_prompt"  # threshold: uncached part <= max_local_prefill_tokens: local
    PREDICTED_LOCAL = "predicted_local"  # predicted: the decode worker reaches the first token sooner itself
    QUEUE_FULL = "queue_full"  # prefill queue holds >= max_prefill_queue jobs: local
    NO_PREFILL_WORKERS = "no_prefill_workers"  # long enough to go remote, but the model has no prefill workers
    AGGREGATED_WORKER = "aggregated_worker"  # routed to an aggregated worker: it does both
    PREFILL_FAILED = "prefill_failed"  # the remote prefill failed or timed out: fell back to local


@dataclass(frozen=True)
class DisaggPolicy:
    max_local_prefill_tokens: int
    max_prefill_queue: int
    rule: DecisionRule = "threshold"


class RemoteTimings:
    """What the frontend measured of its remote prefills, per model: running means (EWMA).

    - `job_s`: the predicted prefill seconds of the jobs it submitted (a job ahead in the queue costs this);
    - `overhead_s`: submit-to-result time beyond the predicted queue wait and prefill (the queue hop, the
      result's way back, and the error of both predictions);
    - `first_token_s`: sending a remotely prefilled request to the decode worker until its first token
      (the KV transfer plus one decode step).
    `ready` once a remote prefill was timed to its first token; before that the prediction has no
    transfer term and the decision is the threshold rule's.
    """

    def __init__(self, weight: float = 0.2) -> None:
        self.weight = weight
        self.job_s: float | None = None
        self.overhead_s: float | None = None
        self.first_token_s: float | None = None

    @property
    def ready(self) -> bool:
        return self.overhead_s is not None and self.first_token_s is not None

    def submitted(self, prefill_s: float) -> None:
        self.job_s = self._mean(self.job_s, prefill_s)

    def prefilled(self, measured_s: float, predicted_wait_s: float, prefill_s: float) -> None:
        """A remote prefill took `measured_s` from submit to result; it was predicted wait + prefill."""
        self.overhead_s = self._mean(self.overhead_s, max(0.0, measured_s - predicted_wait_s - prefill_s))

    def first_token(self, seconds: float) -> None:
        self.first_token_s = self._mean(self.first_token_s, seconds)

    def _mean(self, old: float | None, new: float) -> float:
        return new if old is None else old + self.weight * (new - old)


def queue_wait_s(pending: int, in_flight: int, prefill_workers: int, job_s: float) -> float:
    """Predicted wait before a prefill worker takes a new job: the jobs not yet taken plus half of those
    being computed (their mean remainder), each `job_s`, shared by the prefill workers."""
    if prefill_workers <= 0:
        return float("inf")
    return (pending + 0.5 * in_flight) * job_s / prefill_workers


def remote_ttft_s(wait_s: float, prefill_s: float, timings: RemoteTimings) -> float:
    """Predicted seconds from submitting the prefill job to the first token on the decode worker."""
    assert timings.overhead_s is not None and timings.first_token_s is not None, "only when timings.ready"
    return wait_s + prefill_s + timings.overhead_s + timings.first_token_s


def stalls_decodes(streaming: int, local_prefill_s: float | None, itl_target_s: float) -> bool:
    """The predicted rule's decode-side guard: prefilling here would hold up the `streaming` requests (past
    their first token) on the decode worker for longer than the ITL target.

    `local_prefill_s` is what this prompt's prefill compute there adds to the engine steps that carry it
    (`TtftModel.prefill_seconds` without its fixed term, which every first token costs whatever its prompt,
    nor the queue ahead): the streams in those steps are held up that much in all. With the guard up, the
    prefill goes remote however much sooner its own first token would come locally; only a full queue
    keeps it.
    """
    return streaming > 0 and itl_target_s > 0 and local_prefill_s is not None and local_prefill_s > itl_target_s


def decide_before_queue(worker_role: Role, prefill_workers: int, uncached_tokens: int,
                        policy: DisaggPolicy, local_ttft_s: float | None = None,
                        remote_floor_s: float | None = None, guard: bool = False) -> Reason | None:  # fmt: skip
    """The decision where it needs no queue depth; None: remote, if the queue allows (`decide_on_queue`).

    `local_ttft_s` is the decode worker's predicted TTFT, `remote_floor_s` the remote path's with an empty
    queue (`remote_ttft_s(0, ...)`); with both, the predicted rule applies, and a remote path that loses even
    with an empty queue needs no depth read. `guard` (`stalls_decodes`) rules the local path out.
    """
    if worker_role == Role.AGGREGATED:
        return Reason.AGGREGATED_WORKER
    if prefill_workers == 0:  # what a prefill worker would have taken: the planner sizes a pool from zero on it
        return Reason.SHORT_PROMPT if uncached_tokens <= policy.max_local_prefill_tokens else Reason.NO_PREFILL_WORKERS
    if policy.rule == "predicted" and local_ttft_s is not None and remote_floor_s is not None:
        return Reason.PREDICTED_LOCAL if remote_floor_s >= local_ttft_s and not guard else None
    if uncached_tokens <= policy.max_local_prefill_tokens:
        return Reason.SHORT_PROMPT
    return None


def decide_on_queue(queue_pending: int, policy: DisaggPolicy, local_ttft_s: float | None = None,
                    remote_s: float | None = None, guard: bool = False) -> Reason:  # fmt: skip
    """Remote unless `queue_pending` jobs already wait (not yet picked up) at or over the bound, or (predicted
    rule, both given, no `guard`) the remote path's predicted TTFT `remote_s` is not below `local_ttft_s`."""
    if queue_pending >= policy.max_prefill_queue:
        return Reason.QUEUE_FULL
    if policy.rule != "predicted" or guard or local_ttft_s is None or remote_s is None:
        return Reason.REMOTE
    return Reason.PREDICTED_LOCAL if remote_s >= local_ttft_s else Reason.REMOTE


@dataclass(frozen=True)
class Readings:
    """What the placement reads of the routed worker before the prefill queue's depth (the router's figures)."""

    role: Role
    prefill_workers: int
    uncached_tokens: int  # of the prompt, on that worker
    local_ttft_s: float | None = None  # the router's predicted TTFT there (ttft routing)
    comparable: bool = True  # False: that prediction counted blocks still on their way as cached: not compared
    prefill_s: float | None = None  # this prompt's predicted prefill on a prefill worker
    stall_s: float | None = None  # what its prefill there adds to the steps of the streams (`stalls_decodes`)
    streaming: int = 0  # requests past their first token there
    itl_target_s: float = 0.0


@dataclass(frozen=True)
class Placement:
    reason: Reason
    predicted_ttft_s: float | None  # of the path taken: the router's local one, or the remote one when known
    prefill_s: float | None = None  # remote: this prompt's predicted prefill on a prefill worker
    wait_s: float = 0.0  # remote: the predicted queue wait when the depth was read
    guarded: bool = False  # remote only because the decode guard ruled the decode worker out


def place_before_queue(r: Readings, policy: DisaggPolicy, timings: RemoteTimings) -> Placement | None:
    """Where prefill runs when that needs no queue depth; None: read the depth and `place_on_queue`."""
    compare, floor, guard = _predicted_terms(r, policy, timings)
    reason = decide_before_queue(r.role, r.prefill_workers, r.uncached_tokens, policy, compare, floor, guard)
    return None if reason is None else Placement(reason, r.local_ttft_s)


def place_on_queue(r: Readings, policy: DisaggPolicy, timings: RemoteTimings, pending: int,
                   in_flight: int) -> Placement:  # fmt: skip
    """Where prefill runs, with `pending` jobs waiting in the prefill queue and `in_flight` being computed."""
    compare, floor, guard = _predicted_terms(r, policy, timings)
    wait = remote = None
    if r.prefill_s is not None:
        wait = queue_wait_s(pending, in_flight, r.prefill_workers, timings.job_s or r.prefill_s)
        remote = wait + floor if floor is not None else None
    reason = decide_on_queue(pending, policy, compare, remote, guard)
    if reason is not Reason.REMOTE:
        return Placement(reason, r.local_ttft_s)
    guarded = guard and decide_on_queue(pending, policy, compare, remote) is Reason.PREDICTED_LOCAL
    return Placement(reason, remote if remote is not None else r.local_ttft_s, r.prefill_s, wait or 0.0, guarded)


def _predicted_terms(r: Readings, policy: DisaggPolicy,
                     timings: RemoteTimings) -> tuple[float | None, float | None, bool]:  # fmt: skip
    """The predicted rule's local side, the remote path's TTFT through an empty queue, and the decode guard."""
    compare = r.local_ttft_s if r.comparable else None
    floor = remote_ttft_s(0.0, r.prefill_s, timings) if r.prefill_s is not None and timings.ready else None
    guard = policy.rule == "predicted" and compare is not None and stalls_decodes(r.streaming, r.stall_s,
                                                                                   r.itl_target_s)  # fmt: skip
    return compare, floor, guard


def decide(worker_role: Role, prefill_workers: int, uncached_tokens: int, queue_pending: int,
           policy: DisaggPolicy) -> Reason:
    """The threshold rule's both steps at once (for callers that already know the queue depth)."""
    early = decide_before_queue(worker_role, prefill_workers, uncached_tokens, policy)
    return early if early is not None else decide_on_queue(queue_pending, policy)
