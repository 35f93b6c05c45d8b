"""Paged KV cache with prefix caching: a fixed pool of blocks, chained block
hashes, LRU eviction of unreferenced cached blocks, and vLLM KV events.

Pure (no I/O). Like vLLM's block pool, it appends `BlockStored` /
`BlockRemoved` / `AllBlocksCleared` to a list that the engine drains with
`take_events()` and hands to a publisher.

Allocation order: never-used and uncached free blocks first, then the least
recently freed cached block (evicting it emits `BlockRemoved`). vLLM keeps one
free queue for both kinds; preferring blocks that hold nothing reusable only
delays evictions, it never changes which prefix is hit.
"""

from __future__ import annotations

from array import array
from collections import OrderedDict
from collections.abc import Sequence

import xxhash

from dynamo_lite.protocol import AllBlocksCleared, BlockRemoved, BlockStored, KvEvent

MEDIUM_GPU = "GPU"  # vLLM's `medium` for blocks in device memory
_ROOT_PARENT = b"\x00" * 8


def hash_block(parent: int | None, token_ids: Sequence[int], seed: int = 0) -> int:
    """Chained xxh64 of one full block: the parent's hash, then the token ids."""
    prefix = _ROOT_PARENT if parent is None else parent.to_bytes(8, "little")
    return xxhash.xxh64_intdigest(prefix + array("q", token_ids).tobytes(), seed)


def hash_blocks(token_ids: Sequence[int], block_size: int, seed: int = 0, parent: int | None = None) -> list[int]:
    """Hashes of every full block of `token_ids`, chained from `parent`."""
    hashes: list[int] = []
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        parent = hash_block(parent, token_ids[start : start + block_size], seed)
        hashes.append(parent)
    return hashes


class Block:
    """One KV block. `block_hash` is set while it is in the prefix cache."""

    __slots__ = ("block_id", "ref_count", "block_hash")

    def __init__(self, block_id: int) -> None:
        self.block_id = block_id
        self.ref_count = 0
        self.block_hash: int | None = None


class BlockPool:
    """`num_blocks` blocks of `block_size` tokens, shared by all sequences."""

    def __init__(self, num_blocks: int, block_size: int, enable_caching: bool = True) -> None:
        if num_blocks <= 0 or block_size <= 0:
            raise ValueError("num_blocks and block_size must be positive")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_caching = enable_caching
        self._blocks: list[Block] = []  # created on first use, block_id == index
        self._uncached_free: list[int] = []  # free blocks holding nothing reusable
        self._evictable: OrderedDict[int, None] = OrderedDict()  # free cached blocks, LRU first
        self._cached: dict[int, Block] = {}  # block hash -> block
        self._num_used = 0  # blocks with ref_count > 0
        self._events: list[KvEvent] = []

    # --- queries (no side effects) -------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        """Blocks that an allocation can take now (cached-but-unreferenced included)."""
        return self.num_blocks - self._num_used

    @property
    def num_used_blocks(self) -> int:
        return self._num_used

    @property
    def usage(self) -> float:
        """vLLM's kv_cache_usage_perc: referenced blocks / all blocks."""
        return self._num_used / self.num_blocks

    @property
    def num_cached_blocks(self) -> int:
        return len(self._cached)

    def lookup_prefix(self, block_hashes: Sequence[int]) -> list[Block]:
        """The cached blocks that match the longest prefix of `block_hashes`."""
        if not self.enable_caching:
            return []
        hits: list[Block] = []
        for block_hash in block_hashes:
            block = self._cached.get(block_hash)
            if block is None:
                break
            hits.append(block)
        return hits

    def is_cached(self, block_hash: int) -> bool:
        return block_hash in self._cached

    # --- mutations -------------------------------------------------------------
    def touch(self, blocks: Sequence[Block]) -> None:
        """Take a reference on cache hits (removing free ones from the LRU)."""
        for block in blocks:
            if block.ref_count == 0:
                self._evictable.pop(block.block_id, None)
                self._num_used += 1
            block.ref_count += 1

    def allocate(self, count: int) -> list[Block] | None:
        """`count` fresh blocks with one reference each, or None (nothing taken)."""
        if count > self.num_free_blocks:
            return None
        blocks = [self._take_free_block() for _ in range(count)]
        for block in blocks:
            block.ref_count = 1
        self._num_used += count
        return blocks

    def free(self, blocks: Sequence[Block]) -> None:
        """Drop one reference per block; the tail of a sequence becomes LRU first."""
        for block in reversed(blocks):
            block.ref_count -= 1
            if block.ref_count > 0:
                continue
            self._num_used -= 1
            if block.block_hash is None:
                self._uncached_free.append(block.block_id)
            else:
                self._evictable[block.block_id] = None

    def cache_blocks(
        self, blocks: Sequence[Block], block_hashes: Sequence[int], parent_hash: int | None, token_ids: Sequence[int]
    ) -> None:
        """Register newly full blocks under their hashes; one BlockStored per new run.

        `token_ids` holds exactly len(blocks) * block_size tokens. A block whose
        hash is already cached (computed twice concurrently) stays uncached.
        """
        if not self.enable_caching or not blocks:
            return
        bs = self.block_size
        chain: list[int] = []  # hashes of the contiguous run being stored
        chain_tokens: list[int] = []
        for i, (block, block_hash) in enumerate(zip(blocks, block_hashes, strict=True)):
            if block.block_hash is not None or block_hash in self._cached:
                self._emit_stored(chain, parent_hash, chain_tokens)
                chain, chain_tokens, parent_hash = [], [], block_hash
                continue
            block.block_hash = block_hash
            self._cached[block_hash] = block
            chain.append(block_hash)
            chain_tokens.extend(token_ids[i * bs : (i + 1) * bs])
        self._emit_stored(chain, parent_hash, chain_tokens)

    def reset_prefix_cache(self) -> bool:
        """Forget every cached block; only possible when no block is referenced."""
        if self._num_used > 0:
            return False
        for block in self._cached.values():
            block.block_hash = None
            self._uncached_free.append(block.block_id)
        self._cached.clear()
        self._evictable.clear()
        self._events.append(AllBlocksCleared())
        return True

    def take_events(self) -> list[KvEvent]:
        """Drain the events emitted since the last call."""
        events, self._events = self._events, []
        return events

    # --- internals ---------------------------------------------------------------
    def _emit_stored(self, block_hashes: list[int], parent_hash: int | None, token_ids: list[int]) -> None:
        if block_hashes:
            self._events.append(
                BlockStored(
                    block_hashes=block_hashes,
                    parent_block_hash=parent_hash,
                    token_ids=token_ids,
                    block_size=self.block_size,
                    medium=MEDIUM_GPU,
                )
            )

    def _take_free_block(self) -> Block:
        if self._uncached_free:
            return self._blocks[self._uncached_free.pop()]
        if len(self._blocks) < self.num_blocks:
            block = Block(len(self._blocks))
            self._blocks.append(block)
            return block
        block_id, _ = self._evictable.popitem(last=False)
        block = self._blocks[block_id]
        self._evict(block)
        return block

    def _evict(self, block: Block) -> None:
        assert block.block_hash is not None
        del self._cached[block.block_hash]
        self._events.append(BlockRemoved(block_hashes=[block.block_hash], medium=MEDIUM_GPU))
        block.block_hash = None
