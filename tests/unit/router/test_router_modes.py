"""The `Router` facade: each mode's choices, decisions, discovery and life cycle."""

import random
from collections import Counter

import pytest

from dynamo_lite.protocol import LoadReport, RequestId, WorkerId
from router import Router, RouterConfig, RouterMode, SeqStatus

BS = 16
A, B, C = WorkerId("a"), WorkerId("b"), WorkerId("c")
ALL = [A, B, C]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def make(mode=RouterMode.BLOCKS, seed=0, clock=None, **kw) -> Router:
    r = Router(RouterConfig(block_size=BS, mode=mode, **kw), clock=clock or Clock(), rng=random.Random(seed))
    for w in ALL:
        r.add_worker(w)
    return r


def prompt(base: int, n: int) -> list[int]:
    return [base + i for i in range(n)]


def store(r: Router, engine_factory, w: WorkerId, tokens: list[int], salt: int = 7) -> None:
    eng = engine_factory(BS, salt)
    seq, batch = eng.batch(eng.prefill(tokens))
    assert r.apply_events(w, seq, batch).status is SeqStatus.APPLIED


def test_kv_routes_to_the_worker_holding_the_prefix(engine_factory):
    r = make()
    store(r, engine_factory, B, prompt(0, 320))
    d = r.route(prompt(0, 330), ALL)
    assert d.worker_id == B
    assert (d.overlap_blocks, d.overlap_tokens, d.uncached_tokens, d.prompt_tokens) == (20, 320, 10, 330)
    assert [s.worker_id for s in d.scores] == ALL and d.cost == min(s.cost for s in d.scores)
    assert len(d.block_hashes) == 20


def test_kv_load_outweighs_a_small_overlap(engine_factory):
    r = make()
    store(r, engine_factory, A, prompt(0, 32))  # 2 blocks cached on A
    for i in range(3):  # A is busy with three long prompts
        r.on_request_start(RequestId(f"busy{i}"), r.route_hashes([], 1600, [A]))
    assert r.route(prompt(0, 320), ALL).worker_id != A


def test_kv_tie_prefers_the_smaller_index_then_random(engine_factory):
    r = make()
    store(r, engine_factory, A, prompt(10_000, 160))
    store(r, engine_factory, B, prompt(20_000, 32))
    assert r.route(prompt(0, 64), [A, B]).worker_id == B  # equal cost, B holds fewer blocks
    picks = Counter(make(seed=s).route(prompt(0, 64), ALL).worker_id for s in range(60))
    assert set(picks) == set(ALL)


def test_temperature_samples_but_prefers_low_cost(engine_factory):
    r = make(temperature=0.2)
    store(r, engine_factory, C, prompt(0, 800))
    picks = Counter(r.route(prompt(0, 800), ALL).worker_id for _ in range(300))
    assert picks[C] > 200 and len(picks) > 1


def test_approx_learns_from_decisions_and_forgets_after_ttl():
    clock = Clock()
    r = make(RouterMode.APPROX, clock=clock, approx_ttl_s=60.0)
    first = r.route(prompt(0, 256), ALL)
    assert first.overlap_blocks == 0
    r.on_request_start(RequestId("r1"), first)
    r.on_request_finish(RequestId("r1"))
    again = r.route(prompt(0, 300), ALL)
    assert again.worker_id == first.worker_id and again.overlap_blocks == 16
    clock.now = 61.0
    assert r.route(prompt(0, 300), ALL).overlap_blocks == 0


def test_approx_refresh_and_cap():
    clock = Clock()
    r = make(RouterMode.APPROX, clock=clock, approx_ttl_s=60.0, approx_max_blocks_per_worker=20)
    d1 = r.route_hashes(list(range(1, 17)), 256, [A])
    r.on_request_start(RequestId("1"), d1)
    clock.now = 50.0
    r.on_request_start(RequestId("2"), r.route_hashes(list(range(1, 9)), 128, [A]))  # refreshes 1..8
    clock.now = 100.0  # 9..16 expired, 1..8 refreshed at t=50
    assert r.route_hashes(list(range(1, 17)), 256, [A]).overlap_blocks == 8
    r.on_request_start(RequestId("3"), r.route_hashes(list(range(100, 116)), 256, [A]))  # cap 20: oldest go
    assert r.route_hashes(list(range(1, 17)), 256, [A]).overlap_blocks == 4


def test_round_robin_cycles_in_candidate_order():
    r = make(RouterMode.ROUND_ROBIN)
    assert [r.route(prompt(0, 10), ALL).worker_id for _ in range(5)] == [A, B, C, A, B]


def test_random_is_uniform_and_seeded():
    picks = [make(RouterMode.RANDOM, seed=3).route(prompt(0, 10), ALL).worker_id for _ in range(2)]
    assert picks[0] == picks[1]
    r = make(RouterMode.RANDOM, seed=4)
    counts = Counter(r.route(prompt(0, 10), ALL).worker_id for _ in range(900))
    assert min(counts.values()) > 240


def test_least_loaded_ignores_the_cache(engine_factory):
    r = make(RouterMode.LEAST_LOADED)
    store(r, engine_factory, A, prompt(0, 320))
    r.on_request_start(RequestId("x"), r.route_hashes([], 16, [A]))
    r.on_request_start(RequestId("y"), r.route_hashes([], 160, [B]))
    d = r.route(prompt(0, 320), ALL)
    assert d.worker_id == C and d.overlap_blocks == 0
    # Cache-blind modes still report the chosen worker's overlap for disaggregation.
    r.on_request_finish(RequestId("x"))
    r.on_request_finish(RequestId("y"))
    r.on_request_start(RequestId("z"), r.route_hashes([], 160, [B]))
    r.on_request_start(RequestId("w"), r.route_hashes([], 160, [C]))
    assert r.route(prompt(0, 320), ALL).overlap_tokens == 320


def test_load_reports_steer_kv_routing():
    r = make()
    r.add_worker(A, kv_capacity_blocks=1000)
    r.update_load(LoadReport(worker_id=A, running=10, waiting=0, kv_usage=0.5, ts=1.0))
    assert r.load_of(A).decode_blocks == 500
    assert r.route(prompt(0, 64), [A, B]).worker_id == B


def test_remove_and_sync_workers_drop_blocks_and_late_events(engine_factory):
    r = make()
    store(r, engine_factory, A, prompt(0, 64))
    assert r.sync_workers([B, C]) == [A]
    assert A not in r.workers and r.index.num_nodes == 0
    eng = engine_factory(BS, 9)
    seq, batch = eng.batch(eng.prefill(prompt(0, 64)))
    assert r.apply_events(A, seq, batch).status is SeqStatus.UNKNOWN_WORKER
    assert r.route(prompt(0, 64), [B, C]).overlap_blocks == 0


def test_resync_worker_then_replay(engine_factory):
    r = make()
    eng = engine_factory(BS, 5)
    batches = [eng.batch(eng.prefill(prompt(i * 1000, 32))) for i in range(3)]
    r.apply_events(A, *batches[0])
    outcome = r.apply_events(A, *batches[2])  # batch 1 lost
    assert outcome.needs_resync and outcome.missed_from == 1
    r.resync_worker(A)
    for seq, batch in batches:  # the engine's replay buffer, from its oldest event
        r.apply_events(A, seq, batch)
    assert all(r.route(prompt(i * 1000, 32), ALL).overlap_blocks == 2 for i in range(3))


def test_errors_and_unregistered_candidates():
    r = make()
    with pytest.raises(ValueError):
        r.route(prompt(0, 10), [])
    d = r.route(prompt(0, 10), [WorkerId("new")])
    assert d.worker_id == "new" and d.overlap_blocks == 0
    r.on_request_start(RequestId("q"), d)
    with pytest.raises(ValueError):
        r.on_request_start(RequestId("q"), d)
    with pytest.raises(ValueError):
        RouterConfig(block_size=0)
    with pytest.raises(ValueError):
        RouterConfig(mode="nope")
    assert RouterConfig(mode="approx").mode is RouterMode.APPROX
