"""The disaggregation decision, on its own."""

from __future__ import annotations

import dataclasses

import pytest

from dynamo_lite.frontend.disagg import (
    DisaggPolicy,
    Placement,
    Readings,
    Reason,
    RemoteTimings,
    decide,
    decide_before_queue,
    decide_on_queue,
    place_before_queue,
    place_on_queue,
    queue_wait_s,
    remote_ttft_s,
    stalls_decodes,
)
from dynamo_lite.protocol import Role

POLICY = DisaggPolicy(max_local_prefill_tokens=512, max_prefill_queue=4)


@pytest.mark.parametrize(
    ("role", "prefill_workers", "uncached", "pending", "reason"),
    [
        (Role.DECODE, 2, 513, 0, Reason.REMOTE),
        (Role.DECODE, 2, 512, 0, Reason.SHORT_PROMPT),  # at the threshold: local
        (Role.DECODE, 2, 0, 0, Reason.SHORT_PROMPT),  # whole prefix cached on the decode worker
        (Role.DECODE, 2, 5000, 3, Reason.REMOTE),
        (Role.DECODE, 2, 5000, 4, Reason.QUEUE_FULL),
        (Role.DECODE, 0, 5000, 0, Reason.NO_PREFILL_WORKERS),
        (Role.DECODE, 0, 512, 0, Reason.SHORT_PROMPT),  # no prefill workers: still labelled by the threshold
        (Role.AGGREGATED, 2, 5000, 0, Reason.AGGREGATED_WORKER),
    ],
)
def test_decide(role: Role, prefill_workers: int, uncached: int, pending: int, reason: Reason) -> None:
    assert decide(role, prefill_workers, uncached, pending, POLICY) is reason


def test_zero_queue_bound_never_prefills_remotely() -> None:
    assert decide(Role.DECODE, 1, 10_000, 0, DisaggPolicy(0, 0)) is Reason.QUEUE_FULL


# --- the predicted rule: known answers ---------------------------------------------------------
PREDICTED = DisaggPolicy(max_local_prefill_tokens=512, max_prefill_queue=8, rule="predicted")


def ready_timings(overhead_s: float, first_token_s: float, job_s: float) -> RemoteTimings:
    t = RemoteTimings()
    t.submitted(job_s)
    t.prefilled(overhead_s + 1.0, 0.0, 1.0)  # measured 1 s more than the predicted 1 s of prefill
    t.first_token(first_token_s)
    return t


def test_queue_wait_counts_pending_jobs_and_half_of_those_running() -> None:
    assert queue_wait_s(pending=3, in_flight=0, prefill_workers=1, job_s=0.5) == 1.5
    assert queue_wait_s(pending=3, in_flight=2, prefill_workers=2, job_s=0.5) == 1.0  # (3 + 1) * 0.5 / 2
    assert queue_wait_s(pending=0, in_flight=0, prefill_workers=4, job_s=9.0) == 0.0
    assert queue_wait_s(pending=1, in_flight=0, prefill_workers=0, job_s=0.1) == float("inf")


def test_remote_ttft_adds_wait_prefill_overhead_and_transfer() -> None:
    t = ready_timings(overhead_s=0.05, first_token_s=0.1, job_s=0.5)
    assert t.overhead_s == pytest.approx(0.05) and t.first_token_s == 0.1 and t.job_s == 0.5
    assert remote_ttft_s(1.5, 0.4, t) == pytest.approx(2.05)


@pytest.mark.parametrize(
    ("pending", "workers", "reason"),
    [
        (3, 1, Reason.PREDICTED_LOCAL),  # 1.5 s wait + 0.4 + 0.05 + 0.1 = 2.05 s > 2.0 s local
        (3, 2, Reason.REMOTE),  # 0.75 s wait: 1.30 s < 2.0 s
        (0, 1, Reason.REMOTE),  # 0.55 s < 2.0 s
        (8, 8, Reason.QUEUE_FULL),  # the bound holds whatever the prediction says
    ],
)
def test_predicted_rule(pending: int, workers: int, reason: Reason) -> None:
    t = ready_timings(overhead_s=0.05, first_token_s=0.1, job_s=0.5)
    local, prefill = 2.0, 0.4
    floor = remote_ttft_s(0.0, prefill, t)
    assert decide_before_queue(Role.DECODE, workers, 5000, PREDICTED, local, floor) is None
    remote = floor + queue_wait_s(pending, 0, workers, t.job_s or prefill)
    assert decide_on_queue(pending, PREDICTED, local, remote) is reason


def test_predicted_rule_decides_without_the_queue_when_even_an_empty_one_loses() -> None:
    # A short prompt whose local TTFT (0.1 s) beats the remote path's fixed costs (0.02 + 0.05 + 0.1 s).
    t = ready_timings(overhead_s=0.05, first_token_s=0.1, job_s=0.5)
    floor = remote_ttft_s(0.0, 0.02, t)
    assert decide_before_queue(Role.DECODE, 2, 100, PREDICTED, 0.1, floor) is Reason.PREDICTED_LOCAL
    # a long prompt under the threshold still goes remote when that is predicted sooner
    assert decide_before_queue(Role.DECODE, 2, 100, PREDICTED, 5.0, floor) is None


def test_predicted_rule_falls_back_to_the_threshold_without_a_prediction() -> None:
    assert decide_before_queue(Role.DECODE, 2, 100, PREDICTED, None, 0.3) is Reason.SHORT_PROMPT
    assert decide_before_queue(Role.DECODE, 2, 100, PREDICTED, 0.5, None) is Reason.SHORT_PROMPT  # no timings
    assert decide_before_queue(Role.DECODE, 2, 600, PREDICTED, None, None) is None
    assert decide_on_queue(3, PREDICTED, None, 9.0) is Reason.REMOTE
    assert decide_before_queue(Role.AGGREGATED, 2, 600, PREDICTED, 9.0, 0.1) is Reason.AGGREGATED_WORKER
    assert decide_before_queue(Role.DECODE, 0, 600, PREDICTED, 9.0, 0.1) is Reason.NO_PREFILL_WORKERS


@pytest.mark.parametrize(
    ("streaming", "local_prefill_s", "itl_target_s", "stalls"),
    [
        (2, 0.3, 0.05, True),  # two streams would wait 300 ms for one token
        (0, 0.3, 0.05, False),  # nothing streams there: only this request waits
        (2, 0.04, 0.05, False),  # the prefill fits in one ITL
        (2, 0.05, 0.05, False),  # at the target: within it
        (2, 0.3, 0.0, False),  # no ITL target (the ITL guard off)
        (2, None, 0.05, False),  # no prediction (router mode other than ttft)
    ],
)
def test_stalls_decodes(streaming: int, local_prefill_s: float | None, itl_target_s: float, stalls: bool) -> None:
    assert stalls_decodes(streaming, local_prefill_s, itl_target_s) is stalls


def test_the_decode_guard_sends_remote_what_the_prediction_would_keep_local() -> None:
    t = ready_timings(overhead_s=0.05, first_token_s=0.1, job_s=0.5)
    floor = remote_ttft_s(0.0, 0.02, t)  # 0.17 s: an empty queue loses to the 0.1 s local TTFT
    assert decide_before_queue(Role.DECODE, 2, 100, PREDICTED, 0.1, floor) is Reason.PREDICTED_LOCAL
    assert decide_before_queue(Role.DECODE, 2, 100, PREDICTED, 0.1, floor, guard=True) is None
    assert decide_on_queue(3, PREDICTED, 0.1, floor + 1.5, guard=True) is Reason.REMOTE
    assert decide_on_queue(8, PREDICTED, 0.1, floor + 4.0, guard=True) is Reason.QUEUE_FULL  # the bound still holds
    assert decide_on_queue(3, PREDICTED, 0.1, floor + 1.5) is Reason.PREDICTED_LOCAL  # without it: local


def test_the_threshold_rule_ignores_predictions() -> None:
    assert decide_before_queue(Role.DECODE, 2, 100, POLICY, 9.0, 0.1) is Reason.SHORT_PROMPT
    assert decide_on_queue(0, POLICY, 0.1, 9.0) is Reason.REMOTE


# --- the two placement steps that the frontend and the simulation both take -------------------------
def test_placement_by_the_predicted_rule_through_the_queue() -> None:
    t = ready_timings(overhead_s=0.05, first_token_s=0.1, job_s=0.5)
    r = Readings(Role.DECODE, 2, 5000, local_ttft_s=2.0, prefill_s=0.4, stall_s=0.01, streaming=3, itl_target_s=0.05)
    assert place_before_queue(r, PREDICTED, t) is None  # an empty queue would win: the depth decides
    # 3 pending + half of 2 in flight, 0.5 s each (the jobs' mean, not this prompt's 0.4 s), over 2 workers: 1.0 s
    assert place_on_queue(r, PREDICTED, t, pending=3, in_flight=2) == Placement(
        Reason.REMOTE, pytest.approx(1.55), prefill_s=0.4, wait_s=1.0)  # 1.0 + 0.4 + 0.05 + 0.1
    assert place_on_queue(r, PREDICTED, t, pending=7, in_flight=0) == Placement(Reason.PREDICTED_LOCAL, 2.0)
    assert place_on_queue(r, PREDICTED, t, pending=8, in_flight=0) == Placement(Reason.QUEUE_FULL, 2.0)


def test_placement_counts_what_only_the_decode_guard_sent_away() -> None:
    t = ready_timings(overhead_s=0.05, first_token_s=0.1, job_s=0.5)
    r = Readings(Role.DECODE, 1, 3000, local_ttft_s=0.6, prefill_s=0.25, stall_s=0.2, streaming=2, itl_target_s=0.05)
    assert place_before_queue(r, PREDICTED, t) is None
    guarded = place_on_queue(r, PREDICTED, t, pending=1, in_flight=0)  # 0.5 + 0.25 + 0.15 = 0.9 s > 0.6 s local
    assert guarded.reason is Reason.REMOTE and guarded.guarded and guarded.wait_s == 0.5
    # remote sooner anyway (0.4 s): not counted as the guard's
    assert not place_on_queue(r, PREDICTED, t, pending=0, in_flight=0).guarded
    # the guard up: a remote path that loses even through an empty queue (0.4 s > 0.3 s) is not ruled out early
    assert place_before_queue(dataclasses.replace(r, local_ttft_s=0.3), PREDICTED, t) is None
    # no stream to hold up: the prediction keeps it local
    assert place_on_queue(dataclasses.replace(r, streaming=0), PREDICTED, t, 1, 0).reason is Reason.PREDICTED_LOCAL


def test_placement_by_the_threshold_rule_when_the_prediction_is_not_comparable() -> None:
    t = ready_timings(overhead_s=0.05, first_token_s=0.1, job_s=0.5)
    # the router's local prediction counted blocks still on their way as cached: threshold rule, guard off
    r = Readings(Role.DECODE, 1, 3000, local_ttft_s=0.01, comparable=False, prefill_s=0.25, stall_s=0.2,
                 streaming=2, itl_target_s=0.05)
    assert place_before_queue(r, PREDICTED, t) is None
    placed = place_on_queue(r, PREDICTED, t, pending=1, in_flight=0)
    assert placed.reason is Reason.REMOTE and not placed.guarded
    assert place_before_queue(dataclasses.replace(r, uncached_tokens=100), PREDICTED, t) == Placement(
        Reason.SHORT_PROMPT, 0.01)
    # before any remote prefill was timed the remote path has no prediction: the placement carries the local one
    assert place_on_queue(dataclasses.replace(r, comparable=True), PREDICTED, RemoteTimings(), 0, 0) == Placement(
        Reason.REMOTE, 0.01, prefill_s=0.25)
    assert place_before_queue(Readings(Role.AGGREGATED, 1, 3000), PREDICTED, t) == Placement(
        Reason.AGGREGATED_WORKER, None)


def test_remote_timings_are_running_means_and_ready_once_a_transfer_was_timed() -> None:
    t = RemoteTimings(weight=0.5)
    assert not t.ready
    t.prefilled(measured_s=1.3, predicted_wait_s=0.2, prefill_s=1.0)
    assert t.overhead_s == pytest.approx(0.1) and not t.ready
    t.prefilled(measured_s=0.5, predicted_wait_s=0.2, prefill_s=1.0)  # faster than predicted: no negative hop
    assert t.overhead_s == pytest.approx(0.05)
    t.first_token(0.2)
    t.first_token(0.4)
    assert t.first_token_s == pytest.approx(0.3) and t.ready
