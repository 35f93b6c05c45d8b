"""The approximate index: learns block placement from the router's own decisions.

For fleets that publish no KV events. When a request is sent to a worker, that
worker is assumed to hold every full block of the prompt for ``ttl_s`` seconds
(refreshed when routed there again); after that the entry expires, standing in
for the engine's eviction that the router cannot see. ``max_blocks_per_worker``
optionally caps each worker's entries, dropping the least recently routed first
(a finite cache; tails of prompts go before their heads). Time comes from an injected clock so tests control expiry.

The learned blocks live in their own `KvIndex`, keyed by router hashes on both
sides (there is no engine hash), so lookups are the same prefix walk as in
``ttft`` and ``blocks`` modes.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence

from router.index import KvIndex
from router.types import WorkerId

Clock = Callable[[], float]


class ApproxIndex:
    """A TTL (and optionally size) bounded index fed by routing decisions."""

    def __init__(self, clock: Clock, ttl_s: float, max_blocks_per_worker: int | None = None) -> None:
        if ttl_s <= 0:
            raise ValueError(f"ttl_s must be positive, got {ttl_s}")
        if max_blocks_per_worker is not None and max_blocks_per_worker <= 0:
            raise ValueError("max_blocks_per_worker must be positive or None")
        self._clock = clock
        self._ttl = ttl_s
        self._cap = max_blocks_per_worker
        self.index = KvIndex()
        # Per worker, router hash -> expiry, oldest first (one TTL for all: insertion order is expiry order).
        self._expiry: dict[WorkerId, OrderedDict[int, float]] = {}

    def add_worker(self, worker_id: WorkerId) -> None:
        self.index.add_worker(worker_id)
        self._expiry.setdefault(worker_id, OrderedDict())

    def remove_worker(self, worker_id: WorkerId) -> None:
        self.index.remove_worker(worker_id)
        self._expiry.pop(worker_id, None)

    def learn(self, worker_id: WorkerId, hashes: Sequence[int]) -> None:
        """Record that ``worker_id`` now holds ``hashes`` until ``now + ttl_s`` (adds the worker if new)."""
        if worker_id not in self._expiry:
            self.add_worker(worker_id)
        now = self._clock()
        self._expire_worker(worker_id, now)
        entries = self._expiry[worker_id]
        self._store_new(worker_id, [h for h in hashes if h not in entries], hashes, entries)
        deadline = now + self._ttl
        # Newest last and the prompt's head newest of all: like vLLM, which frees a
        # request's blocks tail first, a capped worker loses prefix tails before heads.
        for h in reversed(hashes):
            entries[h] = deadline
            entries.move_to_end(h)
        self._enforce_cap(worker_id, entries)

    def _store_new(
        self, worker_id: WorkerId, new: list[int], hashes: Sequence[int], entries: OrderedDict[int, float]
    ) -> None:
        """Store the not-yet-known ``new`` blocks of ``hashes``, stretch by stretch, in chain order."""
        if not new:
            return
        if len(new) == len(hashes):
            self.index.store(worker_id, new, new)
            return
        start = None
        for i, h in enumerate([*hashes, None]):
            if h is not None and h not in entries:
                start = i if start is None else start
            elif start is not None:
                stretch = list(hashes[start:i])
                self.index.store(worker_id, stretch, stretch, hashes[start - 1] if start else None)
                start = None

    def find_matches(self, hashes: Sequence[int]) -> dict[WorkerId, int]:
        """Prefix overlap per worker among unexpired entries."""
        self.expire()
        return self.index.find_matches(hashes)

    def expire(self) -> None:
        """Drop every entry whose TTL has passed."""
        now = self._clock()
        for worker_id in self._expiry:
            self._expire_worker(worker_id, now)

    def num_blocks(self, worker_id: WorkerId) -> int:
        return self.index.num_blocks(worker_id)

    def _expire_worker(self, worker_id: WorkerId, now: float) -> None:
        entries = self._expiry[worker_id]
        stale = []
        for h, deadline in entries.items():
            if deadline > now:
                break
            stale.append(h)
        self._drop(worker_id, entries, stale)

    def _enforce_cap(self, worker_id: WorkerId, entries: OrderedDict[int, float]) -> None:
        if self._cap is None or len(entries) <= self._cap:
            return
        excess = len(entries) - self._cap
        oldest = [h for h, _ in zip(entries, range(excess))]
        self._drop(worker_id, entries, oldest)

    def _drop(self, worker_id: WorkerId, entries: OrderedDict[int, float], hashes: list[int]) -> None:
        for h in hashes:
            del entries[h]
        self.index.remove(worker_id, hashes)
