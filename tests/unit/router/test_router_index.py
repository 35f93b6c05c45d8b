from dynamo_lite.protocol import WorkerId
from router.index import KvIndex

A, B, C = WorkerId("a"), WorkerId("b"), WorkerId("c")


def make(*workers: WorkerId) -> KvIndex:
    idx = KvIndex()
    for w in workers:
        idx.add_worker(w)
    return idx


def store(idx: KvIndex, w: WorkerId, routers: list[int], salt: int = 1000) -> list[int]:
    engine = [r + salt for r in routers]
    idx.store(w, engine, routers)
    return engine


def test_find_matches_counts_leading_blocks_per_worker():
    idx = make(A, B, C)
    store(idx, A, [1, 2, 3, 4])
    store(idx, B, [1, 2])
    store(idx, C, [9])
    assert idx.find_matches([1, 2, 3, 4, 5]) == {A: 4, B: 2}
    assert idx.find_matches([9, 1]) == {C: 1}
    assert idx.find_matches([7, 1, 2]) == {}
    assert idx.find_matches([]) == {}


def test_a_missing_middle_block_ends_the_prefix():
    idx = make(A)
    eng = store(idx, A, [1, 2, 3, 4])
    idx.remove(A, [eng[1]])  # evict block 2 only
    assert idx.find_matches([1, 2, 3, 4]) == {A: 1}
    store(idx, A, [2], salt=5000)  # re-stored under a new engine hash
    assert idx.find_matches([1, 2, 3, 4]) == {A: 4}


def test_interleaved_store_and_remove_across_workers():
    idx = make(A, B)
    ea = store(idx, A, [1, 2, 3], salt=100)
    eb = store(idx, B, [1, 2, 3], salt=200)
    idx.remove(A, [ea[2]])
    assert idx.find_matches([1, 2, 3]) == {A: 2, B: 3}
    idx.remove(B, eb)
    assert idx.find_matches([1, 2, 3]) == {A: 2}
    assert idx.holders(3) == frozenset()
    assert idx.num_nodes == 2  # blocks 1, 2 (only A); 3 gone


def test_same_engine_hash_stored_twice_needs_two_removals():
    idx = make(A)
    idx.store(A, [10], [1])
    idx.store(A, [10], [1])
    assert idx.remove(A, [10]) == 0
    assert idx.find_matches([1]) == {A: 1}
    idx.remove(A, [10])
    assert idx.find_matches([1]) == {}


def test_two_engine_hashes_for_one_router_hash():
    idx = make(A)
    idx.store(A, [10, 11], [1, 1])
    assert idx.num_blocks(A) == 1
    idx.remove(A, [10])
    assert idx.find_matches([1]) == {A: 1}
    idx.remove(A, [11])
    assert idx.find_matches([1]) == {} and idx.num_nodes == 0


def test_unknown_removals_are_counted_not_fatal():
    idx = make(A)
    assert idx.remove(A, [123, 456]) == 2


def test_clear_and_remove_worker():
    idx = make(A, B)
    store(idx, A, [1, 2])
    store(idx, B, [1, 2, 3])
    assert idx.clear_worker(A) == 2
    assert idx.find_matches([1, 2, 3]) == {B: 3}
    assert idx.has_worker(A)
    assert idx.remove_worker(B) == 3
    assert not idx.has_worker(B)
    assert idx.num_nodes == 0
    assert idx.remove_worker(B) == 0


def test_slots_are_reused_without_leaking_old_blocks():
    idx = make(A, B)
    store(idx, A, [1, 2])
    idx.remove_worker(A)
    idx.add_worker(C)  # takes A's slot
    assert idx.find_matches([1, 2]) == {}
    store(idx, C, [1])
    assert idx.find_matches([1, 2]) == {C: 1}
    assert idx.router_hash_of(C, 1001) == 1
    assert idx.router_hash_of(A, 1001) is None


def test_memory_is_per_distinct_block():
    idx = make(A, B, C)
    for w in (A, B, C):
        store(idx, w, list(range(1, 101)))
    assert idx.num_nodes == 100
    assert [idx.num_blocks(w) for w in (A, B, C)] == [100, 100, 100]


def test_add_worker_is_idempotent():
    idx = make(A)
    store(idx, A, [1])
    idx.add_worker(A)
    assert idx.find_matches([1]) == {A: 1}


def test_chains_are_stored_as_runs_that_split_when_holders_differ():
    from router.index import MAX_RUN

    idx = make(A, B)
    chain = list(range(1, 2 * MAX_RUN + 11))  # 138 blocks
    idx.store(A, [h + 10_000 for h in chain], chain)
    assert idx.num_runs == 3  # capped at MAX_RUN blocks each
    idx.store(B, [h + 20_000 for h in chain[:40]], chain[:40])  # B joins on a prefix: one split
    assert idx.num_runs == 4
    assert idx.find_matches(chain) == {A: len(chain), B: 40}
    idx.remove(A, [chain[99] + 10_000])  # a hole in A's chain
    assert idx.find_matches(chain) == {A: 99, B: 40}
    assert idx.find_matches(chain[:50] + [-1]) == {A: 50, B: 40}


def test_a_continuation_extends_the_parent_run():
    idx = make(A)
    idx.store(A, [1, 2], [101, 102])
    idx.store(A, [3, 4], [103, 104], parent=102)
    assert idx.num_runs == 1
    idx.store(A, [5], [105], parent=None)  # parent unknown: a run of its own, still found
    assert idx.num_runs == 2
    assert idx.find_matches([101, 102, 103, 104, 105]) == {A: 5}
