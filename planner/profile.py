"""An engine's performance profile: what the SLA policy sizes pools with.

Produced by sweeping an engine (`python -m dynamo_lite.planning.profiler`), stored as JSON.
- prefill: for each input length, the TTFT of a lone request and the prefill
  throughput of one saturated replica (prompt tokens per second);
- decode: for each (context length, concurrency), the ITL and the output tokens
  per second of one replica.
Lookups interpolate linearly between measured points and clamp outside them.
"""

from __future__ import annotations

import bisect
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

DEFAULT_PROFILE = Path(__file__).parent / "profiles" / "mock_roofline_8b_h200.json"
"""Shipped profile of the mock engine's default model (roofline timing, 8B on an H200)."""


@dataclass(frozen=True, slots=True)
class PrefillPoint:
    isl: int  # prompt tokens
    ttft_s: float  # a lone request's time to first token
    throughput_tps: float  # prompt tokens per second of one saturated replica


@dataclass(frozen=True, slots=True)
class DecodePoint:
    context: int  # tokens each sequence attends to (prompt + output so far)
    concurrency: int  # sequences decoding together
    itl_s: float  # time between tokens of one sequence
    throughput_tps: float  # output tokens per second of the replica


@dataclass(frozen=True)
class EngineProfile:
    engine: str  # what was swept, e.g. "mock roofline 8b h200" or a vLLM model
    prefill: list[PrefillPoint]
    decode: list[DecodePoint]
    kv_capacity_tokens: int = 0  # tokens of KV cache one replica holds (0: unknown)
    meta: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.prefill or not self.decode:
            raise ValueError("a profile needs prefill and decode points")
        self.prefill.sort(key=lambda p: p.isl)
        self.decode.sort(key=lambda p: (p.context, p.concurrency))

    # --- prefill ------------------------------------------------------------------
    def prefill_ttft_s(self, isl: float) -> float:
        return _interp([p.isl for p in self.prefill], [p.ttft_s for p in self.prefill], isl)

    def prefill_throughput_tps(self, isl: float) -> float:
        return _interp([p.isl for p in self.prefill], [p.throughput_tps for p in self.prefill], isl)

    # --- decode -------------------------------------------------------------------
    def contexts(self) -> list[int]:
        return sorted({p.context for p in self.decode})

    def _curve(self, context: int) -> list[DecodePoint]:
        return [p for p in self.decode if p.context == context]

    def decode_itl_s(self, context: float, concurrency: float) -> float:
        """ITL at this context and concurrency, interpolated over both."""
        return self._across_contexts(context, lambda pts: _interp(
            [p.concurrency for p in pts], [p.itl_s for p in pts], concurrency))

    def decode_throughput_at_itl(self, context: float, itl_s: float) -> float:
        """Most output tokens/s one replica gives while its ITL stays within `itl_s` (0: never)."""
        return self._across_contexts(context, lambda pts: _best_within(pts, itl_s))

    def _across_contexts(self, context: float, f) -> float:  # noqa: ANN001 - f: curve -> float
        ctxs = self.contexts()
        i = bisect.bisect_left(ctxs, context)
        if i == 0 or i == len(ctxs):
            return f(self._curve(ctxs[min(i, len(ctxs) - 1)]))
        lo, hi = ctxs[i - 1], ctxs[i]
        w = (context - lo) / (hi - lo)
        return (1 - w) * f(self._curve(lo)) + w * f(self._curve(hi))

    # --- files --------------------------------------------------------------------
    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def from_json(cls, text: str) -> EngineProfile:
        data = json.loads(text)
        return cls(engine=data["engine"], prefill=[PrefillPoint(**p) for p in data["prefill"]],
                   decode=[DecodePoint(**p) for p in data["decode"]],
                   kv_capacity_tokens=int(data.get("kv_capacity_tokens", 0)), meta=dict(data.get("meta", {})))

    @classmethod
    def load(cls, path: Path | str | None = None) -> EngineProfile:
        return cls.from_json(Path(path or DEFAULT_PROFILE).read_text())


def _interp(xs: list[float], ys: list[float], x: float) -> float:
    if x <= xs[0]:
        return ys[0]
    if x >= xs[-1]:
        return ys[-1]
    i = bisect.bisect_right(xs, x)
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def _best_within(curve: list[DecodePoint], itl_s: float) -> float:
    """Throughput where the curve (ITL rising with concurrency) meets `itl_s`."""
    best = 0.0
    for a, b in zip(curve, curve[1:]):
        if a.itl_s <= itl_s:
            best = max(best, a.throughput_tps)
        if a.itl_s <= itl_s < b.itl_s:
            w = (itl_s - a.itl_s) / (b.itl_s - a.itl_s)
            best = max(best, a.throughput_tps + w * (b.throughput_tps - a.throughput_tps))
    if curve and curve[-1].itl_s <= itl_s:
        best = max(best, curve[-1].throughput_tps)
    return best
