"""Block hashing: the router's own chained xxh64 over full blocks of token ids.

Contract
--------
A prompt of ``n`` tokens has ``n // block_size`` full blocks; a trailing partial
block is never hashed (engines cache only full blocks). Block ``i``'s hash is

    h_i = xxh64(le_uint32_bytes(tokens[i*bs:(i+1)*bs]), seed=h_{i-1}),  h_{-1} = root_seed

so a hash names the whole prefix up to and including its block (two equal
hashes mean an equal prefix, up to 64-bit collisions). The parent hash enters as
the xxh64 seed rather than as 8 prepended bytes: the same chaining, cheaper in
CPython because no bytes object is built per block (about a third less time for
an 8k-token prompt, measured here).

The same function hashes requests (in `Router.route`) and the ``token_ids``
carried by engines' ``BlockStored`` events, so the index never depends on the
engine's own hash function or its hash seed. Token ids must fit in 32 bits
(every tokenizer vocabulary does).
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Sequence
from functools import lru_cache

import xxhash

from router.types import BlockHash

ROOT_SEED: BlockHash = BlockHash(0)
"""Parent hash of a sequence's first block, unless a caller passes another root."""

_xxh64 = xxhash.xxh64_intdigest
_BYTES_PER_TOKEN = 4


def tokens_to_bytes(token_ids: Sequence[int]) -> bytes:
    """Little-endian uint32 encoding of ``token_ids``; OverflowError if one is outside [0, 2**32)."""
    arr = array("I", token_ids)
    if sys.byteorder != "little":  # hashes must not depend on the host
        arr.byteswap()
    return arr.tobytes()


@lru_cache(maxsize=256)
def _splitter(num_blocks: int, block_bytes: int) -> struct.Struct:
    """A Struct that cuts ``num_blocks`` blocks into bytes objects in one C call (faster than slicing)."""
    return struct.Struct(f"{block_bytes}s" * num_blocks)


def hash_blocks(
    token_ids: Sequence[int],
    block_size: int,
    parent: BlockHash = ROOT_SEED,
) -> list[BlockHash]:
    """Chained hashes of the full blocks of ``token_ids``, continuing from ``parent``.

    ``parent`` is the hash of the block just before ``token_ids[0]`` (the root
    seed for a sequence's start); ``BlockStored`` events that extend a cached
    prefix pass the router hash of their parent block here. Returns one hash per
    full block, in order; the empty list when fewer than ``block_size`` tokens.
    """
    if block_size <= 0:
        raise ValueError(f"block_size must be positive, got {block_size}")
    num_blocks = len(token_ids) // block_size
    if num_blocks == 0:
        return []
    full = num_blocks * block_size
    data = tokens_to_bytes(token_ids if len(token_ids) == full else token_ids[:full])
    return _chain(_splitter(num_blocks, block_size * _BYTES_PER_TOKEN).unpack(data), parent)


def hash_bytes_blocks(data: bytes, block_size: int, parent: BlockHash = ROOT_SEED) -> list[BlockHash]:
    """Like `hash_blocks` for tokens already encoded with `tokens_to_bytes` (simulators reuse encodings)."""
    step = block_size * _BYTES_PER_TOKEN
    num_blocks = len(data) // step
    if num_blocks == 0:
        return []
    return _chain(_splitter(num_blocks, step).unpack(data[: num_blocks * step]), parent)


def _chain(blocks: Sequence[bytes], parent: int) -> list[BlockHash]:
    h = parent
    # One comprehension with a walrus: the chain in a single loop body.
    return [h := _xxh64(b, h) for b in blocks]  # type: ignore[misc]
