"""Load-based policy: prefill scales on the prefill queue, decode on KV usage.

Prefill: pending jobs per replica (a least-squares fit over the last ticks,
projected `trend_horizon_s` ahead along a rising slope) above `prefill_queue_up`
adds replicas (enough to bring it to the threshold); so do jobs in hand (pending
+ in flight) above `prefill_busy_up` per replica, the earlier sign: workers pull
jobs while they have free slots, so the queue grows only once all are full, and
TTFT grows before that. For the same reason prefill loses a replica only
when pending jobs are below `prefill_queue_down` per replica and the jobs in
hand (pending + in flight) fit one replica fewer at `prefill_busy_down` each.
Decode: mean KV usage (projected the same way) above `decode_kv_up`, or waiting
requests per replica above `decode_waiting_up`, adds replicas; mean usage below
`decode_kv_down` with nothing waiting, and still below the up threshold with one
replica fewer, removes one. The gap between the thresholds and the "one fewer"
check keep a steady load from flapping.
Absent inputs (no workers reporting, no queue reading) count as idle.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from planner.trend import Trend
from planner.types import Observation, Pool, Proposal, Replicas


@dataclass(frozen=True, slots=True)
class LoadPolicyConfig:
    prefill_queue_up: float = 4.0  # pending prefill jobs per replica above which prefill scales up
    prefill_queue_down: float = 0.5  # ...below which it may scale down,
    prefill_busy_up: float = 3.0  # jobs in hand (pending + in flight) per replica above which prefill scales up
    prefill_busy_down: float = 1.0  # ...if the jobs in hand (pending + in flight) fit one replica fewer at this each
    decode_kv_up: float = 0.8  # mean KV usage (0..1) above which decode scales up
    decode_kv_down: float = 0.3  # ...below which it may scale down
    decode_waiting_up: float = 2.0  # waiting requests per decode replica above which decode scales up
    trend_horizon_s: float = 30.0  # project rising signals this far ahead; 0 disables the trend term
    trend_window: int = 6  # ticks the slope is fitted over

    def __post_init__(self) -> None:
        if not 0 <= self.prefill_queue_down < self.prefill_queue_up:
            raise ValueError("need 0 <= prefill_queue_down < prefill_queue_up")
        if not 0 <= self.prefill_busy_down < self.prefill_busy_up:
            raise ValueError("need 0 <= prefill_busy_down < prefill_busy_up")
        if not 0 <= self.decode_kv_down < self.decode_kv_up <= 1:
            raise ValueError("need 0 <= decode_kv_down < decode_kv_up <= 1")


class LoadPolicy:
    name = "load"

    def __init__(self, config: LoadPolicyConfig = LoadPolicyConfig()) -> None:
        self.config = config
        self._queue = Trend(config.trend_window)
        self._kv = Trend(config.trend_window)

    def propose(self, obs: Observation, current: Replicas, now: float) -> dict[Pool, Proposal]:
        return {Pool.PREFILL: self._prefill(obs, current.prefill, now),
                Pool.DECODE: self._decode(obs, current.decode, now)}

    def _prefill(self, obs: Observation, n: int, now: float) -> Proposal:
        c = self.config
        depth = float(obs.prefill_queue or 0)
        self._queue.add(now, depth)
        projected = self._queue.projected(c.trend_horizon_s)
        seen = f"queue {depth:.0f} (fit, ahead {c.trend_horizon_s:g}s: {projected:.1f})"
        if obs.prefill_queue is None:
            seen = "queue depth absent (treated as 0)"
        if projected > c.prefill_queue_up * max(n, 0) and projected > 0:
            want = max(n + 1, math.ceil(projected / c.prefill_queue_up))
            return Proposal(want, f"{seen} > {c.prefill_queue_up:g}/replica")
        in_hand = depth + (obs.prefill_in_flight or 0)
        if n > 0 and in_hand > c.prefill_busy_up * n:
            want = max(n + 1, math.ceil(in_hand / c.prefill_busy_up))
            return Proposal(want, f"{seen}, {in_hand:.0f} jobs in hand > {c.prefill_busy_up:g}/replica")
        if n > 0 and depth <= c.prefill_queue_down * n and depth <= c.prefill_queue_up * (n - 1) \
                and in_hand <= c.prefill_busy_down * (n - 1):
            return Proposal(n - 1, f"{seen} < {c.prefill_queue_down:g}/replica, {in_hand:.0f} jobs in hand "
                                   f"fit {n - 1} replicas at {c.prefill_busy_down:g} each")
        return Proposal(n, f"{seen} within thresholds")

    def _decode(self, obs: Observation, n: int, now: float) -> Proposal:
        c = self.config
        loads = obs.decode
        kv = sum(w.kv_usage for w in loads) / len(loads) if loads else 0.0
        waiting = sum(w.waiting for w in loads)
        self._kv.add(now, kv)
        projected = self._kv.projected(c.trend_horizon_s)
        seen = f"kv {kv:.2f} (fit, ahead {c.trend_horizon_s:g}s: {projected:.2f})"
        seen += f", waiting {waiting}" if loads else " (no load reports: idle)"
        if n == 0 and (waiting > 0 or kv > 0):
            return Proposal(1, f"{seen} with no replica")
        if n > 0 and (projected > c.decode_kv_up or waiting > c.decode_waiting_up * n):
            # Enough replicas to bring the usage back to the middle of the band.
            middle = (c.decode_kv_up + c.decode_kv_down) / 2
            want = max(n + 1, math.ceil(n * projected / middle))
            why = f"> kv {c.decode_kv_up:g}" if projected > c.decode_kv_up else f"> {c.decode_waiting_up:g} waiting/replica"
            return Proposal(want, f"{seen} {why}")
        if n > 0 and kv < c.decode_kv_down and waiting == 0 and (n == 1 or kv * n / (n - 1) < c.decode_kv_up):
            return Proposal(n - 1, f"{seen} < kv {c.decode_kv_down:g}")
        return Proposal(n, f"{seen} within thresholds")
