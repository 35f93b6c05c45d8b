"""Timing models: roofline monotonicity, and the Dynamo preset against its reference table."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dynamo_lite.engines.mock.blocks import hash_blocks
from dynamo_lite.engines.mock.scheduler import Scheduler, SchedulerConfig
from dynamo_lite.engines.mock.sequence import Sequence, output_key
from dynamo_lite.engines.mock.timing import DynamoTiming, RooflineTiming, StepLoad, TimingModel

REFERENCE = Path(__file__).resolve().parents[3] / "docs" / "design" / "engine-timing.md"


def decode(batch: int, context: int) -> StepLoad:
    return StepLoad(decode_seqs=batch, decode_context_tokens=batch * context, emits_token=True)


def prefill(tokens: int, cached: int = 0) -> StepLoad:
    pairs = tokens * cached + tokens * (tokens + 1) // 2
    return StepLoad(prefill_tokens=tokens, prefill_attn_pairs=pairs, prefill_context_tokens=cached, emits_token=True)


def test_roofline_decode_grows_with_batch_and_context() -> None:
    t = RooflineTiming()
    by_batch = [t.step_seconds(decode(b, 1024)) for b in (1, 8, 32, 128, 256)]
    by_context = [t.step_seconds(decode(8, c)) for c in (128, 1024, 8192, 32768)]
    assert by_batch == sorted(by_batch) and len(set(by_batch)) == len(by_batch)
    assert by_context == sorted(by_context) and len(set(by_context)) == len(by_context)
    # an 8B model on an H200 reads ~16 GB of weights per step: a few ms
    assert 0.003 < by_batch[0] < 0.010


def test_roofline_prefill_grows_with_uncached_tokens_only() -> None:
    t = RooflineTiming()
    times = [t.step_seconds(prefill(n)) for n in (128, 1024, 4096, 8192)]
    assert times == sorted(times) and len(set(times)) == 4
    assert 0.1 < times[-1] < 0.5  # 8k tokens: ~1.3e14 FLOPs at ~600 TFLOP/s
    # the same 128 new tokens after a cached prefix cost far less than 8k new ones
    assert t.step_seconds(prefill(128, cached=8064)) < times[-1] / 5
    assert t.step_seconds(StepLoad()) == 0.0


def test_roofline_scales_with_tensor_parallelism() -> None:
    assert RooflineTiming(tp=2).step_seconds(prefill(4096)) < RooflineTiming().step_seconds(prefill(4096))


def test_dynamo_polynomials() -> None:
    t = DynamoTiming()
    assert t.prefill_ms(0) == 0.0
    assert t.prefill_ms(1000) == pytest.approx(4.209989e-7 * 1e6 + 15.18344 + 16.50142)
    assert t.decode_ms(0, 100) == pytest.approx(5.74)
    assert t.decode_ms(100, 100) == pytest.approx(max(1.0, -25.74 + 54.01 + 5.74))
    assert t.step_seconds(StepLoad(prefill_tokens=1000, emits_token=False)) == pytest.approx(t.prefill_ms(1000) / 1e3)


# --- the Dynamo preset against engine_timing_reference.md ------------------------------
def reference_rows() -> tuple[list[tuple[int, int, float]], list[tuple[int, int, float]]]:
    """TTFT rows (prompt, cached, ms) and ITL rows (batch, context, ms) of the reference table."""
    ttft, itl = [], []
    k = lambda s: int(float(s.rstrip("k")) * (1024 if s.endswith("k") else 1))  # noqa: E731
    for line in REFERENCE.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 5 or not re.match(r"^\d", cells[0]):
            continue
        m = re.match(r"(\S+)(?: with ([\d,]+) cached)?", cells[0])
        assert m is not None
        ttft.append((k(m.group(1)), int((m.group(2) or "0").replace(",", "")), float(cells[1])))
        if m2 := re.match(r"(\d+) x (\S+)", cells[3]):
            itl.append((int(m2.group(1)), k(m2.group(2)), float(cells[4])))
    assert len(ttft) == 6 and len(itl) == 5
    return ttft, itl


def sim_scheduler() -> Scheduler:
    return Scheduler(SchedulerConfig(block_size=16, num_gpu_blocks=200_000, max_num_seqs=256,
                                     max_num_batched_tokens=8192))  # fmt: skip


def add(sched: Scheduler, rid: str, prompt: list[int], max_tokens: int) -> Sequence:
    seq = Sequence(request_id=rid, prompt=prompt, max_tokens=max_tokens, output_key=output_key(0, prompt),
                   arrival=0.0, prompt_hashes=hash_blocks(prompt, 16))  # fmt: skip
    sched.add(seq)
    return seq


def run_until(sched: Scheduler, timing: TimingModel, done) -> list[float]:  # type: ignore[no-untyped-def]
    """Simulate passes until done(); returns each pass's duration in ms."""
    now, steps = 0.0, []
    while not done():
        plan = sched.schedule(now)
        dt = timing.step_seconds(plan.load)
        now += dt
        steps.append(dt * 1e3)
        sched.finish_step(plan, now)
    return steps


def test_dynamo_preset_ttft_matches_reference_table() -> None:
    ttft_rows, _ = reference_rows()
    timing = DynamoTiming()
    for prompt_len, cached, measured_ms in ttft_rows:
        sched = sim_scheduler()
        if cached:
            warm = add(sched, "warm", list(range(cached)), 1)
            run_until(sched, timing, lambda: warm.output)
        seq = add(sched, "r", list(range(prompt_len)), 1)
        simulated_ms = sum(run_until(sched, timing, lambda: seq.output))
        # the table is end to end: client and frontend add ~1-2 ms plus tokenizing, ~0.3 ms per 1k tokens
        tolerance = 2.0 + 0.3 * prompt_len / 1024
        assert abs(simulated_ms - measured_ms) <= tolerance, (prompt_len, cached, simulated_ms, measured_ms)


def test_dynamo_preset_itl_matches_reference_table() -> None:
    _, itl_rows = reference_rows()
    timing = DynamoTiming()
    for batch, context, measured_ms in itl_rows:
        sched = sim_scheduler()
        seqs = [add(sched, str(i), [i] * context, 50) for i in range(batch)]
        steps = run_until(sched, timing, lambda: all(len(s.output) >= 2 for s in seqs))
        assert steps[-1] == pytest.approx(measured_ms, rel=0.02), (batch, context, steps[-1], measured_ms)
