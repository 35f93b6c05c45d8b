"""Typed messages that cross process boundaries, in one place.

Everything that travels over etcd, NATS or ZMQ between dynamo_lite components is
one of the `msgspec.Struct`s below, encoded as JSON (etcd, NATS) or msgpack (the
engines' KV events, which are vLLM's own format). Ids are `NewType`s so that a
worker id cannot be passed where a request id is expected. The ids, KV event and
load structs are the router's own (router/types.py), re-exported here.
"""

from __future__ import annotations

import enum
from typing import NewType

import msgspec

from router.types import (  # noqa: F401 - re-exported: the router's types travel on the wire as they are
    AllBlocksCleared,
    BlockHash,
    BlockRemoved,
    BlockStored,
    KvEvent,
    KvEventBatch,
    LoadReport,
    PeerLoad,
    RequestId,
    WorkerId,
    WorkerLoad,
)

JobId = NewType("JobId", str)
"""Id of one prefill job on the queue (one per remote prefill attempt)."""


class Role(enum.StrEnum):
    """What a worker pool does."""

    AGGREGATED = "aggregated"  # prefill and decode on the same engine
    PREFILL = "prefill"  # prompt only; KV is shipped to a decode worker
    DECODE = "decode"  # generates tokens; prefills locally or pulls remote KV


class WorkerRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A worker's registration in etcd, under its lease.

    Key: `/dynamo_lite/<namespace>/workers/<role>/<worker_id>`.
    """

    worker_id: WorkerId
    role: Role
    model: str  # served model name, as clients ask for it
    engine_url: str  # base URL of the engine's HTTP API, e.g. http://127.0.0.1:8100
    block_size: int  # KV block size of the engine, in tokens
    kv_capacity_blocks: int = 0  # total KV blocks of the engine (0: unknown)
    agent_url: str | None = None  # the worker agent's own HTTP endpoint (metrics), if any
    nixl_side_channel: str | None = None  # "host:port" of the engine's NIXL side channel
    pool: str = ""  # name of the pool in cluster.yaml this worker belongs to
    pid: int | None = None  # engine process id on its host, for `orchestrator status`
    started_at: float = 0.0  # unix time the worker registered first


KvTransferParams = dict[str, object]
"""vLLM's `kv_transfer_params`, passed through verbatim.

Its fields belong to the engine's KV connector (NixlConnector today: remote
engine id, block ids, host, port ...). dynamo_lite never reads or builds them
beyond `{"do_remote_decode": true}`, so they stay an opaque JSON object rather
than a struct that would drop fields a newer vLLM adds.
"""


class PrefillJob(msgspec.Struct, frozen=True, kw_only=True):
    """One remote-prefill request on the global prefill queue."""

    job_id: JobId
    request_id: RequestId
    model: str
    token_ids: list[int]
    reply_subject: str  # core NATS subject the submitter listens on for the result
    submitted_at: float  # unix time, for queue-wait metrics
    deadline: float  # unix time after which the submitter no longer waits


class PrefillResult(msgspec.Struct, frozen=True, kw_only=True):
    """What a prefill worker sends back on the job's reply subject.

    Exactly one of `kv_transfer_params` (success) or `error` (failure) is set.
    """

    job_id: JobId
    worker_id: WorkerId | None = None
    kv_transfer_params: KvTransferParams | None = None
    error: str | None = None
    prompt_tokens: int = 0
    cached_tokens: int = 0


# KV events: the structs (vLLM's wire format) are the router's, in router/types.py.


class RelayedKvEvents(msgspec.Struct, frozen=True, kw_only=True):
    """An engine's KV event batch relayed on `<ns>.kv_events.<worker_id>`.

    A message on that subject is a JSON array of these (`KvEventsMessage`): one or more
    consecutive batches of the worker, in order (the agent coalesces them under load).
    `seq` is the engine's own ZMQ sequence number; a consumer that sees a gap
    resyncs that worker (clears it and waits for fresh events).
    """

    worker_id: WorkerId
    seq: int
    batch: KvEventBatch


KvEventsMessage = list[RelayedKvEvents]
"""What one message on `<ns>.kv_events.<worker_id>` holds."""


class KvSnapshotRequest(msgspec.Struct, frozen=True, kw_only=True):
    """A frontend asks a worker agent, on `<ns>.kv_snapshot.<worker_id>`, for what its engine caches.

    The agent answers on the request's reply subject with `KvSnapshotChunk`s.
    """

    frontend_id: str  # who asks, for the agent's logs


class KvSnapshotChunk(msgspec.Struct, frozen=True, kw_only=True):
    """One part of a worker's KV snapshot: `BlockStored` events, parents before children.

    All chunks of one answer are consistent with the engine's batch `seq` (-1: no batch
    seen yet): a router applies them as the worker's baseline, then the live batches
    after `seq`. Chunks come in `index` order; the one with `last` set ends the answer
    (an empty cache is one empty last chunk).
    """

    worker_id: WorkerId
    seq: int
    index: int
    last: bool
    batch: KvEventBatch


def worker_key(namespace: str, role: Role, worker_id: WorkerId) -> str:
    """The etcd key of a worker's registration."""
    return f"{workers_prefix(namespace)}{role.value}/{worker_id}"


def workers_prefix(namespace: str) -> str:
    """The etcd prefix under which every worker of a namespace registers."""
    return f"/dynamo_lite/{namespace}/workers/"


def prefill_subject(namespace: str, model: str) -> str:
    """The JetStream subject of a model's prefill queue."""
    return f"{namespace}.prefill.{subject_token(model)}"


def kv_events_subject(namespace: str, worker_id: WorkerId | str) -> str:
    return f"{namespace}.kv_events.{worker_id}"


def kv_snapshot_subject(namespace: str, worker_id: WorkerId | str) -> str:
    return f"{namespace}.kv_snapshot.{worker_id}"


def frontend_load_subject(namespace: str, frontend_id: str) -> str:
    """Where a frontend process publishes its own in-flight load per worker (`PeerLoad`)."""
    return f"{namespace}.frontend_load.{frontend_id}"


def load_subject(namespace: str, worker_id: WorkerId | str) -> str:
    return f"{namespace}.load.{worker_id}"


def subject_token(name: str) -> str:
    """Make a model name safe as one NATS subject token (no dots, spaces or wildcards)."""
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)
