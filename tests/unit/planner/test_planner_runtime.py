"""The planner's I/O edges without servers: frontend metrics, Prometheus, the service loop, the
local connector, wiring from cluster.yaml."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from dynamo_lite.config import ClusterSpec
from dynamo_lite.frontend.metrics import FrontendMetrics
from planner import (
    Decision, DecodeLoad, LoadPolicy, Observation, Planner, Pool, PoolDecision, Replicas, SlaPolicy, Traffic,
    VirtualClock,
)  # fmt: skip
from planner.connectors.local import LocalConnector
from planner.predict import SeasonalConfig, SeasonalPredictor
from dynamo_lite.planning.frontend_metrics import totals, traffic
from dynamo_lite.planning.metrics import PlannerMetrics
from dynamo_lite.planning.service import PlannerService
from dynamo_lite.planning.stage import make_limits, make_policy, planner_stage, scaled_pools


def test_traffic_from_the_frontends_own_metrics():
    registry = CollectorRegistry()
    m = FrontendMetrics(registry)

    def finish(model: str, isl: int, osl: int, ttft: float, itl: float) -> None:
        m.requests.labels(model=model, endpoint="chat", status="200").inc()
        m.input_tokens.labels(model=model).inc(isl)
        m.output_tokens.labels(model=model).inc(osl)
        m.ttft.labels(model=model).observe(ttft)
        for _ in range(osl - 1):
            m.itl.labels(model=model).observe(itl)

    finish("m", 1000, 11, 0.2, 0.02)
    before = totals(generate_latest(registry).decode(), "m")
    for _ in range(4):
        finish("m", 3000, 101, 0.4, 0.01)
    finish("other", 99999, 5, 9.0, 9.0)
    m.in_flight.labels(model="m").set(2)  # two more arrived and are still running
    t = traffic(before, totals(generate_latest(registry).decode(), "m"), dt=2.0)
    assert t.request_rate == pytest.approx(3.0)
    assert t.isl == pytest.approx(3000) and t.osl == pytest.approx(101)
    assert t.ttft_s == pytest.approx(0.4) and t.itl_s == pytest.approx(0.01)
    idle = traffic(before, before, dt=10.0)
    assert idle.request_rate == 0 and idle.isl is None and idle.ttft_s is None


def test_metrics_cover_inputs_decisions_and_replicas():
    registry = CollectorRegistry()
    metrics = PlannerMetrics(registry)
    obs = Observation(prefill_queue=7, prefill_in_flight=3, decode=(DecodeLoad("d0", 0.5, 2, 9),),
                      traffic=Traffic(request_rate=4.0, isl=1000, osl=100, ttft_s=0.3, itl_s=0.02))
    d = Decision(0.0, PoolDecision(Pool.PREFILL, 1, 3, 2, "x"), PoolDecision(Pool.DECODE, 2, 2, 2, "y"))
    metrics.record(obs, d)
    text = generate_latest(registry).decode()
    for line in ('dynamo_lite_planner_prefill_queue_depth 7.0', 'dynamo_lite_planner_prefill_in_flight 3.0',
                 'dynamo_lite_planner_decode_kv_usage{worker="d0"} 0.5', 'dynamo_lite_planner_decode_waiting 2.0',
                 'dynamo_lite_planner_request_rate 4.0', 'dynamo_lite_planner_isl_tokens 1000.0',
                 'dynamo_lite_planner_osl_tokens 100.0', 'dynamo_lite_planner_ttft_seconds 0.3',
                 'dynamo_lite_planner_itl_seconds 0.02', 'dynamo_lite_planner_replicas{pool="prefill"} 1.0',
                 'dynamo_lite_planner_proposed_replicas{pool="prefill"} 3.0',
                 'dynamo_lite_planner_target_replicas{pool="prefill"} 2.0',
                 'dynamo_lite_planner_decisions_total{direction="up",pool="prefill"} 1.0',
                 'dynamo_lite_planner_decisions_total{direction="hold",pool="decode"} 1.0'):
        assert line in text, line
    metrics.record(Observation(), d)
    assert "dynamo_lite_planner_prefill_queue_depth -1.0" in generate_latest(registry).decode()


class FakePool:
    def __init__(self, n: int, delay_s: float = 0.05, fail: bool = False) -> None:
        self.size, self.delay_s, self.fail, self.calls = n, delay_s, fail, []

    async def scale_to(self, n: int) -> None:
        self.calls.append(n)
        self.size = n
        await asyncio.sleep(self.delay_s)
        if self.fail:
            raise RuntimeError("boom")


def decision(p: tuple[int, int], d: tuple[int, int]) -> Decision:
    return Decision(0.0, PoolDecision(Pool.PREFILL, p[0], p[1], p[1], "t"), PoolDecision(Pool.DECODE, d[0], d[1], d[1], "t"))


async def test_local_connector_applies_in_the_background_one_change_per_pool_at_a_time():
    prefill, decode = FakePool(1, delay_s=0.2), FakePool(2)
    c = LocalConnector({Pool.PREFILL: prefill, Pool.DECODE: decode})
    c.apply(decision((1, 3), (2, 1)))
    assert c.busy() == {"prefill": True, "decode": True}
    c.apply(decision((3, 4), (1, 1)))  # prefill still busy: not applied
    await c.wait_idle()
    assert prefill.calls == [3] and decode.calls == [1] and c.current() == Replicas(3, 1)
    failing = LocalConnector({Pool.DECODE: FakePool(1, fail=True)})
    failing.apply(decision((0, 0), (1, 2)))
    await failing.wait_idle()
    assert failing.failures == 1 and failing.current() == Replicas(0, 2)


async def test_service_ticks_records_and_dry_run_applies_nothing():
    async def observe(now: float) -> Observation:
        return Observation(prefill_queue=50, prefill_in_flight=0, decode=(DecodeLoad("d", 0.95, 0, 1),))

    for dry_run in (True, False):
        pools = {Pool.PREFILL: FakePool(1), Pool.DECODE: FakePool(1)}
        connector = LocalConnector(pools)  # type: ignore[arg-type]
        svc = PlannerService(Planner(LoadPolicy(), make_limits(ClusterSpec().planner, True), VirtualClock()),
                             connector, observe, 1.0, CollectorRegistry(), dry_run=dry_run)
        d = await svc.tick()
        await connector.wait_idle()
        assert d.replicas == Replicas(4, 2) and svc.decisions == [d]  # prefill: 50 jobs, at most 4 workers
        assert connector.current() == (Replicas(1, 1) if dry_run else Replicas(4, 2))


def test_wiring_from_the_spec():
    spec = ClusterSpec.model_validate({
        "models": [{"name": "m", "path": "builtin:tiny"}],
        "pools": [{"name": "p", "role": "prefill", "engine": "mock"}, {"name": "d", "role": "decode", "engine": "mock"}],
        "planner": {"enabled": True, "policy": "sla", "decode": {"min_replicas": 2, "max_replicas": 3}, "max_step": 1,
                    "max_step_up": 4, "length_window_s": 120, "spare_replicas": 2, "spare_always": True,
                    "forecast_margin": 0.9,
                    "forecast_margin_window_s": 300},
    })
    assert {k: v.name for k, v in scaled_pools(spec).items()} == {Pool.PREFILL: "p", Pool.DECODE: "d"}
    policy = make_policy(spec.planner)
    assert isinstance(policy, SlaPolicy) and policy.config.length_window_s == 120
    assert policy.config.spare_replicas == 2 and policy.config.spare_always
    assert (policy.config.max_decode, policy.config.max_total) == (3, 8)
    assert policy.errors is not None and (policy.errors.quantile, policy.errors.window_s) == (0.9, 300)
    default = ClusterSpec.model_validate({**spec.model_dump(), "planner": {"enabled": True, "policy": "sla"}})
    assert make_policy(default.planner).config.spare_replicas == 1  # type: ignore[attr-defined]
    assert not make_policy(default.planner).config.spare_always  # type: ignore[attr-defined]
    assert make_policy(default.planner).config.forecast_margin == 0.95  # type: ignore[attr-defined]
    off = ClusterSpec.model_validate({**spec.model_dump(), "planner": {"enabled": True, "policy": "sla",
                                                                       "forecast_margin": 0}}).planner
    assert make_policy(off).errors is None  # type: ignore[attr-defined]
    assert not make_policy(default.planner).config.choose_layout  # type: ignore[attr-defined]
    no_min = {"enabled": True, "policy": "sla", "prefill": {"min_replicas": 0}}
    no_min_spec = ClusterSpec.model_validate({**spec.model_dump(), "planner": no_min}).planner
    assert make_policy(no_min_spec).config.choose_layout  # type: ignore[attr-defined]  # the pool may go
    assert not make_policy(no_min_spec, has_prefill=False).config.choose_layout  # type: ignore[attr-defined]
    seasonal = {"enabled": True, "policy": "sla", "predictor": "seasonal", "season_s": 3600}
    predictor = make_policy(ClusterSpec.model_validate({**spec.model_dump(), "planner": seasonal}).planner).predictor
    assert isinstance(predictor, SeasonalPredictor) and predictor.config == SeasonalConfig(3600, max_harmonics=4)
    sine = make_policy(ClusterSpec.model_validate({**spec.model_dump(), "planner": {**seasonal, "season_harmonics": 1}
                                                   }).planner).predictor
    assert sine.config.max_harmonics == 1  # type: ignore[attr-defined]
    limits = make_limits(spec.planner, has_prefill=True)
    assert (limits.decode.min_replicas, limits.decode.max_replicas, limits.max_total) == (2, 3, 8)
    assert (limits.max_step, limits.max_step_up) == (1, 4)
    assert make_limits(spec.planner, has_prefill=False).prefill.max_replicas == 0
    assert planner_stage(ClusterSpec(), spec_path=None, endpoints=None, pools=[]) == []  # type: ignore[arg-type]


def test_each_policy_has_its_own_hold_and_patience_and_growth_is_unlimited_by_default():
    def limits(**planner: object) -> tuple[float, int, int, int | None]:
        lim = make_limits(ClusterSpec.model_validate({"planner": planner}).planner, has_prefill=True)
        return lim.cooldown_s, lim.scale_down_after, lim.max_step, lim.max_step_up

    # sla sizes for the rate one start-up ahead: no hold; load reacts to queues new workers have not drained yet
    assert limits(policy="sla") == (0.0, 2, 1, None)
    assert limits(policy="load") == (60.0, 3, 1, None)
    assert limits(policy="sla", cooldown_s=30, scale_down_after=4, max_step_up=2) == (30.0, 4, 1, 2)


def test_spec_rejects_inconsistent_planner_settings():
    with pytest.raises(ValueError, match="_down threshold"):
        ClusterSpec.model_validate({"planner": {"decode_kv_down": 0.9, "decode_kv_up": 0.8}})
    with pytest.raises(ValueError, match="exceed max_total_replicas"):
        ClusterSpec.model_validate({"planner": {"max_total_replicas": 1}})


def test_standalone_connectors():
    from dynamo_lite.planning.__main__ import make_connector
    from dynamo_lite.planning.kubernetes import KubernetesConnector
    from planner.connectors.observe_only import ObserveOnlyConnector

    spec = ClusterSpec.model_validate({
        "models": [{"name": "m", "path": "builtin:tiny"}],
        "pools": [{"name": "p", "role": "prefill", "engine": "mock", "replicas": 2},
                  {"name": "d", "role": "decode", "engine": "mock", "replicas": 3}],
    })
    none = make_connector("none", spec)
    assert isinstance(none, ObserveOnlyConnector) and none.current() == Replicas(2, 3)
    k8s = make_connector("kubernetes", spec)
    assert isinstance(k8s, KubernetesConnector) and set(k8s.deployments) == {Pool.PREFILL, Pool.DECODE}
    assert set(k8s.deployments.values()) == {"default-pool-p", "default-pool-d"}
