"""Rate profiles: warp a trace's arrival times so that its rate follows a shape over time.

A profile is a rate multiplier m(t) > 0 on the output time axis. An arrival at
time `tau` of the unwarped trace is moved to the t where the cumulative
multiplier M(t) = integral_0^t m equals tau, so the trace's own burstiness and
order stay and its rate becomes m(t) times its base rate. Each shape averages 1
over whole periods (the step over twice its `at_s`), so a slice keeps its length.
- `flat`: m = 1;
- `sine:period=240,amplitude=0.6`: m = 1 + amplitude * sin(2 pi t / period);
- `step:at=240,low=0.4,high=1.6`: low before `at`, high after;
- `burst:period=240,duty=0.25,high=2.2`: high for `duty` of every period (at
  its start), and the level that keeps the mean at 1 for the rest.
Pure; used by benchmarks/planner_sim.py and benchmarks/trace_replay.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields


@dataclass(frozen=True, slots=True)
class RateProfile:
    kind: str = "flat"  # flat, sine, step, burst
    period: float = 240.0  # sine, burst: seconds
    amplitude: float = 0.6  # sine: relative swing (0 .. <1)
    at: float = 240.0  # step: when it steps (seconds)
    low: float = 0.4  # step: multiplier before
    high: float = 1.6  # step: multiplier after; burst: multiplier during a burst
    duty: float = 0.25  # burst: share of the period in a burst

    def __post_init__(self) -> None:
        if self.kind not in ("flat", "sine", "step", "burst"):
            raise ValueError(f"rate profile kind must be flat, sine, step or burst, not {self.kind!r}")
        if self.kind == "sine" and not (0 <= self.amplitude < 1 and self.period > 0):
            raise ValueError("sine: need 0 <= amplitude < 1 and period > 0")
        if self.kind == "step" and not (self.low > 0 and self.high > 0 and self.at >= 0):
            raise ValueError("step: need low > 0, high > 0, at >= 0")
        if self.kind == "burst" and not (0 < self.duty < 1 and 1 < self.high < 1 / self.duty and self.period > 0):
            raise ValueError("burst: need 0 < duty < 1, 1 < high < 1/duty and period > 0")

    @classmethod
    def parse(cls, text: str) -> RateProfile:
        """`kind` or `kind:key=value,...` (keys: the fields above)."""
        kind, _, rest = text.partition(":")
        names = {f.name for f in fields(cls)} - {"kind"}
        values: dict[str, float] = {}
        for item in filter(None, rest.split(",")):
            key, _, value = item.partition("=")
            if key.strip() not in names:
                raise ValueError(f"rate profile {text!r}: unknown key {key!r} (known: {', '.join(sorted(names))})")
            values[key.strip()] = float(value)
        return cls(kind.strip(), **values)

    def describe(self) -> str:
        return {"flat": "flat",
                "sine": f"sine, period {self.period:g} s, amplitude +-{self.amplitude:.0%}",
                "step": f"step at {self.at:g} s, x{self.low:g} -> x{self.high:g}",
                "burst": f"burst train, period {self.period:g} s, x{self.high:g} for {self.duty:.0%} of it, "
                         f"x{self._burst_base():.2f} between"}[self.kind]  # fmt: skip

    def _burst_base(self) -> float:
        return (1 - self.duty * self.high) / (1 - self.duty)

    def multiplier(self, t: float) -> float:
        if self.kind == "sine":
            return 1 + self.amplitude * math.sin(2 * math.pi * t / self.period)
        if self.kind == "step":
            return self.low if t < self.at else self.high
        if self.kind == "burst":
            return self.high if (t % self.period) < self.duty * self.period else self._burst_base()
        return 1.0

    def cumulative(self, t: float) -> float:
        """M(t): the integral of the multiplier from 0 to t."""
        if self.kind == "sine":
            w = 2 * math.pi / self.period
            return t + self.amplitude / w * (1 - math.cos(w * t))
        if self.kind == "step":
            return self.low * min(t, self.at) + self.high * max(0.0, t - self.at)
        if self.kind == "burst":
            full, rest = divmod(t, self.period)
            burst = self.duty * self.period
            return full * self.period + self.high * min(rest, burst) + self._burst_base() * max(0.0, rest - burst)
        return t

    def warp(self, tau: float) -> float:
        """The time t with M(t) = tau (M is increasing: bisection)."""
        if self.kind == "flat" or tau <= 0:
            return max(tau, 0.0)
        lo, hi = 0.0, max(1.0, tau)
        while self.cumulative(hi) < tau:
            hi *= 2
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if self.cumulative(mid) < tau else (lo, mid)
        return (lo + hi) / 2

    def warp_all(self, times: list[float]) -> list[float]:
        return [self.warp(t) for t in times]
