"""KV-event ingestion: vLLM's event batches -> `KvIndex` updates, with sequence hygiene.

Contract
--------
`KvEventIngestor.apply(worker_id, seq, batch)` is called once per batch in the
order the relay delivers them. Per worker it tracks the next expected sequence
number (the engine's ZMQ sequence, carried in `RelayedKvEvents.seq`):

- first batch of a worker (or after `resync`): any ``seq`` is the baseline;
- ``seq`` below the expected one: a duplicate (a replay overlap), ignored;
- ``seq`` above it: a gap; events were lost, so the worker's blocks are cleared
  (no stale entries can attract requests) and the batch is applied as a new
  baseline. The outcome says ``needs_resync``; a consumer that can replay calls
  `resync` and feeds the engine's replay buffer from its oldest sequence,
  one that cannot keeps feeding live batches and the index re-learns as blocks
  are stored.

`load_snapshot(worker_id, seq, batches)` replaces a worker's blocks with a
snapshot that is consistent with its batch ``seq`` (a worker agent's view, for a
router that starts after the blocks were stored): the next batch expected is
``seq + 1``.

Events for workers not registered with the index are ignored (a late batch must
not resurrect a worker that discovery dropped).

``BlockStored`` blocks are re-hashed with the router's chained hash from their
``token_ids``: the parent's router hash comes from the worker's engine-hash map,
so a store whose parent the index does not know cannot be chained and is
counted as orphaned. A store whose block size differs from the router's, or
whose ``token_ids`` do not cover its blocks exactly, is rejected. ``lora_id`` is
ignored: requests carry no adapter, so adapter blocks would match base prompts
(a known limitation).
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Iterable
from dataclasses import dataclass

from router.hashing import ROOT_SEED, hash_blocks
from router.index import KvIndex
from router.types import (
    AllBlocksCleared,
    BlockHash,
    BlockRemoved,
    BlockStored,
    KvEventBatch,
    WorkerId,
)

log = logging.getLogger(__name__)


class SeqStatus(enum.StrEnum):
    APPLIED = "applied"  # in sequence (or the baseline) and applied
    DUPLICATE = "duplicate"  # already seen; ignored
    GAP = "gap"  # events lost before this batch: worker cleared, batch applied as new baseline
    UNKNOWN_WORKER = "unknown_worker"  # worker not registered; ignored


@dataclass(frozen=True, slots=True)
class EventOutcome:
    """What one batch did to the index."""

    status: SeqStatus
    missed_from: int | None = None  # first lost sequence number, on a gap
    stored: int = 0  # blocks stored
    removed: int = 0  # blocks removed
    orphaned: int = 0  # stored blocks dropped: parent unknown to the index
    rejected: int = 0  # stored blocks dropped: wrong block size or token count
    unknown_removed: int = 0  # removals of blocks the index did not hold

    @property
    def needs_resync(self) -> bool:
        """True when events were lost and a replay would restore what was cleared."""
        return self.status is SeqStatus.GAP


@dataclass(slots=True)
class _Tally:
    stored: int = 0
    removed: int = 0
    orphaned: int = 0
    rejected: int = 0
    unknown_removed: int = 0

    def outcome(self, status: SeqStatus, missed_from: int | None = None) -> EventOutcome:
        return EventOutcome(status, missed_from, self.stored, self.removed, self.orphaned, self.rejected,
                            self.unknown_removed)


class KvEventIngestor:
    """Applies engines' KV event batches to one `KvIndex`."""

    def __init__(self, index: KvIndex, block_size: int, root_seed: BlockHash = ROOT_SEED) -> None:
        self._index = index
        self._block_size = block_size
        self._root = root_seed
        self._next_seq: dict[WorkerId, int] = {}

    def apply(self, worker_id: WorkerId, seq: int, batch: KvEventBatch) -> EventOutcome:
        """Apply one batch; see the module docstring for the sequencing rules."""
        if not self._index.has_worker(worker_id):
            return EventOutcome(SeqStatus.UNKNOWN_WORKER)
        expected = self._next_seq.get(worker_id)
        if expected is not None and seq < expected:
            return EventOutcome(SeqStatus.DUPLICATE)
        status, missed = SeqStatus.APPLIED, None
        if expected is not None and seq > expected:
            status, missed = SeqStatus.GAP, expected
            cleared = self._index.clear_worker(worker_id)
            log.warning(
                "kv events gap worker=%s expected=%d got=%d: cleared %d blocks", worker_id, expected, seq, cleared
            )
        self._next_seq[worker_id] = seq + 1
        tally = _Tally()
        for event in batch.events:
            self._apply_event(worker_id, event, tally)
        return tally.outcome(status, missed)

    def load_snapshot(self, worker_id: WorkerId, seq: int, batches: Iterable[KvEventBatch]) -> EventOutcome:
        """Replace a worker's blocks with a snapshot of them consistent with its batch ``seq``.

        The snapshot's batches are applied as one baseline; the next batch expected is
        ``seq + 1`` (older ones are duplicates). ``seq < 0``: the snapshot is of no batch
        (empty), and the next batch of any sequence is the baseline.
        """
        if not self._index.has_worker(worker_id):
            return EventOutcome(SeqStatus.UNKNOWN_WORKER)
        self.resync(worker_id)
        tally = _Tally()
        for batch in batches:
            for event in batch.events:
                self._apply_event(worker_id, event, tally)
        if seq >= 0:
            self._next_seq[worker_id] = seq + 1
        return tally.outcome(SeqStatus.APPLIED)

    def resync(self, worker_id: WorkerId) -> None:
        """Clear a worker's blocks and accept its next batch of any sequence as the baseline."""
        self._index.clear_worker(worker_id)
        self._next_seq.pop(worker_id, None)

    def forget(self, worker_id: WorkerId) -> None:
        """Drop a removed worker's sequence state (the index entry is the caller's)."""
        self._next_seq.pop(worker_id, None)

    def _apply_event(self, worker_id: WorkerId, event: object, tally: _Tally) -> None:
        if isinstance(event, BlockStored):
            self._store(worker_id, event, tally)
        elif isinstance(event, BlockRemoved):
            unknown = self._index.remove(worker_id, event.block_hashes)
            tally.removed += len(event.block_hashes) - unknown
            tally.unknown_removed += unknown
        elif isinstance(event, AllBlocksCleared):
            self._index.clear_worker(worker_id)
        else:  # a newer vLLM event type: skip rather than fail the batch
            log.debug("ignoring kv event %s from worker=%s", type(event).__name__, worker_id)

    def _store(self, worker_id: WorkerId, event: BlockStored, tally: _Tally) -> None:
        n = len(event.block_hashes)
        bs = self._block_size
        if event.block_size != bs or len(event.token_ids) != n * bs:
            tally.rejected += n
            return
        parent: BlockHash | None = None
        if event.parent_block_hash is not None:
            parent = self._index.router_hash_of(worker_id, event.parent_block_hash)
            if parent is None:
                tally.orphaned += n
                return
        router_hashes = hash_blocks(event.token_ids, bs, self._root if parent is None else parent)
        self._index.store(worker_id, event.block_hashes, router_hashes, parent)
        tally.stored += n
