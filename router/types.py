"""The router's own types: ids, the engines' KV events it learns from, and worker load.

The KV event structs mirror vLLM's (vllm/distributed/kv_events.py) so that msgspec
decodes an engine's msgpack payload directly; fields the router does not use keep
their defaults and unknown fields are ignored. `dynamo_lite.protocol` re-exports
all of these for the processes that send them.
"""

from __future__ import annotations

from typing import NewType

import msgspec

WorkerId = NewType("WorkerId", str)
"""Unique per worker process for its whole life; never reused after a restart."""

RequestId = NewType("RequestId", str)
"""The client-visible request id; also sent to engines as `X-Request-Id`."""

BlockHash = NewType("BlockHash", int)
"""A 64-bit block hash (the router's chained xxh64, or the engine's own)."""


class LoadReport(msgspec.Struct, frozen=True, kw_only=True):
    """A worker's load, published on `<ns>.load.<worker_id>` by its agent."""

    worker_id: WorkerId
    running: int  # vllm:num_requests_running
    waiting: int  # vllm:num_requests_waiting
    kv_usage: float  # vllm:kv_cache_usage_perc, 0..1
    ts: float  # unix time of the scrape


class WorkerLoad(msgspec.Struct, frozen=True, array_like=True):
    """One frontend's own in-flight requests on one worker (a `PeerLoad` entry)."""

    prefill_tokens: int  # uncached prompt tokens of its requests whose prefill has not finished
    decode_blocks: int  # KV blocks of the prompts of its requests in flight
    requests: int  # its requests in flight
    prefilling: int  # of those, the ones whose prefill has not finished
    awaiting: int = 0  # of its requests, those without a first token yet (prefilling, or prefilled elsewhere
    # and waiting for their KV): what the engine may count as waiting. 0 from a sender that predates it


class PeerLoad(msgspec.Struct, frozen=True, kw_only=True):
    """A frontend's own in-flight load per worker, for the other frontends of the namespace
    (published on `<ns>.frontend_load.<frontend_id>`). Only what it tracks itself: never
    what it learned from peers or load reports, so that nothing is counted twice."""

    frontend_id: str
    ts: float  # sender's unix time; an older message than the last one from the same sender is ignored
    workers: dict[WorkerId, WorkerLoad]  # workers it has requests in flight on; empty: idle


# --- KV events, vLLM's wire format (vllm/distributed/kv_events.py) -------------
# Engines publish msgpack `KVEventBatch`es over ZMQ; dynamo_lite's worker agent
# relays them on NATS inside its own envelope (`dynamo_lite.protocol.RelayedKvEvents`).


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
