"""The KV index: which worker holds which block, and prefix overlap per worker.

Structure
---------
A radix tree over block hashes with compressed edges. Because every router hash
chains its parent (see `router.hashing`), one hash names a whole root-to-block
path, so no per-node children maps are needed: the tree is a set of *runs*,
each a stretch of consecutive blocks of one chain that the same workers hold.
A run keeps its hashes in order and one worker bitmask (an ``int`` over worker
slots, so a set intersection is one ``&``). One dict maps every block hash to
its run.

A lookup walks the prompt run by run: one dict lookup, then one C-level list
comparison over the whole run, instead of one dict lookup per block; on a
large index that is what keeps an 8k-token prompt cheap. Runs are split when
some of their blocks change holders and never merged (fragmentation costs
speed, never correctness); new blocks extend their parent's run while the
holder set is the same, up to `MAX_RUN` blocks, which bounds a split's cost.

Per worker the index keeps ``engine hash -> router hash``: engines name blocks
by their own hashes (seeded per process), and ``BlockRemoved`` carries only
those. Duplicates are counted the way vLLM emits them: the same engine hash
stored twice (two physical copies) needs two removals; two engine hashes with
the same router hash (same tokens, different extra keys) keep the worker on the
block until both are gone.

Memory: one dict entry and one list slot per *distinct* block, one small object
per run, plus per worker one map entry per block it holds. Not thread-safe; the
owner (the `Router`) serialises calls.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from router.types import BlockHash, WorkerId

MAX_RUN = 64
"""Longest run a store creates or extends (splits copy at most this many entries)."""


class _Run:
    """Consecutive blocks of one chain with the same holders."""

    __slots__ = ("hashes", "mask")

    def __init__(self, hashes: list[int], mask: int) -> None:
        self.hashes = hashes  # router hashes, each the child of the one before
        self.mask = mask  # bit per worker slot holding every block of the run


@dataclass(slots=True)
class _WorkerBlocks:
    """One worker's slice of the index."""

    bit: int  # 1 << slot
    by_engine: dict[int, int] = field(default_factory=dict)  # engine hash -> router hash
    engine_extra: dict[int, int] = field(default_factory=dict)  # engine hash -> copies beyond the first
    router_extra: dict[int, int] = field(default_factory=dict)  # router hash -> engine hashes beyond the first
    num_blocks: int = 0  # distinct router hashes held


class KvIndex:
    """Block index over all workers; see the module docstring for the layout."""

    def __init__(self) -> None:
        self._runs: dict[int, _Run] = {}  # router hash -> the run holding it
        self._workers: dict[WorkerId, _WorkerBlocks] = {}
        self._slot_owner: list[WorkerId | None] = []
        self._free_slots: list[int] = []

    # --- workers -----------------------------------------------------------
    def add_worker(self, worker_id: WorkerId) -> None:
        """Give ``worker_id`` a slot (idempotent). Slots of dropped workers are reused."""
        if worker_id in self._workers:
            return
        if self._free_slots:
            slot = self._free_slots.pop()
            self._slot_owner[slot] = worker_id
        else:
            slot = len(self._slot_owner)
            self._slot_owner.append(worker_id)
        self._workers[worker_id] = _WorkerBlocks(bit=1 << slot)

    def remove_worker(self, worker_id: WorkerId) -> int:
        """Drop a worker and every block it holds; returns how many. Unknown ids: 0."""
        wb = self._workers.get(worker_id)
        if wb is None:
            return 0
        dropped = self.clear_worker(worker_id)
        del self._workers[worker_id]
        slot = wb.bit.bit_length() - 1
        self._slot_owner[slot] = None
        self._free_slots.append(slot)
        return dropped

    def clear_worker(self, worker_id: WorkerId) -> int:
        """Forget every block of a worker but keep it registered; returns how many.

        A worker on a run holds all of it, so clearing touches each run once
        and splits nothing.
        """
        wb = self._workers.get(worker_id)
        if wb is None:
            return 0
        runs = {id(run): run for r in wb.by_engine.values() if (run := self._runs.get(r)) is not None}
        for run in runs.values():
            if run.mask & wb.bit:
                run.mask &= ~wb.bit
                if not run.mask:
                    self._delete(run)
        dropped = wb.num_blocks
        wb.by_engine, wb.engine_extra, wb.router_extra, wb.num_blocks = {}, {}, {}, 0
        return dropped

    def has_worker(self, worker_id: WorkerId) -> bool:
        return worker_id in self._workers

    def workers(self) -> list[WorkerId]:
        return list(self._workers)

    # --- events ------------------------------------------------------------
    def store(
        self,
        worker_id: WorkerId,
        engine_hashes: Sequence[int],
        router_hashes: Sequence[int],
        parent: int | None = None,
    ) -> None:
        """Record that ``worker_id`` now holds these blocks (pairs in order).

        ``router_hashes`` should be consecutive blocks of one chain and
        ``parent`` the router hash before the first (None: unknown or the
        root); both only help runs grow, any order is stored correctly.
        Raises KeyError for a worker never added; ValueError if lengths differ.
        """
        if len(engine_hashes) != len(router_hashes):
            raise ValueError("engine_hashes and router_hashes differ in length")
        wb = self._workers[worker_id]
        bit, by_engine, runs = wb.bit, wb.by_engine, self._runs
        tail = self._extendable_run(parent, bit)  # run the next new block may extend
        seg: _Run | None = None  # pending stretch of an existing run that gains this worker
        seg_start = seg_end = 0
        for e, r in zip(engine_hashes, router_hashes):
            if e in by_engine:
                wb.engine_extra[e] = wb.engine_extra.get(e, 0) + 1
                tail = None
                continue
            run = runs.get(r)
            if run is None:  # a block nobody holds
                tail = self._add_block(r, bit, tail)
            elif seg is not None and run is seg and seg_end + 1 < len(run.hashes) and run.hashes[seg_end + 1] == r:
                seg_end += 1  # the stretch continues
                tail = None
            else:
                if seg is not None:
                    self._recolor(seg, seg_start, seg_end, seg.mask | bit)
                    seg = None
                    run = runs[r]  # the flush may have moved r to another run
                tail = None
                if run.mask & bit:  # already held under another engine hash
                    by_engine[e] = r
                    wb.router_extra[r] = wb.router_extra.get(r, 0) + 1
                    continue
                seg, seg_start = run, run.hashes.index(r)
                seg_end = seg_start
            by_engine[e] = r
            wb.num_blocks += 1
        if seg is not None:
            self._recolor(seg, seg_start, seg_end, seg.mask | bit)

    def remove(self, worker_id: WorkerId, engine_hashes: Iterable[int]) -> int:
        """Record that ``worker_id`` evicted these blocks; returns how many it did not know.

        Raises KeyError for a worker never added.
        """
        wb = self._workers[worker_id]
        unknown = 0
        for e in engine_hashes:
            r = wb.by_engine.get(e)
            if r is None:
                unknown += 1
            elif not _decrement(wb.engine_extra, e):
                del wb.by_engine[e]
                if not _decrement(wb.router_extra, r):
                    run = self._runs[r]
                    j = run.hashes.index(r)
                    self._recolor(run, j, j, run.mask & ~wb.bit)
                    wb.num_blocks -= 1
        return unknown

    def router_hash_of(self, worker_id: WorkerId, engine_hash: int) -> BlockHash | None:
        """The router hash a worker's engine hash maps to, or None if not held."""
        wb = self._workers.get(worker_id)
        if wb is None:
            return None
        r = wb.by_engine.get(engine_hash)
        return None if r is None else BlockHash(r)

    # --- runs --------------------------------------------------------------
    def _extendable_run(self, parent: int | None, bit: int) -> _Run | None:
        """The run ending at ``parent`` if new blocks of this worker alone may extend it."""
        if parent is None:
            return None
        run = self._runs.get(parent)
        if run is None or run.mask != bit or len(run.hashes) >= MAX_RUN or run.hashes[-1] != parent:
            return None
        return run

    def _add_block(self, r: int, bit: int, tail: _Run | None) -> _Run:
        """Store a new block, extending ``tail`` when allowed; returns the run that may take the next one."""
        if tail is None or len(tail.hashes) >= MAX_RUN:
            tail = _Run([r], bit)
        else:
            tail.hashes.append(r)
        self._runs[r] = tail
        return tail

    def _recolor(self, run: _Run, first: int, last: int, mask: int) -> None:
        """Give blocks ``first..last`` (offsets, inclusive) of ``run`` the holders ``mask`` (0: delete them)."""
        if mask == run.mask:
            return
        target = run
        if first > 0:
            target = self._split(run, first)
            last -= first
        if last + 1 < len(target.hashes):
            self._split(target, last + 1)
        if mask:
            target.mask = mask
        else:
            self._delete(target)

    def _split(self, run: _Run, at: int) -> _Run:
        """Move ``run.hashes[at:]`` (0 < at < len) into a new run with the same holders; returns it."""
        moved = _Run(run.hashes[at:], run.mask)
        del run.hashes[at:]
        runs = self._runs
        for h in moved.hashes:
            runs[h] = moved
        return moved

    def _delete(self, run: _Run) -> None:
        runs = self._runs
        for h in run.hashes:
            del runs[h]

    # --- queries -----------------------------------------------------------
    def find_matches(self, hashes: Sequence[int]) -> dict[WorkerId, int]:
        """Prefix overlap per worker: how many leading ``hashes`` each worker holds.

        Workers with no overlap are absent. Walks run by run and stops at the
        first block no worker still in the running holds (a miss costs one
        lookup). O(runs crossed) dict lookups plus O(matched blocks) C-level
        comparisons, plus O(workers) to report.
        """
        n = len(hashes)
        get = self._runs.get
        run = get(hashes[0]) if n else None
        if run is None:
            return {}
        scores: dict[WorkerId, int] = {}
        active = run.mask
        i = 0
        while True:
            i += _common_length(hashes, i, run.hashes)
            if i >= n:
                break
            run = get(hashes[i])
            if run is None:
                break
            m = active & run.mask
            if m != active:
                self._record(active & ~m, i, scores)
                if not m:
                    return scores
                active = m
        self._record(active, i, scores)
        return scores

    def _record(self, mask: int, depth: int, scores: dict[WorkerId, int]) -> None:
        owner = self._slot_owner
        while mask:
            low = mask & -mask
            scores[owner[low.bit_length() - 1]] = depth  # type: ignore[index]
            mask ^= low

    def holders(self, router_hash: int) -> frozenset[WorkerId]:
        """Workers holding one block (for tests and debugging)."""
        run = self._runs.get(router_hash)
        found: dict[WorkerId, int] = {}
        self._record(run.mask if run else 0, 0, found)
        return frozenset(found)

    def num_blocks(self, worker_id: WorkerId) -> int:
        """Distinct blocks a worker holds (0 for unknown workers)."""
        wb = self._workers.get(worker_id)
        return 0 if wb is None else wb.num_blocks

    @property
    def num_nodes(self) -> int:
        """Distinct blocks held by at least one worker."""
        return len(self._runs)

    @property
    def num_runs(self) -> int:
        """Runs (compressed edges) in the tree; lower is faster lookups."""
        return len({id(run) for run in self._runs.values()})


def _common_length(hashes: Sequence[int], i: int, run_hashes: list[int]) -> int:
    """How many of ``hashes[i:]`` match ``run_hashes`` from the position of ``hashes[i]`` in it (>= 1).

    ``hashes[i]`` is in the run. A walk enters runs at their first block (a
    chain's next block after a run's end or after a branch starts its own run),
    so the common case is one slice comparison done in C.
    """
    off = 0 if run_hashes[0] == hashes[i] else run_hashes.index(hashes[i])
    length = min(len(run_hashes) - off, len(hashes) - i)
    if hashes[i : i + length] == run_hashes[off : off + length]:
        return length
    k = 1
    while hashes[i + k] == run_hashes[off + k]:
        k += 1
    return k


def _decrement(counts: dict[int, int], key: int) -> bool:
    """Take one from ``counts[key]`` if present (deleting at zero); True if it was present."""
    n = counts.get(key)
    if not n:
        return False
    if n == 1:
        del counts[key]
    else:
        counts[key] = n - 1
    return True
