"""`Fleet`'s part of the KV snapshot (live batches buffered while a worker syncs) and of load
sharing (peers' loads split by model, own loads merged)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from dynamo_lite.discovery import WorkerChange
from dynamo_lite.frontend.fleet import Fleet, KvSnapshot
from dynamo_lite.frontend.metrics import FrontendMetrics
from dynamo_lite.protocol import (
    BlockStored,
    KvEventBatch,
    PeerLoad,
    RelayedKvEvents,
    RequestId,
    Role,
    WorkerId,
    WorkerLoad,
    WorkerRecord,
)
from router import RouterConfig

BS = 4
A, B, P = WorkerId("a"), WorkerId("b"), WorkerId("p")


def record(worker_id: WorkerId, model: str = "m", role: Role = Role.AGGREGATED) -> WorkerRecord:
    return WorkerRecord(worker_id=worker_id, role=role, model=model, engine_url="http://x", block_size=BS)


def fleet() -> Fleet:
    f = Fleet({"m": RouterConfig(block_size=BS), "n": RouterConfig(block_size=BS)}, FrontendMetrics(CollectorRegistry()))
    for r in (record(A), record(B, model="n"), record(P, role=Role.PREFILL)):
        f.on_worker_change(WorkerChange(r.worker_id, r, None))
    return f


def stored(first: int, n: int, parent: int | None) -> KvEventBatch:
    """Blocks `first`..`first+n-1` (engine hashes equal to their token ids' first one), chained."""
    return KvEventBatch(ts=0.0, events=[BlockStored(block_hashes=list(range(first, first + n)), parent_block_hash=parent,
                                                    token_ids=[t for h in range(first, first + n) for t in [h] * BS],
                                                    block_size=BS)])


def prompt(*hashes: int) -> list[int]:
    return [t for h in hashes for t in [h] * BS]


def overlap(f: Fleet, tokens: list[int]) -> int:
    return f.models["m"].router.route(tokens, [A]).overlap_blocks


def live(seq: int, batch: KvEventBatch) -> RelayedKvEvents:
    return RelayedKvEvents(worker_id=A, seq=seq, batch=batch)


def test_live_batches_wait_for_the_snapshot_then_those_after_its_seq_apply():
    f = fleet()
    token = f.begin_sync(A)
    assert token is not None
    f.on_kv_events(live(5, stored(1, 2, None)))  # covered by the snapshot (seq 6): a duplicate
    f.on_kv_events(live(7, stored(3, 1, 2)))  # after it: applies on top
    assert overlap(f, prompt(1, 2, 3)) == 0  # buffered, not applied
    outcome = f.end_sync(A, token, KvSnapshot(A, 6, [stored(1, 2, None)]))
    assert outcome is not None and outcome.stored == 2
    assert overlap(f, prompt(1, 2, 3)) == 3
    f.on_kv_events(live(8, stored(4, 1, 3)))  # live again
    assert overlap(f, prompt(1, 2, 3, 4)) == 4


def test_a_failed_snapshot_applies_the_buffered_batches_as_live_ones():
    f = fleet()
    token = f.begin_sync(A)
    f.on_kv_events(live(0, stored(1, 2, None)))
    assert f.end_sync(A, token, None) is None
    assert overlap(f, prompt(1, 2)) == 2


def test_stale_tokens_and_workers_that_left_change_nothing():
    f = fleet()
    first = f.begin_sync(A)
    second = f.begin_sync(A)  # re-synced (its record changed): the first fetch's answer is stale
    f.on_kv_events(live(0, stored(1, 1, None)))
    assert f.end_sync(A, first, KvSnapshot(A, 9, [stored(7, 1, None)])) is None
    assert overlap(f, prompt(1)) == 0 and overlap(f, prompt(7)) == 0  # still buffering for the second
    f.end_sync(A, second, KvSnapshot(A, -1, []))
    assert overlap(f, prompt(1)) == 1  # seq -1: an empty snapshot, any batch is the baseline
    token = f.begin_sync(A)
    f.on_worker_change(WorkerChange(A, None, record(A)))
    assert f.end_sync(A, token, KvSnapshot(A, 3, [stored(1, 1, None)])) is None
    assert f.begin_sync(P) is None and f.begin_sync(WorkerId("unknown")) is None  # prefill: not routed


def test_peer_loads_go_to_each_models_router_and_own_loads_merge_the_models():
    f = fleet()
    f.on_peer_load(PeerLoad(frontend_id="other", ts=1.0, workers={A: WorkerLoad(16, 3, 1, 1), B: WorkerLoad(0, 5, 2, 0),
                                                                 WorkerId("gone"): WorkerLoad(0, 9, 9, 0)}))
    assert f.models["m"].router.load_of(A).decode_blocks == 3
    assert f.models["n"].router.load_of(B).requests == 2
    assert f.own_loads() == {}  # never what peers sent
    ra = f.models["m"].router.route(prompt(1, 2), [A])
    f.models["m"].router.on_request_start(RequestId("r1"), ra)
    rb = f.models["n"].router.route(prompt(1), [B])
    f.models["n"].router.on_request_start(RequestId("r2"), rb)
    assert f.own_loads() == {A: WorkerLoad(8, 2, 1, 1, 1), B: WorkerLoad(4, 1, 1, 1, 1)}
    f.on_peer_load(PeerLoad(frontend_id="other", ts=2.0, workers={}))  # the peer went idle
    assert f.models["m"].router.load_of(A).decode_blocks == 2
