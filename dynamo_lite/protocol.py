"""Typed messages that cross process boundaries, in one place.

Everything that travels over etcd, NATS or ZMQ between dynamo_lite components is
one of the `msgspec.Struct`s below, encoded as JSON (etcd, NATS) or msgpack (the
engines' KV events, which are vLLM's own format). Ids are `NewType`s so that a
worker id cannot be passed where a request id is expected.
"""

from __future__ import annotations

import enum
from typing import NewType

import msgspec

WorkerId = NewType("WorkerId", str)
"""Unique per worker process for its whole life; never reused after a restart."""

RequestId = NewType("RequestId", str)
"""The client-visible request id; also sent to engines as `X-Request-Id`."""

JobId = NewType("JobId", str)
"""Id of one prefill job on the queue (one per remote prefill attempt)."""

BlockHash = NewType("BlockHash", int)
"""A 64-bit block hash (the router's chained xxh64, or the engine's own)."""


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


class SamplingParams(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The subset of vLLM sampling parameters dynamo_lite forwards to engines."""

    max_tokens: int
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool | None = None


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


class LoadReport(msgspec.Struct, frozen=True, kw_only=True):
    """A worker's load, published on `<ns>.load.<worker_id>` by its agent."""

    worker_id: WorkerId
    running: int  # vllm:num_requests_running
    waiting: int  # vllm:num_requests_waiting
    kv_usage: float  # vllm:kv_cache_usage_perc, 0..1
    ts: float  # unix time of the scrape


# --- KV events, vLLM's wire format (vllm/distributed/kv_events.py) -------------
# Engines publish msgpack `KVEventBatch`es over ZMQ; the worker agent relays them
# on NATS inside a `RelayedKvEvents` envelope. The structs mirror vLLM's so that
# msgspec decodes an engine's payload directly; fields we do not use keep their
# defaults and unknown fields are ignored.


# BlockStored and BlockRemoved encode every field (no omit_defaults): vLLM's own
# structs declare lora_id / medium / lora_name without defaults, so its decoder
# rejects a payload that omits them.
class BlockStored(msgspec.Struct, tag=True, kw_only=True):
    block_hashes: list[int]  # engine's hashes, one per full block, in order
    parent_block_hash: int | None  # engine's hash of the block before the first
    token_ids: list[int]  # len(block_hashes) * block_size token ids
    block_size: int
    lora_id: int | None = None
    medium: str | None = None
    lora_name: str | None = None


class BlockRemoved(msgspec.Struct, tag=True, kw_only=True):
    block_hashes: list[int]
    medium: str | None = None


class AllBlocksCleared(msgspec.Struct, tag=True, omit_defaults=True):
    pass


KvEvent = BlockStored | BlockRemoved | AllBlocksCleared


class KvEventBatch(msgspec.Struct, array_like=True, omit_defaults=True):
    """vLLM's `KVEventBatch`: `[ts, [event, ...], data_parallel_rank]`."""

    ts: float
    events: list[KvEvent]
    data_parallel_rank: int | None = None


class RelayedKvEvents(msgspec.Struct, frozen=True, kw_only=True):
    """An engine's KV event batch relayed on `<ns>.kv_events.<worker_id>`.

    `seq` is the engine's own ZMQ sequence number; a consumer that sees a gap
    resyncs that worker (clears it and waits for fresh events).
    """

    worker_id: WorkerId
    seq: int
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


def load_subject(namespace: str, worker_id: WorkerId | str) -> str:
    return f"{namespace}.load.{worker_id}"


def subject_token(name: str) -> str:
    """Make a model name safe as one NATS subject token (no dots, spaces or wildcards)."""
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)
