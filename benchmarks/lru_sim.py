"""One simulated engine prefix cache: an LRU of block keys, as vLLM's block pool behaves between requests.

Shared by the offline router replay (`router_replay.py`, which adds KV events on top) and the arena's
references (`arena_refs.py`). Blocks of running requests are not pinned: a request's blocks are cached when
it arrives, which is exact for one request at a time and close while caches hold more than the longest one.

    cache = LruCache(capacity=1000)
    admission = cache.admit([k0, k1, k2])   # leading cached keys are hits; the rest are stored
    admission.hits, admission.evicted, admission.stored
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Admission:
    """What serving one prompt did to a cache."""

    hits: int  # leading keys that were cached (the prefix hit, in blocks)
    evicted: list[Hashable]  # keys dropped to make room, least recently used first
    stored: list[int]  # indices (into the admitted keys) of the keys newly cached, ascending


@dataclass
class LruCache:
    """``capacity`` blocks (None: unbounded), least recently used evicted first."""

    capacity: int | None
    blocks: OrderedDict[Hashable, None] = field(default_factory=OrderedDict)  # LRU first

    def __len__(self) -> int:
        return len(self.blocks)

    def prefix(self, keys: Sequence[Hashable]) -> int:
        """How many leading ``keys`` are cached, without touching them."""
        n = 0
        while n < len(keys) and keys[n] in self.blocks:
            n += 1
        return n

    def admit(self, keys: Sequence[Hashable]) -> Admission:
        """Serve a prompt of blocks ``keys``: the leading cached ones are hits, every key ends cached, the
        head most recently used (vLLM frees a request's blocks tail first, so tails are evicted first)."""
        hits = self.prefix(keys)
        for k in keys:  # this prompt's cached blocks go to the MRU end before anything is evicted
            if k in self.blocks:
                self.blocks.move_to_end(k)
        evicted: list[Hashable] = []
        stored: list[int] = []
        for i in range(hits, len(keys)):
            if keys[i] in self.blocks:  # cached after a miss: reused
                continue
            if self.capacity is not None and len(self.blocks) >= self.capacity:
                victim, _ = self.blocks.popitem(last=False)
                evicted.append(victim)
            self.blocks[keys[i]] = None
            stored.append(i)
        for k in reversed(keys):
            self.blocks.move_to_end(k)
        return Admission(hits, evicted, stored)
