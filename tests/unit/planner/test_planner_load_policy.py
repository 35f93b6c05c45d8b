"""The load-based policy under the planner's constraints, on scripted inputs and a virtual clock."""

from __future__ import annotations

import dataclasses
import random

from planner import (
    DecodeLoad, Limits, LoadPolicy, LoadPolicyConfig, Observation, Planner, PoolLimits, Replicas, VirtualClock,
)  # fmt: skip

INTERVAL = 10.0


def decode(kv: float, n: int, waiting: int = 0) -> tuple[DecodeLoad, ...]:
    return tuple(DecodeLoad(f"d{i}", kv, waiting, 4) for i in range(n))


class Loop:
    """Ticks a planner every INTERVAL seconds and applies its decisions at once."""

    def __init__(self, limits: Limits, config: LoadPolicyConfig = LoadPolicyConfig(), start: Replicas = Replicas(1, 1)):
        self.clock = VirtualClock()
        self.planner = Planner(LoadPolicy(config), limits, self.clock)
        self.replicas = start
        self.history: list[Replicas] = []
        self.decisions = []

    def tick(self, obs: Observation) -> Replicas:
        self.clock.advance(INTERVAL)
        d = self.planner.tick(obs, self.replicas)
        self.decisions.append(d)
        self.replicas = d.replicas
        self.history.append(self.replicas)
        return self.replicas


def test_scales_prefill_up_on_a_rising_queue(limits):
    loop = Loop(limits)
    for depth in (0, 0, 0, 0, 0, 0, 1, 2, 3, 5):
        loop.tick(Observation(prefill_queue=depth, decode=decode(0.5, 1)))
    assert loop.replicas.prefill == 2
    up = next(d for d in loop.decisions if d.prefill.delta > 0)
    assert "queue" in up.prefill.reason and "ahead 30s" in up.prefill.reason


def test_trend_scales_before_the_threshold_is_crossed(limits):
    with_trend, without = Loop(limits), Loop(limits, LoadPolicyConfig(trend_horizon_s=0))
    for depth in (0, 0, 0, 0, 0, 0, 1, 2, 3):  # never above 4 per replica
        with_trend.tick(Observation(prefill_queue=depth, decode=decode(0.5, 1)))
        without.tick(Observation(prefill_queue=depth, decode=decode(0.5, 1)))
    assert with_trend.replicas.prefill == 2
    assert without.replicas.prefill == 1


def test_scales_decode_up_on_kv_usage_and_waiting(limits):
    loop = Loop(limits)
    loop.tick(Observation(prefill_queue=0, decode=decode(0.9, 1)))
    assert loop.replicas.decode == 2
    loop2 = Loop(limits)
    loop2.tick(Observation(prefill_queue=0, decode=decode(0.4, 1, waiting=5)))
    assert loop2.replicas.decode == 2
    assert "waiting" in loop2.decisions[-1].decode.reason


def test_no_flapping_on_a_noisy_steady_load(limits):
    rng = random.Random(7)
    loop = Loop(limits, start=Replicas(2, 2))
    for _ in range(200):
        loop.tick(Observation(prefill_queue=max(0, round(rng.gauss(4, 2))),
                              decode=decode(min(1.0, max(0.0, rng.gauss(0.55, 0.08))), 2)))
    changes = sum(1 for a, b in zip(loop.history, loop.history[1:]) if a != b)
    assert changes <= 2, loop.history
    assert loop.replicas.decode == 2


def test_cool_down_after_a_scale_up_is_honoured(limits):
    loop = Loop(limits)
    loop.tick(Observation(prefill_queue=20, decode=decode(0.5, 1)))
    assert loop.replicas.prefill == 2
    for _ in range(5):  # 50 s of a still-growing queue: held by the 60 s cool-down
        loop.tick(Observation(prefill_queue=40, decode=decode(0.5, 1)))
        assert loop.replicas.prefill == 2
        assert "cool-down" in loop.decisions[-1].prefill.reason
    loop.tick(Observation(prefill_queue=40, decode=decode(0.5, 1)))
    assert loop.replicas.prefill == 3


def test_cool_down_also_holds_a_scale_down(limits):
    loop = Loop(limits)
    loop.tick(Observation(prefill_queue=20, decode=decode(0.5, 1)))
    for _ in range(4):
        loop.tick(Observation(prefill_queue=0, decode=decode(0.5, 1)))
    assert loop.replicas.prefill == 2
    for _ in range(3):
        loop.tick(Observation(prefill_queue=0, decode=decode(0.5, 1)))
    assert loop.replicas.prefill == 1


def test_step_limits_each_change(limits):
    loop = Loop(dataclasses.replace(limits, cooldown_s=0))
    loop.tick(Observation(prefill_queue=100, decode=decode(1.0, 1, waiting=50)))
    assert loop.replicas == Replicas(2, 2)
    assert "step limited" in loop.decisions[-1].prefill.reason


def test_budget_and_maximums_are_honoured():
    limits = Limits(prefill=PoolLimits(1, 6), decode=PoolLimits(1, 3), max_total=5, max_step=4, cooldown_s=0)
    loop = Loop(limits)
    for _ in range(6):
        loop.tick(Observation(prefill_queue=200, decode=decode(1.0, loop.replicas.decode, waiting=50)))
        assert loop.replicas.total <= 5
        assert loop.replicas.decode <= 3
    assert loop.replicas.total == 5
    assert any("budget" in d.prefill.reason or "budget" in d.decode.reason for d in loop.decisions)


def test_minimums_are_honoured_and_a_pool_below_them_is_raised():
    limits = Limits(prefill=PoolLimits(2, 4), decode=PoolLimits(1, 4), max_total=8, cooldown_s=0)
    loop = Loop(limits, start=Replicas(0, 1))
    loop.tick(Observation(prefill_queue=0, decode=decode(0.0, 1)))
    assert loop.replicas.prefill == 2
    for _ in range(20):
        loop.tick(Observation(prefill_queue=0, decode=decode(0.0, 1)))
    assert loop.replicas == Replicas(2, 1)


def test_scales_down_to_minimum_when_idle(limits):
    loop = Loop(limits, start=Replicas(4, 4))
    for _ in range(40):
        loop.tick(Observation(prefill_queue=0, decode=decode(0.01, loop.replicas.decode)))
    assert loop.replicas == Replicas(1, 1)


def test_scales_down_to_minimum_when_metrics_are_absent(limits):
    loop = Loop(limits, start=Replicas(3, 3))
    for _ in range(40):
        loop.tick(Observation())
    assert loop.replicas == Replicas(1, 1)
    assert "absent" in loop.decisions[-1].explain()


def test_scale_down_waits_for_consecutive_low_ticks(limits):
    loop = Loop(limits, start=Replicas(3, 3))
    pattern = [0, 0, 6, 0, 0, 6, 0, 0, 6]  # never three quiet ticks in a row
    for depth in pattern:
        loop.tick(Observation(prefill_queue=depth, decode=decode(0.5, 3)))
    assert loop.replicas.prefill == 3


def test_zero_minimum_prefill_pool_starts_on_demand():
    limits = Limits(prefill=PoolLimits(0, 2), decode=PoolLimits(1, 2), max_total=4, cooldown_s=0)
    loop = Loop(limits, start=Replicas(0, 1))
    loop.tick(Observation(prefill_queue=1, decode=decode(0.5, 1)))
    assert loop.replicas.prefill == 1


def test_every_decision_explains_itself(limits):
    loop = Loop(limits)
    d = loop.planner.tick(Observation(prefill_queue=3, decode=decode(0.5, 1)), Replicas(1, 1))
    text = d.explain()
    assert "prefill 1->1" in text and "decode 1->1" in text and "within thresholds" in text
