"""Continuous batching over the block pool, one forward pass at a time.

Pure (no I/O, no clock: `now` is passed in). Each pass, like vLLM v1:
1. running sequences first, one token each for decode, a chunk for a prompt
   still being prefilled, within a token budget (chunked prefill); when a
   sequence needs a block and none is free, the most recently admitted running
   sequence is preempted (LIFO; its KV is dropped and recomputed later);
2. then waiting sequences in arrival order while the budget, `max_num_seqs`
   and free blocks allow, each starting after its longest cached prefix;
3. a sequence given remote KV (`do_remote_prefill`) first holds blocks for its
   whole prompt while the transfer runs, then recomputes only its last token.
`schedule()` plans a pass; `finish_step()` applies it when its time is over.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from dynamo_lite.engines.mock.blocks import BlockPool
from dynamo_lite.engines.mock.sequence import FinishReason, SeqStatus, Sequence
from dynamo_lite.engines.mock.timing import StepLoad


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    block_size: int = 16
    num_gpu_blocks: int = 16384
    max_num_seqs: int = 256  # running sequences per pass
    max_num_batched_tokens: int = 8192  # token budget per pass
    max_model_len: int = 131072  # prompt + output tokens
    enable_prefix_caching: bool = True
    hash_seed: int = 0  # seed of the chained block hashes
    kv_bytes_per_token: int = 131072  # bytes a KV transfer ships per token
    kv_transfer_bandwidth: float = 25e9  # bytes/s of a KV transfer (NIXL)


@dataclass(slots=True)
class StepPlan:
    """One pass: what runs, what it costs, and what changed while planning it."""

    scheduled: list[tuple[Sequence, int]] = field(default_factory=list)  # (sequence, new tokens)
    load: StepLoad = StepLoad()
    admitted: list[Sequence] = field(default_factory=list)  # first admission (prompt accounting)
    kv_received: list[Sequence] = field(default_factory=list)  # remote KV arrived before this pass
    num_preempted: int = 0

    @property
    def empty(self) -> bool:
        return not self.scheduled


@dataclass(frozen=True, slots=True)
class SeqOutput:
    """A token sampled at the end of a pass."""

    seq: Sequence
    token_id: int
    finish_reason: FinishReason | None
    prev_token_at: float | None  # when the previous token came (None for the first)


class Scheduler:
    def __init__(self, config: SchedulerConfig, pool: BlockPool | None = None) -> None:
        self.config = config
        self.pool = pool or BlockPool(config.num_gpu_blocks, config.block_size, config.enable_prefix_caching)
        self.running: list[Sequence] = []
        self.waiting: list[Sequence] = []
        self._seqs: dict[str, Sequence] = {}

    # --- queries -------------------------------------------------------------
    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    def next_kv_ready_at(self) -> float | None:
        """Earliest completion of a KV transfer still in flight, if any."""
        times = [s.kv_ready_at for s in self.waiting if s.status is SeqStatus.WAITING_FOR_KV]
        return min(times, default=None)

    def transfer_seconds(self, num_tokens: int) -> float:
        return num_tokens * self.config.kv_bytes_per_token / self.config.kv_transfer_bandwidth

    # --- requests ------------------------------------------------------------
    def add(self, seq: Sequence) -> None:
        if seq.request_id in self._seqs:
            raise ValueError(f"duplicate request id {seq.request_id}")
        self._seqs[seq.request_id] = seq
        self.waiting.append(seq)

    def abort(self, request_id: str, reason: FinishReason = FinishReason.ABORT) -> Sequence | None:
        """Drop a request wherever it is; its blocks go back to the pool (`reason` STOP: a stop string)."""
        seq = self._seqs.get(request_id)
        if seq is None:
            return None
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        self._finish(seq, reason)
        return seq

    # --- one pass ---------------------------------------------------------------
    def schedule(self, now: float) -> StepPlan:
        plan = StepPlan()
        budget = self._schedule_running(plan, self.config.max_num_batched_tokens)
        if plan.num_preempted == 0:
            self._schedule_waiting(plan, budget, now)
        plan.load = self._load(plan.scheduled)
        return plan

    def finish_step(self, plan: StepPlan, now: float) -> list[SeqOutput]:
        """Apply a planned pass that ended at `now`: advance, cache, sample, finish."""
        outputs: list[SeqOutput] = []
        for seq, num_new in plan.scheduled:
            if seq.status is not SeqStatus.RUNNING:
                continue  # aborted while the pass ran
            seq.num_computed += num_new
            self._cache_full_blocks(seq)
            if seq.num_computed < seq.num_tokens:
                continue  # a chunk of a longer prefill
            outputs.append(self._sample(seq, now))
        return outputs

    # --- internals: planning ---------------------------------------------------
    def _schedule_running(self, plan: StepPlan, budget: int) -> int:
        i = 0
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            num_new = min(seq.num_tokens - seq.num_computed, budget)
            if not self._make_room(seq, seq.num_computed + num_new, plan):
                break  # seq itself was preempted, and every one after it
            plan.scheduled.append((seq, num_new))
            budget -= num_new
            i += 1
        return budget

    def _make_room(self, seq: Sequence, num_tokens: int, plan: StepPlan) -> bool:
        """Give `seq` blocks for `num_tokens`, preempting from the back; False if seq went."""
        while True:
            missing = self._blocks_for(num_tokens) - len(seq.blocks)
            if missing <= 0:
                return True
            blocks = self.pool.allocate(missing)
            if blocks is not None:
                seq.blocks.extend(blocks)
                return True
            victim = self.running.pop()
            self._preempt(victim)
            plan.num_preempted += 1
            if victim is seq:
                return False

    def _schedule_waiting(self, plan: StepPlan, budget: int, now: float) -> None:
        i = 0
        while i < len(self.waiting) and budget > 0 and len(self.running) < self.config.max_num_seqs:
            seq = self.waiting[i]
            if seq.status is SeqStatus.WAITING_FOR_KV:
                if now < seq.kv_ready_at:
                    i += 1
                    continue
                self._receive_kv(seq)
                plan.kv_received.append(seq)
            elif not self._admit(seq, budget, now, plan):
                break  # first come, first served: no overtaking for blocks
            if seq.status is SeqStatus.WAITING_FOR_KV:
                i += 1
                continue
            del self.waiting[i]
            seq.status = SeqStatus.RUNNING
            self.running.append(seq)
            num_new = min(seq.num_tokens - seq.num_computed, budget)
            plan.scheduled.append((seq, num_new))
            budget -= num_new
            if seq.scheduled_at is None:
                seq.scheduled_at = now

    def _admit(self, seq: Sequence, budget: int, now: float, plan: StepPlan) -> bool:
        """Find the cached prefix and allocate; False (nothing changed) if blocks lack."""
        bs = self.config.block_size
        max_hit_blocks = (seq.num_tokens - 1) // bs  # at least one token is computed
        hits = self.pool.lookup_prefix(seq.hashes_up_to(max_hit_blocks, bs, self.config.hash_seed)[:max_hit_blocks])
        num_cached = len(hits) * bs
        remote = seq.remote_kv is not None and not seq.kv_loaded
        target = len(seq.prompt) if remote else num_cached + min(seq.num_tokens - num_cached, budget)
        missing = self._blocks_for(target) - len(hits)
        free_after_hits = self.pool.num_free_blocks - sum(1 for b in hits if b.ref_count == 0)
        if missing > free_after_hits:
            return False
        self.pool.touch(hits)
        seq.blocks = hits + (self.pool.allocate(missing) or [])
        seq.num_computed = num_cached
        seq.num_cached_blocks = len(hits)
        if not seq.prefix_queried:
            seq.prefix_queried = True
            seq.num_local_cached = num_cached
            plan.admitted.append(seq)
        if remote:
            seq.num_external = len(seq.prompt) - num_cached
            seq.status = SeqStatus.WAITING_FOR_KV
            seq.kv_ready_at = now + self.transfer_seconds(seq.num_external)
        return True

    def _receive_kv(self, seq: Sequence) -> None:
        """The transfer is done: all but the last prompt token are computed."""
        seq.kv_loaded = True
        seq.num_computed = len(seq.prompt) - 1
        self._cache_full_blocks(seq)
        seq.status = SeqStatus.WAITING

    def _preempt(self, seq: Sequence) -> None:
        self.pool.free(seq.blocks)
        seq.blocks = []
        seq.num_computed = 0
        seq.num_cached_blocks = 0
        seq.num_preemptions += 1
        seq.status = SeqStatus.WAITING
        self.waiting.insert(0, seq)

    def _blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.config.block_size)

    def _load(self, scheduled: Iterable[tuple[Sequence, int]]) -> StepLoad:
        def chunk(seq: Sequence, n: int) -> tuple[int, int, bool, bool]:
            ctx = seq.num_computed
            is_decode = n == 1 and ctx == seq.num_tokens - 1 and bool(seq.output or seq.kv_loaded)
            return ctx, n, is_decode, ctx + n == seq.num_tokens

        return step_load((chunk(seq, n) for seq, n in scheduled), self.pool.num_used_blocks, self.pool.num_blocks)

    # --- internals: applying a pass ---------------------------------------------
    def _cache_full_blocks(self, seq: Sequence) -> None:
        bs = self.config.block_size
        full = min(seq.num_computed // bs, len(seq.blocks))
        start = seq.num_cached_blocks
        if full <= start:
            return
        hashes = seq.hashes_up_to(full, bs, self.config.hash_seed)
        parent = hashes[start - 1] if start > 0 else None
        tokens = seq.token_slice(start * bs, full * bs)
        self.pool.cache_blocks(seq.blocks[start:full], hashes[start:full], parent, tokens)
        seq.num_cached_blocks = full

    def _sample(self, seq: Sequence, now: float) -> SeqOutput:
        token = seq.next_output_token()
        seq.output.append(token)
        prev, seq.last_token_at = seq.last_token_at, now
        if seq.first_token_at is None:
            seq.first_token_at = now
        reason = None
        if seq.stops_at(token):
            reason = FinishReason.STOP
        elif len(seq.output) >= seq.max_tokens or seq.num_tokens >= self.config.max_model_len:
            reason = FinishReason.LENGTH
        if reason is not None:
            self.running.remove(seq)
            self._finish(seq, reason)
        return SeqOutput(seq=seq, token_id=token, finish_reason=reason, prev_token_at=prev)

    def _finish(self, seq: Sequence, reason: FinishReason) -> None:
        if seq.for_remote_decode:
            seq.final_block_ids = [b.block_id for b in seq.blocks]
        self.pool.free(seq.blocks)
        seq.blocks = []
        seq.status = SeqStatus.FINISHED
        seq.finish_reason = reason
        self._seqs.pop(seq.request_id, None)


def step_load(chunks: Iterable[tuple[int, int, bool, bool]], active_blocks: int, total_blocks: int) -> StepLoad:
    """What a pass computes, from its chunks: (context tokens, new tokens, a decode, samples a token)."""
    prefill = attn = prefill_ctx = decode = decode_ctx = 0
    emits = False
    for ctx, n, is_decode, samples in chunks:
        emits = emits or samples
        if is_decode:
            decode += 1
            decode_ctx += ctx
        else:
            prefill += n
            attn += n * ctx + n * (n + 1) // 2
            prefill_ctx += ctx
    return StepLoad(
        prefill_tokens=prefill,
        prefill_attn_pairs=attn,
        prefill_context_tokens=prefill_ctx,
        decode_seqs=decode,
        decode_context_tokens=decode_ctx,
        emits_token=emits,
        active_blocks=active_blocks,
        total_blocks=total_blocks,
    )
