"""SLA-based policy: the replicas each pool needs to meet TTFT and ITL targets, planned ahead.

Every tick, from the frontend's traffic over the last interval:
1. the request rate goes into a load predictor (planner/predict.py); the
   lengths (the prompt-length distribution, cached share and remote-prefill
   share of the last `length_window_s`' requests, `LengthWindow`; the mean
   output length, smoothed) replace the last ones;
2. corrections scale the profile's service times (they absorb what the profile
   misses: routing, batching, the interference of local prefills), smoothed
   and clamped:
   - prefill: the scale at which the queueing model predicts the remote
     prefills' measured time (submit to result, from the frontend). Not the
     ratio of measured to predicted: near saturation the wait grows as
     1 / (1 - rho), and the ratio would then be many times the service
     times' error. While the mean TTFT misses the target, observed over
     predicted TTFT (Dynamo's correction), if larger: the SLO is being lost
     now, whatever the cause. (Within the target, TTFT says little of the
     prefill pool: it mixes in local prefills, the KV transfer and the
     decode workers' queues.) Not updated while the prefill queue is backed
     up (more pending jobs than replicas): a backlog's wait is transient;
   - decode: observed over predicted ITL;
3. sizing (planner/sizing.py) at two rates:
   - up: the highest rate predicted from `startup_s` ahead to an interval
     after that (or the current one if higher): a worker asked for now
     serves only then, and one asked at the next tick an interval later;
   - keep: the highest rate predicted over the next `startup_s`, plus
     `down_headroom`: a worker removed now cannot be back sooner.
   With `forecast_margin` (a quantile q), `up` also carries the q-quantile of
   how far the measured rate came above the forecasts made one start-up
   before it, over the last `forecast_margin_window_s` (`ForecastErrors`):
   a predictor that does not see bursts coming misses each by its height,
   and the pools then carry that much ahead of the next; one that predicts
   well is given little.
   Each pool that needs any worker gets `spare_replicas` more at both rates
   (N+1): the queueing model sizes for the mean TTFT, and a pool sized so,
   one or two workers in a trough, misses when two long prompts come together.
   Only where they would: where two of the pool's longest 5% of prompts, one
   after the other on one worker, take longer than the TTFT target
   (`sizing.pair_s`), or where its whole workers spend more than half their
   time prefilling, so that a prompt mostly waits behind another and the mean
   the queue model sizes for hides a long tail (`spare_always`: in every
   pool). A pool of short or cached prompts that prefills a small share of
   its time (chat, the decode pool of conditional P/D) absorbs them.
   A pool grows to `up`; it shrinks only to what `keep` still fits.
4. with `choose_layout` (the prefill pool's minimum is 0), the decode workers
   alone, prefilling every prompt, are sized too: while they need no more
   workers than both pools (spares included), the prefill pool is proposed
   empty, once the decode workers it needs serve (it is chosen only where
   the limits can start them beside the prefill workers kept meanwhile);
   back to two pools only when they need two workers fewer. Two pools win when long prompts would
   make short ones wait behind them: the queue model sees it in the mix's
   second moment.
No traffic (or a zero rate) proposes zero: the planner then keeps the pools at
their minimums. Nothing here can become NaN: rates and predictions are clamped
to finite values >= 0.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, replace

from planner.predict import ForecastErrors, KalmanPredictor, Predictor
from planner.profile import EngineProfile
from planner.sizing import (
    BUSY_SHARE,
    Needs,
    Targets,
    Workload,
    fit_prefill_correction,
    needs,
    predicted_ttft_s,
)
from planner.types import Observation, Pool, Proposal, Replicas, Traffic


@dataclass(frozen=True, slots=True)
class SlaPolicyConfig:
    ttft_target_s: float
    itl_target_s: float
    max_utilization: float = 0.9  # prefill replicas are never planned busier than this
    kv_headroom: float = 0.9  # fraction of a replica's KV cache the plan may fill
    smoothing: float = 0.3  # weight of the newest sample in the output-length and correction averages
    correction_min: float = 0.5
    correction_max: float = 3.0
    startup_s: float = 30.0  # a new worker serves this long after it is asked for: scale up for then
    down_headroom: float = 0.2  # shrink only if the predicted peak over the next startup_s, + this share, fits
    prefill_pool: bool = True  # False: aggregated workers only; every prefill runs on the decode pool
    react_to_measured: bool = False  # scale up at once for a measured rate above the prediction (a burst's onset)
    length_window_s: float = 60.0  # prompt lengths, cached and remote shares: over the requests of this long
    spare_replicas: int = 0  # workers added to each pool that needs any, beyond what the model sizes (N+1), where
    # two of its long prompts together would miss the TTFT target (sizing.pair_s) or it prefills more than half
    # the time (sizing.BUSY_SHARE)
    spare_always: bool = False  # spare_replicas in every pool that needs any, whatever its prompts
    choose_layout: bool = False  # weigh the prefill pool every tick: none while decode workers alone need fewer
    forecast_margin: float = 0.0  # scale up for the forecast + this quantile of its errors one start-up ahead; 0: off
    forecast_margin_window_s: float = 600.0  # ... of the forecasts settled over this long
    max_decode: int | None = None  # choose_layout: the planner's limits (the decode pool's max_replicas, the
    max_total: int | None = None  # budget): one pool is chosen only if its decode workers can be started


class SlaPolicy:
    name = "sla"

    def __init__(self, config: SlaPolicyConfig, profile: EngineProfile, predictor: Predictor | None = None) -> None:
        self.config = config
        self.profile = profile
        self.predictor: Predictor = predictor if predictor is not None else KalmanPredictor()
        self.prefill_correction = 1.0
        self.decode_correction = 1.0
        self.workload: Workload | None = None
        self.one_pool = False  # choose_layout: the last tick proposed no prefill pool
        self.rate = 0.0  # the last measured rate
        self._itl: float | None = None
        self._last_tick: float | None = None
        self._lengths = LengthWindow(config.length_window_s)
        self.errors = ForecastErrors(config.forecast_margin, config.forecast_margin_window_s) \
            if config.forecast_margin > 0 else None
        self.margin = 0.0  # the last tick's forecast margin (requests/s)
        self._targets = Targets(config.ttft_target_s, config.itl_target_s, config.max_utilization, config.kv_headroom)

    def propose(self, obs: Observation, current: Replicas, now: float) -> dict[Pool, Proposal]:
        t = obs.traffic
        dt = now - self._last_tick if self._last_tick is not None and now > self._last_tick else None
        self._last_tick = now
        rate = t.request_rate if t is not None and math.isfinite(t.request_rate) and t.request_rate > 0 else 0.0
        self.rate = rate
        self.predictor.observe(now, rate, max(rate, 0.1) / dt if dt else None)  # Poisson noise of a count
        if self.errors is not None:
            self.errors.measured(now, rate, dt)
        if rate == 0.0:
            idle = Proposal(0, "no traffic")
            return {Pool.PREFILL: idle, Pool.DECODE: idle}
        assert t is not None
        self._remember(t, now, dt)
        if self.workload is None:
            keep = "lengths not measured yet"
            return {Pool.PREFILL: Proposal(current.prefill, keep), Pool.DECODE: Proposal(current.decode, keep)}
        self._correct(obs, t, current)
        c = self.config
        now_rate = self.predictor.predict(now)
        # A worker asked for now serves from now + startup_s; one asked at the next tick serves an interval
        # later. So this tick's must carry the load predicted until then: a burst's edge falls between ticks.
        then = [self.predictor.predict(now + c.startup_s + (dt or 0.0) * i / 2) for i in range(3)]
        ahead = max(then)
        steps = max(1, math.ceil(c.startup_s / 5))
        peak = max(self.predictor.predict(now + c.startup_s * i / steps) for i in range(steps + 1))
        if self.errors is not None:
            self.errors.forecast(now + c.startup_s, then[0], self.predictor.warm)
            self.margin = self.errors.margin()
        up_rate = max(ahead + self.margin, now_rate, rate if self.config.react_to_measured else 0.0)
        keep_rate = peak * (1 + c.down_headroom)
        up, keep = self._needs(up_rate), self._needs(keep_rate)
        margin = f" + {self.margin:.2f} forecast margin" if self.margin else ""
        seen = (f"rate {rate:.2f}/s (now {now_rate:.2f}, in {c.startup_s:g}-{c.startup_s + (dt or 0.0):g}s "
                f"{ahead:.2f}{margin}, peak {peak:.2f}): ")
        if c.choose_layout and c.prefill_pool:
            one_pool = self._one_pool(obs, current, up, up_rate, keep_rate, seen)
            if not isinstance(one_pool, str):
                return one_pool
            seen += one_pool
        (spare_p, why_p), (spare_d, why_d) = (self._spare(up.pair_prefill, up.busy_prefill),
                                              self._spare(up.pair_decode, up.busy_decode))
        return {
            Pool.PREFILL: _plan(current.prefill, up.prefill, keep.prefill, seen + up.why_prefill + why_p, spare_p),
            Pool.DECODE: _plan(current.decode, up.decode, keep.decode, seen + up.why_decode + why_d, spare_d),
        }

    def _spare(self, pair_s: float, busy: float) -> tuple[int, str]:
        """The spare workers of a pool whose two long prompts together take `pair_s` (sizing.pair_s) and whose
        whole workers spend `busy` of their time prefilling: none where the first is within the TTFT target and
        the second at most `BUSY_SHARE` (the pool absorbs such coincidences, and a prompt seldom waits), and why."""
        c = self.config
        if not c.spare_replicas or c.spare_always or pair_s > c.ttft_target_s or busy > BUSY_SHARE:
            return c.spare_replicas, ""
        return 0, f"; no spare: two long prompts together take {pair_s:.2f} s, prefills keep it {busy:.0%} busy"

    def _one_pool(self, obs: Observation, current: Replicas, up: Needs, up_rate: float, keep_rate: float,
                  seen: str) -> dict[Pool, Proposal] | str:
        """choose_layout: the proposals without a prefill pool, if decode workers alone need no more workers
        than both pools (a tie goes to one pool: no KV transfer, one spare, any worker takes any prompt) and no
        more than the limits can start beside the prefill workers, kept until the decode workers serve (else
        the prefill workers would wait for decode workers the budget never starts: 4P + 4D all run long);
        or, once one pool is built, unless both pools need two workers fewer (a layout is not changed back and
        forth for one worker: each change starts workers). Every prefill then runs on the
        decode workers, no faster than the profile's lone prefill nor than the prefill pool's measured one (its
        correction, fitted to remote prefills, several at a time on a prefill worker): a decode worker
        prefills between its decode steps. Both pools kept: a note for the decision's reason instead ("" unless
        one pool was cheaper and the limits alone refused it)."""
        assert self.workload is not None
        local, correction = replace(self.workload, remote_share=0.0), max(1.0, self.prefill_correction)
        alone = self._needs(up_rate, local, correction)
        (spare_p, _), (spare_d, _), (spare, why_spare) = (
            self._spare(up.pair_prefill, up.busy_prefill), self._spare(up.pair_decode, up.busy_decode),
            self._spare(alone.pair_decode, alone.busy_decode))
        pools, one = _workers(up.prefill, spare_p) + _workers(up.decode, spare_d), _workers(alone.decode, spare)
        c = self.config  # can the decode workers be started beside the prefill workers kept meanwhile?
        fits = (c.max_decode is None or one <= c.max_decode) and (c.max_total is None or
                                                                  one + current.prefill <= c.max_total)
        why = f"decode workers alone need {one}, with a prefill pool {pools}"
        if self.one_pool and not current.prefill:  # one pool, built
            self.one_pool = one <= pools + 1
        else:  # two pools, or the prefill workers still waiting for the decode workers that replace them
            cheaper = one <= pools + (1 if self.one_pool else 0)
            self.one_pool = cheaper and fits
            if cheaper and not fits:
                return (f"{why}, but the limits cannot start {one} decode workers beside the {current.prefill} "
                        f"prefill kept meanwhile: both pools kept; ")
        if not self.one_pool:
            return ""
        decode = _plan(current.decode, alone.decode, self._needs(keep_rate, local, correction).decode,
                       seen + alone.why_decode + why_spare, spare)
        serving = len(obs.decode)  # decode workers reporting load: started, not starting
        if current.prefill and serving < decode.replicas:  # make before break
            return {Pool.PREFILL: Proposal(current.prefill, f"{seen}{why}: the prefill pool kept until the decode "
                                                            f"workers serve ({serving} of {decode.replicas})"),
                    Pool.DECODE: decode}
        return {Pool.PREFILL: Proposal(0, seen + why + ": no prefill pool"), Pool.DECODE: decode}

    def _needs(self, rate: float, workload: Workload | None = None, prefill_correction: float | None = None) -> Needs:
        assert self.workload is not None
        pc = self.prefill_correction if prefill_correction is None else prefill_correction
        return needs(self.profile, workload or self.workload, rate, self._targets, pc, self.decode_correction,
                     self._itl)

    def _remember(self, t: Traffic, now: float, dt: float | None) -> None:
        a, old = self.config.smoothing, self.workload
        if t.itl_s is not None:
            self._itl = t.itl_s if self._itl is None else a * t.itl_s + (1 - a) * self._itl
        dist = t.isl_dist or (((t.isl, 1.0),) if t.isl is not None else ())
        if dist:
            self._lengths.add(now, t.request_rate * dt if dt else 1.0, dist, t.cached_share, t.remote_share)
        dist, cached, remote = self._lengths.merged(now)
        osl = t.osl if t.osl is not None else old.osl if old else None
        if not dist or osl is None:
            return
        if old is not None:  # the output length is a mean over few requests: smooth it
            osl = a * osl + (1 - a) * old.osl
        cached = cached if cached is not None else 0.0
        remote = remote if remote is not None else 1.0
        if not self.config.prefill_pool:
            remote = 0.0
        self.workload = Workload(dist, osl, min(max(cached, 0.0), 1.0), min(max(remote, 0.0), 1.0))

    def predicted_ttft_s(self, rate: float, replicas: int) -> float | None:
        """Mean TTFT the model predicts at `rate` on `replicas` prefill workers, over remote and local
        prefills (None: the prefill pool saturated)."""
        assert self.workload is not None
        return predicted_ttft_s(self.profile, self.workload, rate, replicas, self.config.ttft_target_s)

    def _correct(self, obs: Observation, t: Traffic, current: Replicas) -> None:
        assert self.workload is not None
        c = self.config
        backlog = (obs.prefill_queue or 0) > current.prefill  # the wait then measures the backlog, not the model
        if current.prefill > 0 and c.prefill_pool and not backlog:
            samples = []
            if t.remote_prefill_s is not None:
                samples.append(fit_prefill_correction(self.profile, self.workload, t.request_rate, current.prefill,
                               c.ttft_target_s, t.remote_prefill_s, c.correction_min, c.correction_max))
            if t.ttft_s is not None and t.ttft_s > c.ttft_target_s:
                predicted = self.predicted_ttft_s(t.request_rate, current.prefill)
                if predicted:
                    samples.append(t.ttft_s / predicted)
            if samples:
                self.prefill_correction = self._blend(self.prefill_correction, max(samples))
        running = [w.running for w in obs.decode if w.running > 0]
        if t.itl_s is not None and running:
            w = self.workload
            predicted = self.profile.decode_itl_s(w.mean_isl + w.osl / 2, sum(running) / len(running))
            if predicted > 0:
                self.decode_correction = self._blend(self.decode_correction, t.itl_s / predicted)

    def _blend(self, old: float, sample: float) -> float:
        c = self.config
        sample = min(c.correction_max, max(c.correction_min, sample)) if math.isfinite(sample) else old
        return c.smoothing * sample + (1 - c.smoothing) * old


def _workers(x: float, spare: int) -> int:
    """Whole workers for a fractional need, with the spare a pool that needs any gets."""
    return math.ceil(x + spare - 1e-9) if x > 0 else 0


def _plan(n: int, up: float, keep: float, why: str, spare: int) -> Proposal:
    want_up, want_keep = _workers(up, spare), _workers(keep, spare)
    if spare and (up > 0 or keep > 0):  # a pool that needs no worker gets no spare one
        up, keep = (x + spare if x > 0 else x for x in (up, keep))
        why += f"; + {spare} spare"
    if want_up > n:
        return Proposal(want_up, f"{why} -> {up:.2f} replicas ahead")
    if want_keep < n:
        return Proposal(max(want_keep, want_up), f"{why}; the peak ahead + headroom fits {want_keep}")
    return Proposal(n, f"{why}; {n} kept for the peak ahead ({keep:.2f} with headroom)")


class LengthWindow:
    """The prompt-length distribution (and the cached and remote shares) of the requests of the last
    `window_s` seconds: each interval's, weighted by its request count. One interval of a heavy-tailed
    length distribution holds too few requests: at 2 requests/s, ten seconds' mean prompt swings 4x."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._entries: deque[tuple[float, float, tuple[tuple[float, float], ...], float | None, float | None]] = deque()

    def add(self, now: float, count: float, dist: tuple[tuple[float, float], ...], cached: float | None,
            remote: float | None) -> None:
        if count > 0 and math.isfinite(count):
            self._entries.append((now, count, dist, cached, remote))

    def merged(self, now: float) -> tuple[tuple[tuple[float, float], ...], float | None, float | None]:
        """(distribution, cached share, remote share) over the window; the newest interval is always in."""
        while len(self._entries) > 1 and self._entries[0][0] <= now - self.window_s:
            self._entries.popleft()
        total = sum(n for _, n, *_ in self._entries)
        dist = tuple((x, share * n / total) for _, n, d, _, _ in self._entries for x, share in d) if total else ()
        return dist, _weighted([(n, c) for _, n, _, c, _ in self._entries]), \
            _weighted([(n, r) for _, n, _, _, r in self._entries])


def _weighted(pairs: list[tuple[float, float | None]]) -> float | None:
    known = [(n, v) for n, v in pairs if v is not None and math.isfinite(v)]
    total = sum(n for n, _ in known)
    return sum(n * v for n, v in known) / total if total else None
