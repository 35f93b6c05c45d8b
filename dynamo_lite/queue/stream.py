"""The JetStream layout of the global prefill queue.

One work-queue stream per namespace (`<ns>_prefill`, subjects `<ns>.prefill.>`,
file storage) and one durable pull consumer per model, shared by every prefill
worker of that model: each job goes to exactly one worker, and a job not acked
within `ack_wait` is redelivered to another, up to `max_deliver` times.
"""

from __future__ import annotations

from dataclasses import dataclass

from nats.js import JetStreamContext, api
from nats.js.errors import NotFoundError

from dynamo_lite.protocol import prefill_subject, subject_token


@dataclass(frozen=True)
class QueueSettings:
    ack_wait_s: float = 10.0
    """A job whose worker neither acks nor heartbeats for this long is redelivered."""
    max_deliver: int = 4
    """Deliveries of one job before it is given up (the last worker reports the failure)."""
    duplicate_window_s: float = 120.0
    """A job re-published with the same id within this window is stored once."""
    depth_poll_s: float = 0.25
    """The submitter reads each model's queue depth this often in the background; a decision uses the
    last reading when it is at most 4 polls old (else it asks JetStream itself)."""


@dataclass(frozen=True)
class QueueDepth:
    pending: int  # jobs not yet handed to any worker
    in_flight: int  # jobs handed out and not yet acked

    @property
    def total(self) -> int:
        return self.pending + self.in_flight


def stream_name(namespace: str) -> str:
    return f"{subject_token(namespace)}_prefill"


def consumer_name(model: str) -> str:
    return f"prefill_{subject_token(model)}"


async def ensure_stream(js: JetStreamContext, namespace: str, settings: QueueSettings) -> None:
    """Create the namespace's prefill stream if it does not exist (idempotent)."""
    config = api.StreamConfig(
        name=stream_name(namespace),
        subjects=[f"{namespace}.prefill.>"],
        retention=api.RetentionPolicy.WORK_QUEUE,
        storage=api.StorageType.FILE,
        duplicate_window=settings.duplicate_window_s,
    )
    try:
        await js.stream_info(config.name)
    except NotFoundError:
        await js.add_stream(config)


def consumer_config(model: str, namespace: str, settings: QueueSettings) -> api.ConsumerConfig:
    return api.ConsumerConfig(
        durable_name=consumer_name(model),
        filter_subject=prefill_subject(namespace, model),
        ack_policy=api.AckPolicy.EXPLICIT,
        ack_wait=settings.ack_wait_s,
        max_deliver=settings.max_deliver,
        deliver_policy=api.DeliverPolicy.ALL,
    )


async def queue_depth(js: JetStreamContext, namespace: str, model: str) -> QueueDepth:
    """Jobs waiting and in flight for one model (what the planner and the frontend read)."""
    try:
        info = await js.consumer_info(stream_name(namespace), consumer_name(model))
    except NotFoundError:
        # No prefill worker has attached yet: every job of the model is still pending.
        stream = await js.stream_info(stream_name(namespace), subjects_filter=prefill_subject(namespace, model))
        return QueueDepth(pending=stream.state.messages, in_flight=0)
    return QueueDepth(pending=info.num_pending or 0, in_flight=info.num_ack_pending or 0)
