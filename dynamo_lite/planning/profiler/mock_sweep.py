"""Sweep the mock engine's pure core (scheduler + timing model) in simulated time.

Fast and deterministic: no server, no wall clock. What it measures is what a
mock worker started with the same settings does, so the shipped profile matches
the mock fleet the planner tests and the simulation benchmark run.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable

from dynamo_lite.engines.mock.scheduler import Scheduler, SchedulerConfig
from dynamo_lite.engines.mock.sequence import Sequence
from dynamo_lite.engines.mock.timing import TimingModel
from planner.profile import DecodePoint, EngineProfile, PrefillPoint

_ids = itertools.count()


def _seq(isl: int, max_tokens: int) -> Sequence:
    """A request with a prompt no other shares (unique block hashes: no prefix hits)."""
    n = next(_ids)
    blocks = isl // 16
    return Sequence(request_id=f"s{n}", prompt=[1] * isl, max_tokens=max_tokens, output_key=n, arrival=0.0,
                    prompt_hashes=[hash((n, i)) & 0x7FFFFFFFFFFFFFFF for i in range(blocks)])


def _run(sched: Scheduler, timing: TimingModel, now: float, until_tokens: int | None = None) -> tuple[float, list[float]]:
    """Run passes until idle (or until every running sequence has `until_tokens` outputs);
    returns the time and each decode-only pass's duration."""
    decode_steps: list[float] = []
    while sched.has_work():
        if until_tokens is not None and not sched.waiting and all(len(s.output) >= until_tokens for s in sched.running):
            break
        plan = sched.schedule(now)
        dt = timing.step_seconds(plan.load)
        now += dt
        sched.finish_step(plan, now)
        sched.pool.take_events()
        if plan.load.prefill_tokens == 0 and plan.load.decode_seqs > 0:
            decode_steps.append(dt)
    return now, decode_steps


def prefill_point(config: SchedulerConfig, timing: TimingModel, isl: int, batch: int = 16) -> PrefillPoint:
    lone = Scheduler(config)
    seq = _seq(isl, 1)
    lone.add(seq)
    _run(lone, timing, 0.0)
    assert seq.first_token_at is not None
    busy = Scheduler(config)
    for _ in range(batch):
        busy.add(_seq(isl, 1))
    end, _ = _run(busy, timing, 0.0)
    return PrefillPoint(isl=isl, ttft_s=seq.first_token_at, throughput_tps=batch * isl / end)


def decode_point(config: SchedulerConfig, timing: TimingModel, context: int, concurrency: int,
                 steps: int = 32) -> DecodePoint | None:
    """None when `concurrency` sequences of `context` tokens do not fit in the KV cache."""
    if concurrency * (context + steps + config.block_size) > config.num_gpu_blocks * config.block_size:
        return None
    sched = Scheduler(config)
    for _ in range(concurrency):
        sched.add(_seq(context, steps + 2))
    now, _ = _run(sched, timing, 0.0, until_tokens=1)  # prefill everything first
    _, decode_steps = _run(sched, timing, now)
    decode_steps = decode_steps[: steps]
    itl = sum(decode_steps) / len(decode_steps)
    return DecodePoint(context=context, concurrency=concurrency, itl_s=itl, throughput_tps=concurrency / itl)


def sweep(config: SchedulerConfig, timing: TimingModel, engine: str, isls: Iterable[int], contexts: Iterable[int],
          concurrencies: Iterable[int], progress=print) -> EngineProfile:  # noqa: ANN001
    prefill = []
    for isl in isls:
        prefill.append(prefill_point(config, timing, isl))
        progress(f"prefill isl={isl}: ttft {prefill[-1].ttft_s * 1000:.1f} ms, {prefill[-1].throughput_tps:.0f} tok/s")
    decode = []
    for context in contexts:
        for c in concurrencies:
            point = decode_point(config, timing, context, c)
            if point is None:
                break
            decode.append(point)
        progress(f"decode context={context}: {len([p for p in decode if p.context == context])} points")
    return EngineProfile(engine=engine, prefill=prefill, decode=decode,
                         kv_capacity_tokens=config.num_gpu_blocks * config.block_size,
                         meta={"source": "dynamo_lite.planning.profiler mock sweep (simulated time)"})
