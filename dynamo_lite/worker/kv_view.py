"""What one engine's prefix cache holds now, as its relayed KV events tell it: the agent's copy,
served as a snapshot to frontends that start (or restart) after the blocks were stored.

Pure (no I/O). The agent feeds `KvView.apply` every batch it relays, in relay order; the view
keeps, per engine block hash, its parent hash, token ids and block size, in insertion order
(a block's parent is always stored before it), and how many physical copies the engine has
(vLLM stores a block twice when it recomputes it; each copy is removed on its own). It
follows the router's sequencing rules (router/events.py), so that a snapshot equals what a
router that saw every batch holds: a batch with a sequence number not above the last one is
a duplicate and ignored; one above the next expected is a gap, and the view is cleared
before applying it (the lost batches may have removed anything).

`snapshot()` renders the view as `KvEventBatch`es of `BlockStored` events, chained runs
merged into one event, each batch's JSON encoding at most `max_bytes`, consistent with
`seq`: applied as a baseline, then followed by the live batches after `seq`, they give the
engine's current cache. A block whose parent was evicted and stored again after it comes
after its parent; one whose parent is gone is left out (a router cannot chain it either).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import msgspec

from dynamo_lite.protocol import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KvEventBatch,
    RelayedKvEvents,
)

SNAPSHOT_CHUNK_BYTES = 256 * 1024
"""Largest JSON encoding of one snapshot batch: well under NATS's default 1 MB max_payload."""
_EVENT_OVERHEAD = 256  # bytes of one BlockStored's JSON besides its hashes and tokens (field names, sizes)


@dataclass(slots=True)
class _Block:
    parent: int | None  # engine hash of the block before, None at a sequence's start
    token_ids: list[int]
    block_size: int
    copies: int = 1


class KvView:
    """One engine's cached blocks, rebuilt from its KV events; see the module docstring."""

    def __init__(self) -> None:
        self._blocks: dict[int, _Block] = {}  # engine hash -> block, in insertion order
        self.seq: int | None = None
        """Sequence number of the last batch applied; None before the first."""
        self._rendered: tuple[int, list[KvEventBatch]] | None = None  # (max_bytes, batches) since the last change

    def __len__(self) -> int:
        return len(self._blocks)

    def apply(self, relayed: RelayedKvEvents) -> None:
        """Fold in one relayed batch (duplicates ignored, a gap clears the view first)."""
        seq = relayed.seq
        if self.seq is not None:
            if seq <= self.seq:
                return
            if seq > self.seq + 1:
                self._blocks.clear()
        self.seq = seq
        self._rendered = None
        for event in relayed.batch.events:
            if isinstance(event, BlockStored):
                self._store(event)
            elif isinstance(event, BlockRemoved):
                self._remove(event.block_hashes)
            elif isinstance(event, AllBlocksCleared):
                self._blocks.clear()

    def snapshot(self, max_bytes: int = SNAPSHOT_CHUNK_BYTES) -> list[KvEventBatch]:
        """The view as batches of `BlockStored` (none when empty), each encoding to <= `max_bytes`.

        Rendered again only after a change (frontends that start together get one rendering);
        callers must not modify the batches."""
        if self._rendered is not None and self._rendered[0] == max_bytes:
            return self._rendered[1]
        budget = max_bytes - 2 * _EVENT_OVERHEAD  # room for the batch's own brackets and timestamp
        batches: list[KvEventBatch] = []
        events: list[BlockStored] = []
        size = 0
        for event, event_size in self._events(budget):
            if events and size + event_size > budget:
                batches.append(KvEventBatch(ts=0.0, events=list(events)))
                events.clear()
                size = 0
            events.append(event)
            size += event_size
        if events:
            batches.append(KvEventBatch(ts=0.0, events=events))
        self._rendered = (max_bytes, batches)
        return batches

    def _store(self, event: BlockStored) -> None:
        bs = event.block_size
        parent = event.parent_block_hash
        for i, h in enumerate(event.block_hashes):
            block = self._blocks.get(h)
            if block is not None:
                block.copies += 1
            else:
                self._blocks[h] = _Block(parent, event.token_ids[i * bs : (i + 1) * bs], bs)
            parent = h

    def _remove(self, hashes: list[int]) -> None:
        for h in hashes:
            block = self._blocks.get(h)
            if block is None:
                continue
            block.copies -= 1
            if block.copies == 0:
                del self._blocks[h]

    def _ordered(self) -> Iterator[int]:
        """Hashes with every parent before its children (insertion order, but a child whose parent
        was evicted and stored again after it waits for it); orphans left out."""
        emitted: set[int] = set()
        waiting: dict[int, list[int]] = {}
        for h, block in self._blocks.items():
            parent = block.parent
            if parent is not None and parent not in emitted:
                if parent in self._blocks:
                    waiting.setdefault(parent, []).append(h)
                continue  # else: its parent is gone, a router could not chain it
            ready = [h]
            while ready:
                h = ready.pop()
                emitted.add(h)
                yield h
                ready.extend(reversed(waiting.pop(h, ())))

    def _events(self, budget: int) -> Iterator[tuple[BlockStored, int]]:
        """`BlockStored` events with their estimated encoded size: runs of chained blocks (each
        a child of the one before, of one block size) merged, split to stay within `budget`;
        then one event per extra physical copy."""
        run: list[int] = []
        run_size = 0
        encode = msgspec.json.encode
        extra: list[int] = []
        for h in self._ordered():
            block = self._blocks[h]
            block_size = len(encode(block.token_ids)) + len(str(h)) + 2
            if run and (block.parent != run[-1] or block.block_size != self._blocks[run[0]].block_size
                        or run_size + block_size > budget - _EVENT_OVERHEAD):
                yield self._event(run), run_size + _EVENT_OVERHEAD
                run, run_size = [], 0
            run.append(h)
            run_size += block_size
            extra.extend([h] * (block.copies - 1))
        if run:
            yield self._event(run), run_size + _EVENT_OVERHEAD
        for h in extra:
            block = self._blocks[h]
            yield self._event([h]), len(encode(block.token_ids)) + len(str(h)) + _EVENT_OVERHEAD

    def _event(self, run: list[int]) -> BlockStored:
        first = self._blocks[run[0]]
        tokens = [t for h in run for t in self._blocks[h].token_ids]
        return BlockStored(block_hashes=list(run), parent_block_hash=first.parent, token_ids=tokens,
                           block_size=first.block_size)
