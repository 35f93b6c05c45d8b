"""Scheduler: continuous batching, chunked prefill, prefix hits, preemption, remote KV."""

from __future__ import annotations

from dynamo_lite.engines.mock.blocks import hash_blocks
from dynamo_lite.engines.mock.scheduler import Scheduler, SchedulerConfig, SeqOutput
from dynamo_lite.engines.mock.sequence import FinishReason, RemoteKv, Sequence, SeqStatus, output_key
from dynamo_lite.protocol import BlockRemoved, BlockStored

BS = 4


def make_seq(rid: str, prompt: list[int], max_tokens: int = 4, **kw: object) -> Sequence:
    return Sequence(
        request_id=rid, prompt=prompt, max_tokens=max_tokens, output_key=output_key(0, prompt), arrival=0.0,
        prompt_hashes=hash_blocks(prompt, BS), **kw,  # type: ignore[arg-type]
    )  # fmt: skip


def run(sched: Scheduler, max_steps: int = 1000, dt: float = 0.01) -> list[SeqOutput]:
    """Step until idle with a fixed pass duration; returns every sampled token."""
    now, outs = 0.0, []
    for _ in range(max_steps):
        if not sched.has_work():
            return outs
        plan = sched.schedule(now)
        if plan.empty:
            now = sched.next_kv_ready_at() or now + dt
            continue
        now += dt
        outs += sched.finish_step(plan, now)
    raise AssertionError("did not finish")


def test_one_request_prefills_then_decodes_to_max_tokens() -> None:
    sched = Scheduler(SchedulerConfig(block_size=BS, num_gpu_blocks=16))
    seq = make_seq("a", list(range(10)), max_tokens=3)
    sched.add(seq)
    plan = sched.schedule(0.0)
    assert [(s.request_id, n) for s, n in plan.scheduled] == [("a", 10)]
    assert plan.load.prefill_tokens == 10 and plan.load.emits_token
    outs = sched.finish_step(plan, 0.01) + run(sched)
    assert [o.finish_reason for o in outs] == [None, None, FinishReason.LENGTH]  # prefill samples the first
    assert len(seq.output) == 3 and seq.status is SeqStatus.FINISHED
    assert sched.pool.num_used_blocks == 0


def test_outputs_are_deterministic_and_stop_on_a_token() -> None:
    def tokens(stop: frozenset[int] = frozenset()) -> list[int]:
        sched = Scheduler(SchedulerConfig(block_size=BS, num_gpu_blocks=16))
        seq = make_seq("a", [1, 2, 3], max_tokens=6, stop_token_ids=stop)
        sched.add(seq)
        run(sched)
        return seq.output

    full = tokens()
    assert full == tokens() and len(full) == 6
    stopped = tokens(frozenset({full[2]}))
    assert stopped == full[:3]


def test_chunked_prefill_respects_the_token_budget() -> None:
    sched = Scheduler(SchedulerConfig(block_size=BS, num_gpu_blocks=64, max_num_batched_tokens=8))
    sched.add(make_seq("a", list(range(20)), max_tokens=1))
    chunks = []
    while sched.has_work():
        plan = sched.schedule(0.0)
        chunks.append(plan.scheduled[0][1])
        assert plan.load.emits_token == (sum(chunks) == 20)
        sched.finish_step(plan, 0.0)
    assert chunks == [8, 8, 4]


def test_decode_runs_alongside_a_new_prefill_within_budget() -> None:
    sched = Scheduler(SchedulerConfig(block_size=BS, num_gpu_blocks=64, max_num_batched_tokens=8))
    sched.add(make_seq("a", [1, 2, 3], max_tokens=5))
    sched.finish_step(sched.schedule(0.0), 0.01)
    sched.add(make_seq("b", list(range(100, 120)), max_tokens=1))
    plan = sched.schedule(0.02)
    assert [(s.request_id, n) for s, n in plan.scheduled] == [("a", 1), ("b", 7)]
    assert plan.load.decode_seqs == 1 and plan.load.prefill_tokens == 7


def test_max_num_seqs_caps_the_batch() -> None:
    sched = Scheduler(SchedulerConfig(block_size=BS, num_gpu_blocks=64, max_num_seqs=2))
    for i in range(3):
        sched.add(make_seq(str(i), [i, i, i]))
    plan = sched.schedule(0.0)
    assert len(plan.scheduled) == 2 and sched.num_waiting == 1


def test_prefix_hit_skips_cached_blocks_but_computes_the_last_token() -> None:
    sched = Scheduler(SchedulerConfig(block_size=BS, num_gpu_blocks=32))
    prompt = list(range(12))
    sched.add(make_seq("a", prompt, max_tokens=1))
    run(sched)
    b = make_seq("b", prompt + [40, 41], max_tokens=1)
    sched.add(b)
    plan = sched.schedule(1.0)
    assert plan.scheduled[0][1] == 2 and b.num_local_cached == 12
    same = make_seq("c", prompt, max_tokens=1)  # fully cached: recompute the last block's tail
    run(sched)
    sched.add(same)
    plan = sched.schedule(2.0)
    assert same.num_local_cached == 8 and plan.scheduled[0][1] == 4


def test_full_blocks_are_stored_once_with_output_tokens_too() -> None:
    sched = Scheduler(SchedulerConfig(block_size=BS, num_gpu_blocks=32))
    seq = make_seq("a", list(range(6)), max_tokens=4)
    sched.add(seq)
    run(sched)
    stored = [h for e in sched.pool.take_events() if isinstance(e, BlockStored) for h in e.block_hashes]
    # 6 prompt + 4 output = 10 tokens, of which 9 have KV computed: two full blocks.
    assert stored == hash_blocks(seq.prompt + seq.output, BS)[:2]


def test_preemption_is_lifo_and_the_victim_recomputes() -> None:
    sched = Scheduler(SchedulerConfig(block_size=BS, num_gpu_blocks=4, enable_prefix_caching=False))
    a, b = make_seq("a", [1] * 4, max_tokens=6), make_seq("b", [2] * 4, max_tokens=6)
    sched.add(a)
    sched.add(b)
    plan = sched.schedule(0.0)  # each takes one block
    sched.finish_step(plan, 0.01)
    preempted = 0
    now = 0.01
    while sched.has_work():
        plan = sched.schedule(now)
        preempted += plan.num_preempted
        now += 0.01
        sched.finish_step(plan, now)
    assert preempted >= 1 and b.num_preemptions >= 1 and a.num_preemptions == 0
    assert len(a.output) == 6 and len(b.output) == 6
    assert sched.pool.num_used_blocks == 0


def test_lru_eviction_makes_room_for_new_prompts() -> None:
    sched = Scheduler(SchedulerConfig(block_size=BS, num_gpu_blocks=4))
    sched.add(make_seq("a", [1] * 9, max_tokens=1))
    run(sched)
    sched.pool.take_events()
    sched.add(make_seq("b", [2] * 9, max_tokens=1))
    run(sched)
    removed = [e for e in sched.pool.take_events() if isinstance(e, BlockRemoved)]
    assert removed and sched.pool.num_cached_blocks <= 4


def test_remote_kv_waits_for_the_transfer_then_computes_one_token() -> None:
    config = SchedulerConfig(block_size=BS, num_gpu_blocks=32, kv_bytes_per_token=1000, kv_transfer_bandwidth=1e6)
    sched = Scheduler(config)
    seq = make_seq("d", list(range(10)), max_tokens=2, remote_kv=RemoteKv(num_tokens=10, engine_id="p"))
    sched.add(seq)
    plan = sched.schedule(0.0)
    assert plan.empty and seq.status is SeqStatus.WAITING_FOR_KV and sched.num_waiting == 1
    assert seq.num_external == 10 and len(seq.blocks) == 3
    ready = sched.next_kv_ready_at()
    assert ready is not None and abs(ready - 0.01) < 1e-9  # 10 tokens x 1000 B / 1 MB/s
    assert sched.schedule(0.005).empty
    plan = sched.schedule(ready)
    assert plan.kv_received == [seq] and plan.scheduled == [(seq, 1)]
    assert plan.load.prefill_tokens == 0 and plan.load.decode_seqs == 1
    stored = [h for e in sched.pool.take_events() if isinstance(e, BlockStored) for h in e.block_hashes]
    assert stored == seq.prompt_hashes  # received blocks enter the prefix cache
    sched.finish_step(plan, ready + 0.01)
    assert len(seq.output) == 1


def test_abort_frees_blocks_wherever_the_request_is() -> None:
    sched = Scheduler(SchedulerConfig(block_size=BS, num_gpu_blocks=32))
    sched.add(make_seq("a", list(range(10)), max_tokens=50))
    plan = sched.schedule(0.0)
    sched.abort("a")
    assert sched.finish_step(plan, 0.01) == []
    assert sched.pool.num_used_blocks == 0 and not sched.has_work()
