"""Step-time models: how long one forward pass over a scheduled batch takes.

Pure functions of a `StepLoad`, in simulated seconds. Two models:
- `RooflineTiming`: max(FLOPs / compute rate, bytes / memory bandwidth) plus a
  fixed per-step overhead, from a `ModelSpec` and a `GpuSpec`. Prefill time
  grows with the uncached tokens (and the context they attend to); decode time
  with the batch (weights are read once, KV once per sequence) and its context.
- `DynamoTiming`: NVIDIA Dynamo 1.6.1's simulated engine ("mocker"), from
  docs/design/engine-timing.md, for side-by-side comparisons.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

TimingName = Literal["roofline", "dynamo"]


@dataclass(frozen=True, slots=True)
class StepLoad:
    """What one forward pass computes; built by the scheduler."""

    prefill_tokens: int = 0  # uncached prompt tokens computed in this pass (all chunks)
    prefill_attn_pairs: int = 0  # sum over chunks of query x key pairs: T * (C + T / 2)
    prefill_context_tokens: int = 0  # KV tokens read by prefill chunks (their cached context)
    decode_seqs: int = 0  # sequences computing one token each (decode, or a last-token recompute)
    decode_context_tokens: int = 0  # KV tokens those sequences attend to, summed
    emits_token: bool = False  # some sequence samples a token at the end of this pass
    active_blocks: int = 0  # KV blocks referenced by scheduled sequences
    total_blocks: int = 1  # KV blocks of the engine


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A dense decoder-only transformer, as far as its cost goes."""

    params: float = 8.03e9  # parameter count
    num_layers: int = 32
    hidden_size: int = 4096  # query heads x head dim
    num_kv_heads: int = 8
    head_dim: int = 128
    dtype_bytes: int = 2  # bf16 weights and KV

    @property
    def weight_bytes(self) -> float:
        return self.params * self.dtype_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V, every layer: what a KV transfer ships per token."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.dtype_bytes


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """Peak rates of one accelerator and the fraction a serving engine reaches."""

    flops: float = 989e12  # dense bf16 FLOP/s
    mem_bandwidth: float = 4.8e12  # HBM bytes/s
    compute_efficiency: float = 0.6  # achieved / peak FLOP/s (MFU) in prefill
    memory_efficiency: float = 0.8  # achieved / peak bandwidth in decode
    step_overhead_s: float = 1.5e-3  # scheduling, launch, sampling per pass


MODEL_PRESETS: dict[str, ModelSpec] = {
    "8b": ModelSpec(),
    "70b": ModelSpec(params=70.6e9, num_layers=80, hidden_size=8192, num_kv_heads=8, head_dim=128),
    "1b": ModelSpec(params=1.24e9, num_layers=16, hidden_size=2048, num_kv_heads=8, head_dim=64),
}

GPU_PRESETS: dict[str, GpuSpec] = {
    "h200": GpuSpec(),
    "h100": GpuSpec(mem_bandwidth=3.35e12),
    "a100": GpuSpec(flops=312e12, mem_bandwidth=2.039e12),
    "l40s": GpuSpec(flops=362e12, mem_bandwidth=0.864e12),
}


class TimingModel(Protocol):
    def step_seconds(self, load: StepLoad) -> float:
        """Simulated duration of one forward pass; 0 for an empty pass."""
        ...


@dataclass(frozen=True, slots=True)
class RooflineTiming:
    """Roofline step time; `tp` spreads weights and compute over that many GPUs."""

    model: ModelSpec = ModelSpec()
    gpu: GpuSpec = GpuSpec()
    tp: int = 1

    def flops(self, load: StepLoad) -> float:
        tokens = load.prefill_tokens + load.decode_seqs
        attn_pairs = load.prefill_attn_pairs + load.decode_context_tokens
        # 2 FLOPs per parameter per token; QK^T and AV: 2 x 2 x pairs x hidden per layer.
        return 2.0 * self.model.params * tokens + 4.0 * self.model.num_layers * self.model.hidden_size * attn_pairs

    def bytes_moved(self, load: StepLoad) -> float:
        kv_read = load.decode_context_tokens + load.prefill_context_tokens
        kv_write = load.prefill_tokens + load.decode_seqs
        return self.model.weight_bytes + self.model.kv_bytes_per_token * (kv_read + kv_write)

    def step_seconds(self, load: StepLoad) -> float:
        if load.prefill_tokens == 0 and load.decode_seqs == 0:
            return 0.0
        compute_s = self.flops(load) / (self.gpu.flops * self.gpu.compute_efficiency * self.tp)
        memory_s = self.bytes_moved(load) / (self.gpu.mem_bandwidth * self.gpu.memory_efficiency * self.tp)
        return max(compute_s, memory_s) + self.gpu.step_overhead_s


@dataclass(frozen=True, slots=True)
class DynamoTiming:
    """Dynamo mocker: P(T) + D(u) milliseconds per pass (engine_timing_reference.md)."""

    def prefill_ms(self, new_tokens: int) -> float:
        if new_tokens <= 0:
            return 0.0
        t = float(new_tokens)
        return 4.209989e-7 * t * t + 1.518344e-2 * t + 16.50142

    def decode_ms(self, active_blocks: int, total_blocks: int) -> float:
        u = min(1.0, active_blocks / max(1, total_blocks))
        return max(1.0, -25.74 * u * u + 54.01 * u + 5.74)

    def step_seconds(self, load: StepLoad) -> float:
        ms = self.prefill_ms(load.prefill_tokens)
        if load.emits_token:
            ms += self.decode_ms(load.active_blocks, load.total_blocks)
        return ms / 1000.0


DYNAMO_DEFAULTS = {"max_num_seqs": 256, "max_num_batched_tokens": 8192}
"""The scheduler limits of Dynamo's mocker, which its timing was measured with."""
