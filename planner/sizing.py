"""How many workers a request rate needs, from the engine's profile and the traffic's lengths.

Pure arithmetic for the SLA policy. A `Workload` is what the last interval's
requests looked like: the distribution of their prompt lengths (not a mean:
prefill time grows faster than the prompt, so a mean underestimates a mix of
short and long prompts), the mean output length, the share of prompt tokens
found cached, and the share of requests whose prefill goes to the prefill pool
(conditional disaggregation: the rest prefill on their decode worker).
- prefill: a request of `isl` tokens, `u` of them uncached, occupies a replica
  for s = u / throughput(isl), and alone waits ttft(isl) * u / isl. The queue
  wait is Pollaczek-Khinchine's, W = rho * E[s^2] / (2 E[s] (1 - rho)) per
  replica; TTFT = E[lone] + W must stay within the target, which caps the
  utilisation rho. Replicas = rate * E[s] / rho. Requests that alone exceed the
  target cannot meet it at any size and are left out of E[lone].
- decode: rate * osl over the output tokens/s one replica gives with ITL
  within the target at context isl + osl/2; at least enough KV cache for the
  sequences in flight (Little's law); plus the prefills that run locally.
Corrections (observed over predicted latency) scale the service times.
Sized for the mean TTFT, a small pool misses when two long prompts come together, and a busy one has a long
queue tail: `pair_s` and each pool's busy share tell the SLA policy where its spare worker is needed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from planner.profile import EngineProfile


@dataclass(frozen=True, slots=True)
class Workload:
    isl_dist: tuple[tuple[float, float], ...]  # (prompt tokens, share of requests); shares sum to 1
    osl: float  # mean output tokens
    cached_share: float = 0.0  # prompt tokens found cached / prompt tokens
    remote_share: float = 1.0  # requests prefilled on the prefill pool / requests

    @property
    def mean_isl(self) -> float:
        return sum(x * w for x, w in self.isl_dist)


@dataclass(frozen=True, slots=True)
class Needs:
    """Fractional replicas each pool needs at one rate, and why."""

    prefill: float
    decode: float
    rho: float  # the prefill utilisation the TTFT target allows
    why_prefill: str
    why_decode: str
    pair_prefill: float = math.inf  # seconds two of the prefill pool's long prompts take together (`pair_s`)
    pair_decode: float = math.inf  # ... of the prompts prefilled on the decode pool
    busy_prefill: float = 1.0  # share of the prefill pool's whole workers' time spent prefilling (at the rate)
    busy_decode: float = 1.0  # ... of the decode pool's, on its local prefills


@dataclass(frozen=True, slots=True)
class Targets:
    ttft_s: float
    itl_s: float
    max_utilization: float = 0.9
    kv_headroom: float = 0.9


def split(w: Workload) -> tuple[tuple[tuple[float, float], ...], tuple[tuple[float, float], ...]]:
    """The prompt-length distribution's remote part (its longest `remote_share`: the frontend sends long
    uncached prompts to the prefill pool) and local part, each normalised to shares summing to 1."""
    remote, local, left = [], [], w.remote_share
    for isl, share in sorted(w.isl_dist, reverse=True):
        take = min(share, max(left, 0.0))
        left -= take
        if take > 0:
            remote.append((isl, take))
        if share - take > 0:
            local.append((isl, share - take))
    norm = lambda d: tuple((x, s / sum(v for _, v in d)) for x, s in d)  # noqa: E731
    return (norm(remote) if remote else ()), (norm(local) if local else ())


def prefill_moments(profile: EngineProfile, dist: tuple[tuple[float, float], ...], cached_share: float,
                    correction: float, ttft_target_s: float) -> tuple[float, float, float, float]:
    """E[s], E[s^2] of a prefill's service time over `dist`, E[lone TTFT] of the requests that can meet the
    target, and of all."""
    es = es2 = lone = lone_w = lone_all = 0.0
    u = 1.0 - cached_share
    for isl, share in dist:
        s = isl * u / max(profile.prefill_throughput_tps(isl), 1e-9) * correction
        es += share * s
        es2 += share * s * s
        alone = profile.prefill_ttft_s(isl) * u * correction
        lone_all += share * alone
        if alone < ttft_target_s:
            lone += share * alone
            lone_w += share
    return es, es2, (lone / lone_w if lone_w else ttft_target_s), lone_all


PAIR_SHARE = 0.05  # the prompts a pool's spare worker is for: its longest 5%
BUSY_SHARE = 0.5  # ... and a pool whose workers prefill more than half the time: a prompt mostly waits


def pair_s(profile: EngineProfile, dist: tuple[tuple[float, float], ...], cached_share: float, correction: float,
           share: float = PAIR_SHARE) -> float:
    """Seconds until the second of two long prompts of `dist` (the shortest of its longest `share`), arriving
    together on one worker, has its first token: it waits for the first one's prefill, then takes its own. The
    queue model sizes for the mean TTFT, and misses such coincidences where this is over the target (a spare
    worker is for them); where it is not, the pool absorbs them. 0 for an empty distribution."""
    if not dist:
        return 0.0
    left, isl = share, 0.0
    for isl, weight in sorted(dist, reverse=True):
        left -= weight
        if left <= 1e-9:
            break
    u = 1.0 - cached_share
    first = isl * u / max(profile.prefill_throughput_tps(isl), 1e-9) * correction
    return first + profile.prefill_ttft_s(isl) * u * correction


def _replicas(rate: float, es: float, es2: float, lone: float, t: Targets) -> tuple[float, float]:
    """(replicas, utilisation) for prefills of these moments at `rate` within the TTFT target."""
    if rate <= 0 or es <= 0:
        return 0.0, t.max_utilization
    slack, m = t.ttft_s - lone, es2 / es
    rho = min(t.max_utilization, 2 * slack / (m + 2 * slack)) if slack > 0 else 0.5
    return rate * es / rho, rho


def needs(profile: EngineProfile, w: Workload, rate: float, t: Targets, prefill_correction: float = 1.0,
          decode_correction: float = 1.0, itl_now_s: float | None = None) -> Needs:
    rate = rate if math.isfinite(rate) and rate > 0 else 0.0
    remote_dist, local_dist = split(w)
    es, es2, lone, _ = prefill_moments(profile, remote_dist, w.cached_share, prefill_correction, t.ttft_s)
    remote, rho = _replicas(rate * w.remote_share, es, es2, lone, t)
    les, les2, llone, _ = prefill_moments(profile, local_dist, w.cached_share, prefill_correction, t.ttft_s)
    local, _ = _replicas(rate * (1 - w.remote_share), les, les2, llone, t)
    why_p = (f"rate {rate:.2f}/s x {w.remote_share:.0%} remote, E[s] {es * 1000:.0f} ms (mean isl {w.mean_isl:.0f}, "
             f"{w.cached_share:.0%} cached) at <= {rho:.0%} (ttft corr {prefill_correction:.2f})")
    itl = t.itl_s / decode_correction
    isl = w.mean_isl
    per_replica = profile.decode_throughput_at_itl(isl + w.osl / 2, itl)
    note = ""
    if per_replica <= 0:
        per_replica = min(p.throughput_tps for p in profile.decode)
        note = "; ITL target below the engine's best: sized at lowest concurrency"
    decode = rate * w.osl / per_replica
    cap = profile.kv_capacity_tokens * t.kv_headroom
    if cap > 0:
        in_flight = rate * w.osl * min(itl_now_s or t.itl_s, t.itl_s)  # Little's law: sequences decoding at once
        kv = in_flight * (isl + w.osl) / cap
        if kv > decode:
            decode, note = kv, note + f"; KV cache for {in_flight:.0f} sequences"
    why_d = (f"rate {rate:.2f}/s x osl {w.osl:.0f} at {per_replica:.0f} tok/s/replica within itl {itl * 1000:.1f} ms "
             f"(itl corr {decode_correction:.2f}){note}")
    if local > 0:
        why_d += f"; + {local:.2f} replicas of local prefill"
    pair_p = pair_s(profile, remote_dist, w.cached_share, prefill_correction)
    pair_d = pair_s(profile, local_dist, w.cached_share, prefill_correction)
    busy_p = rate * w.remote_share * es / max(1, math.ceil(remote - 1e-9))
    busy_d = rate * (1 - w.remote_share) * les / max(1, math.ceil(decode + local - 1e-9))
    return Needs(remote, decode + local, rho, why_p, why_d, pair_p, pair_d, busy_p, busy_d)


def predicted_ttft_s(profile: EngineProfile, w: Workload, rate: float, replicas: int, ttft_target_s: float,
                     ) -> float | None:
    """Mean TTFT the model predicts over all requests (remote prefills queued on `replicas` prefill workers,
    local ones alone on their decode worker); None when the prefill pool is saturated."""
    remote_dist, local_dist = split(w)
    local = prefill_moments(profile, local_dist, w.cached_share, 1.0, ttft_target_s)[3]
    if not remote_dist:
        return local
    remote = predicted_remote_prefill_s(profile, w, rate, replicas, ttft_target_s)
    if remote is None:
        return None
    return w.remote_share * remote + (1 - w.remote_share) * local


def predicted_remote_prefill_s(profile: EngineProfile, w: Workload, rate: float, replicas: int,
                               ttft_target_s: float, correction: float = 1.0) -> float | None:
    """Mean time of a remote prefill, queue wait included, at `rate` (all requests) on `replicas` prefill
    workers, service times scaled by `correction`; None when the pool is saturated."""
    es, es2, _, lone = prefill_moments(profile, split(w)[0], w.cached_share, correction, ttft_target_s)
    if es <= 0:  # nothing to compute: every remote prompt cached
        return lone
    rho = rate * w.remote_share * es / replicas if replicas > 0 else math.inf
    if rho >= 1:
        return None
    return lone + rho * (es2 / es) / (2 * (1 - rho))


def fit_prefill_correction(profile: EngineProfile, w: Workload, rate: float, replicas: int, ttft_target_s: float,
                           measured_s: float, lo: float, hi: float) -> float:
    """The service-time scale in [lo, hi] at which the predicted remote prefill time is the measured one.

    Not the ratio measured / predicted: near saturation the queue wait grows as 1 / (1 - rho), so a ratio
    of times overstates (or understates) the error of the service times many times over. The prediction
    grows with the scale, so bisection finds it; a measurement beyond either end gives that end."""
    def predicted(c: float) -> float:
        p = predicted_remote_prefill_s(profile, w, rate, replicas, ttft_target_s, c)
        return math.inf if p is None else p

    if predicted(lo) >= measured_s:
        return lo
    if predicted(hi) <= measured_s:
        return hi
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if predicted(mid) < measured_s else (lo, mid)
    return (lo + hi) / 2
