"""Peers' loads in `LoadTracker`: added to views, replaced per message, expired, subtracted from
load-report corrections, never re-published; and two routers that share do not pile up."""

from __future__ import annotations

import random

from dynamo_lite.protocol import LoadReport, RequestId, WorkerId, WorkerLoad
from router import Router, RouterConfig
from router.load import LoadTracker

A, B = WorkerId("a"), WorkerId("b")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_peer_loads_add_up_replace_and_expire():
    clock = Clock()
    t = LoadTracker(16, clock, peer_ttl_s=1.5)
    t.start(RequestId("own"), A, prompt_tokens=32, uncached_tokens=32)
    t.update_peer("p1", 10.0, {A: WorkerLoad(100, 7, 2, 1)})
    t.update_peer("p2", 50.0, {A: WorkerLoad(0, 3, 1, 0), B: WorkerLoad(16, 1, 1, 1)})
    assert t.views([A, B]) == [(132.0, 12.0, 4, 2.0), (16.0, 1.0, 1, 1.0)]
    assert t.own_loads() == {A: WorkerLoad(32, 2, 1, 1, 1)}  # only its own, for its peers
    t.update_peer("p1", 9.0, {})  # older than p1's last message: ignored
    assert t.view(A).requests == 4
    clock.now = 1.0
    t.update_peer("p1", 11.0, {B: WorkerLoad(0, 4, 1, 0)})  # replaces p1's whole load
    assert t.views([A, B]) == [(32.0, 5.0, 2, 1.0), (16.0, 5.0, 2, 1.0)]
    clock.now = 2.0  # p2 last heard at 0.0: expired
    assert t.views([A, B]) == [(32.0, 2.0, 1, 1.0), (0.0, 4.0, 1, 0.0)] and t.peers() == 1
    clock.now = 2.6
    assert t.view(B) == (0.0, 0.0, 0, 0.0) and t.peers() == 0


def test_a_load_report_correction_does_not_count_peers_twice():
    clock = Clock()
    t = LoadTracker(16, clock)
    t.set_capacity(A, 1000)
    t.start(RequestId("own"), A, prompt_tokens=160, uncached_tokens=160)  # 10 blocks, prefilling
    t.update_peer("p", 1.0, {A: WorkerLoad(320, 30, 2, 2)})
    # The worker reports 50 blocks and 5 waiting: own 10 + peer 30 are known, 10 blocks and 2 waiting are not.
    t.update(LoadReport(worker_id=A, running=1, waiting=5, kv_usage=0.05, ts=1.0))
    view = t.view(A)
    assert view.decode_blocks == 10 + 30 + 10
    assert view.prefill_tokens == 160 + 320 + 2 * 160  # foreign waiting x this router's mean uncached tokens
    assert view.prefilling == 1 + 2 + 2


def test_streaming_counts_requests_past_their_first_token_not_reported_waiting_ones():
    clock = Clock()
    t = LoadTracker(16, clock, peer_ttl_s=1.5)
    t.set_capacity(A, 1000)
    for rid in ("streams", "prefills", "remote"):
        t.start(RequestId(rid), A, prompt_tokens=32, uncached_tokens=32)
    t.prefill_done(RequestId("streams"))
    t.prefilled_elsewhere(RequestId("remote"))  # its KV is on the way: no token yet
    assert t.streaming(A) == 1
    t.update_peer("p", 1.0, {A: WorkerLoad(16, 4, 3, 1, 2)})  # one of the peer's three streams
    t.update(LoadReport(worker_id=A, running=3, waiting=9, kv_usage=0.5, ts=1.0))  # foreign waiting: not streaming
    assert t.streaming(A) == 2 and t.streaming(B) == 0
    t.finish(RequestId("streams"))
    clock.now = 2.0  # the peer expired
    assert t.streaming(A) == 0


def test_removed_workers_lose_their_peer_load():
    t = LoadTracker(16, Clock())
    t.update_peer("p", 1.0, {A: WorkerLoad(0, 5, 1, 0)})
    t.remove_worker(A)
    assert t.view(A) == (0.0, 0.0, 0, 0.0)


def pile_up(share: bool, rounds: int = 40) -> int:
    """Two routers, each with one client at a time on prompts of one shape: the rounds in which
    both put their request on the same worker. Without sharing, each sees only its own load,
    none (its previous request ended), so each breaks the tie on its own."""
    rng = random.Random(0)
    routers = [Router(RouterConfig(block_size=16), rng=random.Random(i)) for i in range(2)]
    for r in routers:
        r.add_worker(A)
        r.add_worker(B)
    same = 0
    for i in range(rounds):
        chosen = []
        for k, r in enumerate(routers):
            d = r.route([rng.randrange(50_000) for _ in range(256)], [A, B])
            r.on_request_start(RequestId(f"{i}-{k}"), d)
            chosen.append(d.worker_id)
            if share:
                routers[1 - k].update_peer_load(f"r{k}", float(i), r.own_loads())
        same += chosen[0] == chosen[1]
        for k, r in enumerate(routers):
            r.on_request_finish(RequestId(f"{i}-{k}"))
            if share:
                routers[1 - k].update_peer_load(f"r{k}", i + 0.5, r.own_loads())
    return same


def test_two_routers_sharing_loads_spread_where_blind_ones_collide():
    assert pile_up(share=True) == 0
    assert pile_up(share=False) > 10  # ties at random: about half the rounds
