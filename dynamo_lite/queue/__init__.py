"""The global prefill queue on a NATS JetStream work-queue stream."""

from dynamo_lite.queue.connection import connect_nats
from dynamo_lite.queue.consumer import (
    Handler,
    PoisonJobError,
    PrefillConsumer,
    RetryableJobError,
)
from dynamo_lite.queue.stream import QueueDepth, QueueSettings, queue_depth
from dynamo_lite.queue.submitter import PrefillError, PrefillSubmitter, PrefillTimeout

__all__ = [
    "Handler",
    "PoisonJobError",
    "PrefillConsumer",
    "PrefillError",
    "PrefillSubmitter",
    "PrefillTimeout",
    "QueueDepth",
    "QueueSettings",
    "RetryableJobError",
    "connect_nats",
    "queue_depth",
]
