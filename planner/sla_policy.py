"""SLA-based policy: the replicas each pool needs to meet TTFT and ITL targets.

From the observed request rate, input and output lengths (frontend metrics) and
the engine's profile:
- prefill: one replica serves `throughput(isl)` prompt tokens/s; a request waits
  in the queue as in an M/D/1 queue, W = rho * s / (2 (1 - rho)) with service
  time s = isl / throughput. TTFT = lone-request TTFT + W must stay within the
  target, which caps the utilisation rho; replicas = rate * s / rho_max.
- decode: at context isl + osl/2 the profile gives the output tokens/s one
  replica sustains with ITL within the target; replicas = rate * osl / that,
  and at least enough KV cache for the sequences in flight (Little's law, at
  the observed ITL, or the target before any is observed).
Correction factors, observed over predicted TTFT and ITL (smoothed, clamped),
absorb what the profile misses (KV transfer, prefix hits, routing): a pool whose
latency runs above its prediction gets sized as if the engine were slower. The
TTFT correction is not updated while the prefill queue is backed up (more than
one pending job per replica): a backlog's wait is transient, not model error.
No traffic proposes zero (the planner then keeps the pools at their minimums).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from planner.profile import EngineProfile
from planner.types import Observation, Pool, Proposal, Replicas, Traffic


@dataclass(frozen=True, slots=True)
class SlaPolicyConfig:
    ttft_target_s: float
    itl_target_s: float
    max_utilization: float = 0.9  # prefill replicas are never planned busier than this
    kv_headroom: float = 0.9  # fraction of a replica's KV cache the plan may fill
    smoothing: float = 0.3  # weight of the newest sample in the rate, length and correction averages
    correction_min: float = 0.5
    correction_max: float = 3.0


class SlaPolicy:
    name = "sla"

    def __init__(self, config: SlaPolicyConfig, profile: EngineProfile) -> None:
        self.config = config
        self.profile = profile
        self.prefill_correction = 1.0
        self.decode_correction = 1.0
        self._rate: float | None = None
        self._isl: float | None = None
        self._osl: float | None = None
        self._itl: float | None = None

    def propose(self, obs: Observation, current: Replicas, now: float) -> dict[Pool, Proposal]:
        t = obs.traffic
        if t is None or t.request_rate <= 0:
            self._rate = None
            idle = Proposal(0, "no traffic")
            return {Pool.PREFILL: idle, Pool.DECODE: idle}
        self._remember(t)
        if self._isl is None or self._osl is None:
            keep = "lengths not measured yet"
            return {Pool.PREFILL: Proposal(current.prefill, keep), Pool.DECODE: Proposal(current.decode, keep)}
        self._correct(obs, t, current)
        return {Pool.PREFILL: self._prefill(), Pool.DECODE: self._decode()}

    def _remember(self, t: Traffic) -> None:
        a = self.config.smoothing
        self._rate = t.request_rate if self._rate is None else a * t.request_rate + (1 - a) * self._rate
        if t.isl is not None:
            self._isl = t.isl if self._isl is None else a * t.isl + (1 - a) * self._isl
        if t.osl is not None:
            self._osl = t.osl if self._osl is None else a * t.osl + (1 - a) * self._osl
        if t.itl_s is not None:
            self._itl = t.itl_s if self._itl is None else a * t.itl_s + (1 - a) * self._itl

    # --- prefill -------------------------------------------------------------------
    def _service_s(self) -> float:
        assert self._isl is not None
        return self._isl / self.profile.prefill_throughput_tps(self._isl)

    def predicted_ttft_s(self, rate: float, replicas: int) -> float | None:
        """Lone-request TTFT plus the M/D/1 queueing wait; None when the pool is saturated."""
        assert self._isl is not None
        s = self._service_s()
        rho = rate * s / replicas if replicas > 0 else math.inf
        if rho >= 1:
            return None
        return self.profile.prefill_ttft_s(self._isl) + rho * s / (2 * (1 - rho))

    def _prefill(self) -> Proposal:
        c, rate, isl = self.config, self._rate or 0.0, self._isl or 0.0
        s = self._service_s() * self.prefill_correction
        slack = c.ttft_target_s - self.profile.prefill_ttft_s(isl) * self.prefill_correction
        if slack <= 0:
            rho, note = 0.5, "; TTFT target below a lone request's TTFT: sized at 50% utilisation"
        else:
            rho, note = min(c.max_utilization, 2 * slack / (s + 2 * slack)), ""
        want = math.ceil(rate * s / rho - 1e-9)
        return Proposal(want, f"rate {rate:.2f}/s x isl {isl:.0f} needs {rate * s:.2f} replica-loads at "
                              f"<= {rho:.0%} (ttft corr {self.prefill_correction:.2f}){note}")

    # --- decode ----------------------------------------------------------------------
    def _context(self) -> float:
        assert self._isl is not None and self._osl is not None
        return self._isl + self._osl / 2

    def _decode(self) -> Proposal:
        c, rate, osl, isl = self.config, self._rate or 0.0, self._osl or 0.0, self._isl or 0.0
        itl = c.itl_target_s / self.decode_correction
        per_replica = self.profile.decode_throughput_at_itl(self._context(), itl)
        note = ""
        if per_replica <= 0:
            per_replica = min(p.throughput_tps for p in self.profile.decode)
            note = "; ITL target below the engine's best: sized at lowest concurrency"
        want = math.ceil(rate * osl / per_replica - 1e-9)
        cap = self.profile.kv_capacity_tokens * c.kv_headroom
        if cap > 0:
            itl_now = min(self._itl or c.itl_target_s, c.itl_target_s)
            in_flight = rate * osl * itl_now  # Little's law: sequences decoding at once
            want_kv = math.ceil(in_flight * (isl + osl) / cap - 1e-9)
            if want_kv > want:
                want, note = want_kv, note + f"; KV cache for {in_flight:.0f} sequences needs {want_kv}"
        return Proposal(want, f"rate {rate:.2f}/s x osl {osl:.0f} at {per_replica:.0f} tok/s/replica "
                              f"within itl {itl * 1000:.1f} ms (itl corr {self.decode_correction:.2f}){note}")

    # --- corrections -------------------------------------------------------------------
    def _correct(self, obs: Observation, t: Traffic, current: Replicas) -> None:
        backlog = (obs.prefill_queue or 0) > current.prefill  # TTFT then measures the backlog, not the model
        if t.ttft_s is not None and current.prefill > 0 and not backlog:
            predicted = self.predicted_ttft_s(t.request_rate, current.prefill)
            if predicted:
                self.prefill_correction = self._blend(self.prefill_correction, t.ttft_s / predicted)
        running = [w.running for w in obs.decode if w.running > 0]
        if t.itl_s is not None and running:
            predicted = self.profile.decode_itl_s(self._context(), sum(running) / len(running))
            if predicted > 0:
                self.decode_correction = self._blend(self.decode_correction, t.itl_s / predicted)

    def _blend(self, old: float, sample: float) -> float:
        c = self.config
        sample = min(c.correction_max, max(c.correction_min, sample))
        return c.smoothing * sample + (1 - c.smoothing) * old
