"""Shared helpers: a stand-in for vLLM's block pool that emits KV events the way vLLM does.

- Engine hashes are arbitrary 64-bit ints from a per-engine salt (vLLM seeds its
  hash per process), so two engines name the same block differently.
- Prefilling a prompt stores only its full blocks not already cached, in one
  ``BlockStored`` whose ``parent_block_hash`` is the engine hash of the cached
  block before them (None at the start) and whose ``token_ids`` cover exactly
  the stored blocks.
- Blocks after a cache miss are computed again even if cached further on, so
  one hash can have two physical copies (vLLM keeps both and emits a store
  for each); evicting removes one copy and emits one ``BlockRemoved`` per
  block; ``clear`` emits
  ``AllBlocksCleared``. Batches carry increasing sequence numbers.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import xxhash

from dynamo_lite.protocol import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KvEvent,
    KvEventBatch,
)


class FakeEngine:
    """One engine's prefix cache (unbounded; tests evict explicitly)."""

    def __init__(self, block_size: int, salt: int) -> None:
        self.block_size = block_size
        self.salt = salt
        self.copies: dict[int, int] = {}  # engine hash -> physical copies cached
        self.seq = 0

    def engine_hashes(self, token_ids: Sequence[int]) -> list[int]:
        """This engine's chained hashes of the full blocks of a prompt (any 64-bit values)."""
        out, parent = [], self.salt
        bs = self.block_size
        for i in range(len(token_ids) // bs):
            block = token_ids[i * bs : (i + 1) * bs]
            parent = xxhash.xxh3_64_intdigest(repr((parent, tuple(block))).encode(), seed=self.salt)
            out.append(parent)
        return out

    def prefill(self, token_ids: Sequence[int]) -> list[KvEvent]:
        """Cache a prompt's full blocks; the events vLLM would emit (empty if all cached)."""
        hashes = self.engine_hashes(token_ids)
        first_new = 0
        while first_new < len(hashes) and hashes[first_new] in self.copies:
            first_new += 1
        new = hashes[first_new:]
        if not new:
            return []
        bs = self.block_size
        for h in new:
            self.copies[h] = self.copies.get(h, 0) + 1
        parent = hashes[first_new - 1] if first_new else None
        tokens = list(token_ids[first_new * bs : len(hashes) * bs])
        return [BlockStored(block_hashes=new, parent_block_hash=parent, token_ids=tokens, block_size=bs)]

    def holds(self, engine_hash: int) -> bool:
        return engine_hash in self.copies

    def evict(self, engine_hashes: Sequence[int]) -> list[KvEvent]:
        """Evict one copy of each cached block listed (others are skipped)."""
        evicted = []
        for h in engine_hashes:
            if h not in self.copies:
                continue
            evicted.append(h)
            if self.copies[h] == 1:
                del self.copies[h]
            else:
                self.copies[h] -= 1
        return [BlockRemoved(block_hashes=evicted)] if evicted else []

    def clear(self) -> list[KvEvent]:
        self.copies.clear()
        return [AllBlocksCleared()]

    def batch(self, events: list[KvEvent]) -> tuple[int, KvEventBatch]:
        """Wrap events as the next batch: ``(seq, batch)``."""
        seq = self.seq
        self.seq += 1
        return seq, KvEventBatch(ts=float(seq), events=events)


@pytest.fixture
def engine_factory() -> type[FakeEngine]:
    """The `FakeEngine` class (a fixture so test modules need not import this conftest)."""
    return FakeEngine
