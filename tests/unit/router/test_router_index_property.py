"""Property tests: after any event sequence the index equals a brute-force reference."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dynamo_lite.protocol import KvEventBatch, WorkerId
from router.events import KvEventIngestor
from router.hashing import hash_blocks
from router.index import KvIndex

WORKERS = [WorkerId(f"w{i}") for i in range(3)]
EXAMPLES = int(os.environ.get("ROUTER_PROPERTY_EXAMPLES", "150"))  # raise for a soak run
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# --- index level: arbitrary engine-hash -> router-hash stores and removals ----------

ENGINE_IDS = st.integers(0, 11)
router_of = {e: e % 5 for e in range(12)}  # many engine hashes share a router hash

index_ops = st.one_of(
    st.tuples(st.just("store"), st.sampled_from(WORKERS), st.lists(ENGINE_IDS, max_size=4)),
    st.tuples(st.just("remove"), st.sampled_from(WORKERS), st.lists(ENGINE_IDS, max_size=4)),
    st.tuples(st.just("clear"), st.sampled_from(WORKERS), st.just([])),
    st.tuples(st.just("drop"), st.sampled_from(WORKERS), st.just([])),
)


def reference_overlap(held: dict[WorkerId, set[int]], query: list[int]) -> dict[WorkerId, int]:
    out = {}
    for w, blocks in held.items():
        n = 0
        while n < len(query) and query[n] in blocks:
            n += 1
        if n:
            out[w] = n
    return out


@SETTINGS
@given(ops=st.lists(index_ops, max_size=40), queries=st.lists(st.lists(st.integers(0, 4), max_size=6), max_size=8))
def test_index_equals_reference(ops, queries):
    idx = KvIndex()
    copies: dict[WorkerId, dict[int, int]] = {w: {} for w in WORKERS}  # engine hash -> copies
    for w in WORKERS:
        idx.add_worker(w)
    for op, w, engine in ops:
        if op == "store":
            idx.store(w, engine, [router_of[e] for e in engine])
            for e in engine:
                copies[w][e] = copies[w].get(e, 0) + 1
        elif op == "remove":
            unknown = idx.remove(w, engine)
            expected_unknown = 0
            for e in engine:
                if copies[w].get(e):
                    copies[w][e] -= 1
                    if not copies[w][e]:
                        del copies[w][e]
                else:
                    expected_unknown += 1
            assert unknown == expected_unknown
        elif op == "clear":
            idx.clear_worker(w)
            copies[w].clear()
        else:
            idx.remove_worker(w)
            idx.add_worker(w)
            copies[w].clear()
    held = {w: {router_of[e] for e in c} for w, c in copies.items()}
    for w in WORKERS:
        assert idx.num_blocks(w) == len(held[w])
    assert idx.num_nodes == len(set().union(*held.values()))
    for query in queries + [list(range(5))]:
        assert idx.find_matches(query) == reference_overlap(held, query)


# --- index level, chains: stores of tree paths with parents (runs grow, split, fragment) ----

TREE = 31  # nodes 1..31 of a binary tree; node k's parent is k // 2 (0: the root, not a block)


def path_to(node: int) -> list[int]:
    out = []
    while node:
        out.append(node)
        node //= 2
    return out[::-1]


chain_ops = st.one_of(
    st.tuples(st.just("store"), st.sampled_from(WORKERS), st.integers(1, TREE), st.integers(0, 4), st.booleans()),
    st.tuples(st.just("remove"), st.sampled_from(WORKERS), st.integers(1, TREE), st.integers(0, 4), st.booleans()),
    st.tuples(st.just("clear"), st.sampled_from(WORKERS), st.just(1), st.just(0), st.just(False)),
)


@SETTINGS
@given(ops=st.lists(chain_ops, max_size=50))
def test_chained_stores_and_removals_equal_reference(ops):
    idx = KvIndex()
    held: dict[WorkerId, set[int]] = {w: set() for w in WORKERS}
    for w in WORKERS:
        idx.add_worker(w)
    for op, w, node, skip, tail_only in ops:
        path = path_to(node)
        part = path[min(skip, len(path) - 1) :] if tail_only else path
        if op == "store":
            start = len(path) - len(part)
            parent = path[start - 1] if start else None
            new = [b for b in part if b not in held[w]]
            if new == part:  # the engine stores a stretch only once per copy
                idx.store(w, part, part, parent)
                held[w].update(part)
        elif op == "remove":
            gone = [b for b in part if b in held[w]]
            idx.remove(w, gone)
            held[w].difference_update(gone)
        else:
            idx.clear_worker(w)
            held[w].clear()
    assert idx.num_nodes == len(set().union(*held.values()))
    assert idx.num_runs <= idx.num_nodes
    for node in range(1, TREE + 1):
        query = path_to(node) + [999]
        assert idx.find_matches(query) == reference_overlap(held, query)
        for b in path_to(node):
            assert idx.holders(b) == frozenset(w for w in WORKERS if b in held[w])


# --- event level: engines as vLLM, index vs what the engines really hold -------------

BS = 4
CHUNKS = [[c * 10 + i for i in range(BS)] for c in range(3)]  # few distinct blocks: shared prefixes
prompts = st.tuples(st.lists(st.integers(0, 2), min_size=1, max_size=5), st.integers(0, BS - 1)).map(
    lambda p: [t for c in p[0] for t in CHUNKS[c]] + list(range(900, 900 + p[1]))
)
event_ops = st.one_of(
    st.tuples(st.just("prefill"), st.integers(0, 2), prompts),
    st.tuples(st.just("evict"), st.integers(0, 2), st.lists(st.integers(0, 50), min_size=1, max_size=3)),
    st.tuples(st.just("clear"), st.integers(0, 2), st.none()),
)


@SETTINGS
@given(ops=st.lists(event_ops, max_size=30), queries=st.lists(prompts, min_size=1, max_size=6))
def test_events_keep_index_equal_to_engine_caches(engine_factory, ops, queries):
    idx = KvIndex()
    ingestor = KvEventIngestor(idx, BS)
    engines = [engine_factory(BS, salt=1000 + i) for i in range(3)]
    for w in WORKERS:
        idx.add_worker(w)
    for op, i, arg in ops:
        eng = engines[i]
        if op == "prefill":
            events = eng.prefill(arg)
        elif op == "evict":
            cached = sorted(eng.copies)
            events = eng.evict([cached[k % len(cached)] for k in arg]) if cached else []
        else:
            events = eng.clear()
        seq, batch = eng.batch(events)
        outcome = ingestor.apply(WORKERS[i], seq, batch)
        assert outcome.orphaned == 0 and outcome.rejected == 0 and outcome.unknown_removed == 0
    for prompt in queries:
        expected = {}
        for w, eng in zip(WORKERS, engines):
            n = 0
            for h in eng.engine_hashes(prompt):
                if not eng.holds(h):
                    break
                n += 1
            if n:
                expected[w] = n
        assert idx.find_matches(hash_blocks(prompt, BS)) == expected


def test_empty_batch_is_a_valid_sequence_step():
    idx = KvIndex()
    idx.add_worker(WORKERS[0])
    ing = KvEventIngestor(idx, BS)
    assert not ing.apply(WORKERS[0], 0, KvEventBatch(ts=0.0, events=[])).needs_resync
    assert not ing.apply(WORKERS[0], 1, KvEventBatch(ts=0.0, events=[])).needs_resync
