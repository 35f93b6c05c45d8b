"""The planner's decision state machine: a policy's proposals, made safe.

Every tick `Planner.tick(obs, current)` asks the policy what each pool should
have, then applies, in order and per pool:
1. limits: never below `min_replicas` nor above `max_replicas`;
2. cool-down: a pool scaled up less than `cooldown_s` ago keeps its size
   (its new replicas are still starting and absorbing load);
3. hysteresis: a pool shrinks only after `scale_down_after` ticks in a row
   that asked for less (one quiet interval on a noisy load removes nothing);
4. step: at most `max_step` replicas removed per tick, and at most
   `max_step_up` added (None: no limit; a pool grows at once to what the
   policy asks, within its limits and the budget);
5. budget: prefill + decode within `max_total`; when growth does not fit, the
   pool asking for the larger relative increase gets the room first.
Each constraint that changes a number says so in the decision's reason. Pure:
time comes from the injected clock, and nothing is applied here.
"""

from __future__ import annotations

from planner.clock import Clock
from planner.policy import Policy
from planner.types import (
    Decision,
    Limits,
    Observation,
    Pool,
    PoolDecision,
    Proposal,
    Replicas,
)


class Planner:
    def __init__(self, policy: Policy, limits: Limits, clock: Clock) -> None:
        if limits.prefill.min_replicas + limits.decode.min_replicas > limits.max_total:
            raise ValueError("the pools' minimums exceed the replica budget")
        self.policy = policy
        self.limits = limits
        self.clock = clock
        self._last_up: dict[Pool, float] = {}
        self._down_streak: dict[Pool, int] = {Pool.PREFILL: 0, Pool.DECODE: 0}

    def tick(self, obs: Observation, current: Replicas) -> Decision:
        now = self.clock.now()
        proposals = self.policy.propose(obs, current, now)
        targets: dict[Pool, tuple[int, list[str]]] = {}
        for pool in Pool:
            targets[pool] = self._constrain(pool, proposals[pool], current.of(pool), now)
        self._fit_budget(targets, current)
        decisions = {}
        for pool in Pool:
            target, why = targets[pool]
            if target > current.of(pool):
                self._last_up[pool] = now
            if target < current.of(pool):
                self._down_streak[pool] = 0
            decisions[pool] = PoolDecision(pool, current.of(pool), proposals[pool].replicas, target, "; ".join(why))
        notes = _notes(obs)
        return Decision(now, decisions[Pool.PREFILL], decisions[Pool.DECODE], notes)

    def _constrain(self, pool: Pool, proposal: Proposal, n: int, now: float) -> tuple[int, list[str]]:
        lim, why = self.limits.of(pool), [proposal.reason]
        want = min(max(proposal.replicas, lim.min_replicas), lim.max_replicas)
        if want != proposal.replicas:
            why.append(f"limited to [{lim.min_replicas}, {lim.max_replicas}]")
        if want < n:
            self._down_streak[pool] += 1
        else:
            self._down_streak[pool] = 0
        if n < lim.min_replicas or n > lim.max_replicas:
            return want, why + ["outside its limits: corrected at once"]
        since_up = now - self._last_up.get(pool, float("-inf"))
        if want != n and since_up < self.limits.cooldown_s:
            return n, why + [f"held: cool-down after a scale-up {since_up:.0f}s ago"]
        if want < n and self._down_streak[pool] < self.limits.scale_down_after:
            return n, why + [f"held: low for {self._down_streak[pool]}/{self.limits.scale_down_after} ticks"]
        step = self.limits.max_step_up if want > n else self.limits.max_step
        if step is not None and abs(want - n) > step:
            want = n + step if want > n else n - step
            why.append(f"step limited to {step}")
        return want, why

    def _fit_budget(self, targets: dict[Pool, tuple[int, list[str]]], current: Replicas) -> None:
        budget = self.limits.max_total
        while sum(t for t, _ in targets.values()) > budget:
            growing = [p for p in Pool if targets[p][0] > max(current.of(p), self.limits.of(p).min_replicas)]
            if growing:
                # Trim the pool whose requested increase is the smaller relative one.
                pool = min(growing, key=lambda p: (targets[p][0] / max(current.of(p), 1), p.value))
            else:
                shrinkable = [p for p in Pool if targets[p][0] > self.limits.of(p).min_replicas]
                if not shrinkable:
                    return
                pool = max(shrinkable, key=lambda p: (targets[p][0], p.value))
            target, why = targets[pool]
            if not why or not why[-1].startswith("budget"):
                why.append(f"budget {budget} total")
            targets[pool] = (target - 1, why)


def _notes(obs: Observation) -> tuple[str, ...]:
    notes = []
    if obs.prefill_queue is None:
        notes.append("prefill queue depth absent")
    if not obs.decode:
        notes.append("no decode load reports")
    if obs.traffic is None:
        notes.append("no frontend traffic metrics")
    return tuple(notes)
