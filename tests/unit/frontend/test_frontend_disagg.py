"""The disaggregation decision, on its own."""

from __future__ import annotations

import pytest

from dynamo_lite.frontend.disagg import DisaggPolicy, Reason, decide
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
        (Role.AGGREGATED, 2, 5000, 0, Reason.AGGREGATED_WORKER),
    ],
)
def test_decide(role: Role, prefill_workers: int, uncached: int, pending: int, reason: Reason) -> None:
    assert decide(role, prefill_workers, uncached, pending, POLICY) is reason


def test_zero_queue_bound_never_prefills_remotely() -> None:
    assert decide(Role.DECODE, 1, 10_000, 0, DisaggPolicy(0, 0)) is Reason.QUEUE_FULL
