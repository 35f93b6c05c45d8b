"""Wiring the planner into `orchestrator up`: `planner_stage(...)` makes its component.

The planner runs inside the supervisor process as a component of the last stage,
holding the `LocalPool`s the worker stage made, which it scales through the local
connector. Stop order is the reverse of start, so it stops before the pools do.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import aiohttp
from nats.aio.client import Client as NatsClient
from prometheus_client import CollectorRegistry

from dynamo_lite.config import ClusterSpec, PlannerSpec, PoolSpec
from dynamo_lite.discovery import WorkerWatcher, etcd_client
from dynamo_lite.planning.frontend_metrics import FrontendScraper
from dynamo_lite.planning.observer import ClusterObserver
from dynamo_lite.planning.service import PlannerService
from dynamo_lite.protocol import Role
from dynamo_lite.queue import connect_nats
from planner.clock import MonotonicClock
from planner.connectors.base import ScalingConnector
from planner.connectors.local import LocalConnector
from planner.core import Planner
from planner.load_policy import LoadPolicy, LoadPolicyConfig
from planner.policy import Policy
from planner.predict import KalmanPredictor, LastValue, Predictor, SeasonalConfig, SeasonalPredictor
from planner.profile import EngineProfile
from planner.sla_policy import SlaPolicy, SlaPolicyConfig
from planner.types import Limits, Observation, Pool, PoolLimits

log = logging.getLogger(__name__)


def make_predictor(p: PlannerSpec) -> Predictor:
    if p.predictor == "seasonal":
        assert p.season_s is not None  # the schema requires it
        return SeasonalPredictor(SeasonalConfig(period_s=p.season_s, max_harmonics=p.season_harmonics))
    return LastValue() if p.predictor == "last" else KalmanPredictor()


def make_policy(p: PlannerSpec, has_prefill: bool = True) -> Policy:
    if p.policy == "sla":
        profile = EngineProfile.load(p.profile)
        config = SlaPolicyConfig(ttft_target_s=p.ttft_target_ms / 1000, itl_target_s=p.itl_target_ms / 1000,
                                 startup_s=p.worker_startup_s, down_headroom=p.down_headroom,
                                 prefill_pool=has_prefill, react_to_measured=p.react_to_measured,
                                 length_window_s=p.length_window_s, spare_replicas=p.spare_replicas,
                                 spare_always=p.spare_always, choose_layout=has_prefill and p.prefill.min_replicas == 0,
                                 forecast_margin=p.forecast_margin, forecast_margin_window_s=p.forecast_margin_window_s,
                                 max_decode=p.decode.max_replicas, max_total=p.max_total_replicas)
        return SlaPolicy(config, profile, make_predictor(p))
    return LoadPolicy(LoadPolicyConfig(
        prefill_queue_up=p.prefill_queue_up, prefill_queue_down=p.prefill_queue_down,
        prefill_busy_up=p.prefill_busy_up, prefill_busy_down=p.prefill_busy_down, decode_kv_up=p.decode_kv_up,
        decode_kv_down=p.decode_kv_down, decode_waiting_up=p.decode_waiting_up, trend_horizon_s=p.trend_horizon_s))


def make_limits(p: PlannerSpec, has_prefill: bool) -> Limits:
    prefill = PoolLimits(p.prefill.min_replicas, p.prefill.max_replicas) if has_prefill else PoolLimits(0, 0)
    return Limits(prefill=prefill, decode=PoolLimits(p.decode.min_replicas, p.decode.max_replicas),
                  max_total=p.max_total_replicas, max_step=p.max_step, max_step_up=p.max_step_up,
                  cooldown_s=p.effective_cooldown_s, scale_down_after=p.effective_scale_down_after)


def scaled_pools(spec: ClusterSpec) -> dict[Pool, PoolSpec]:
    """The pool scaled as prefill (role prefill) and as decode (role decode, else aggregated)."""
    by_role = {r: [p for p in spec.pools if p.role == r] for r in Role}
    out = {}
    if by_role[Role.PREFILL]:
        out[Pool.PREFILL] = by_role[Role.PREFILL][0]
    decode = by_role[Role.DECODE] or by_role[Role.AGGREGATED]
    if decode:
        out[Pool.DECODE] = decode[0]
    return out


class ClusterLink:
    """The planner's connections (NATS, etcd, the frontend) and its observer; start/stop in order."""

    def __init__(self, spec: ClusterSpec, nats_url: str, etcd_url: str, model: str, decode_role: Role,
                 frontend_metrics_urls: list[str] | None = None, every_address: bool = False) -> None:
        self.spec, self.nats_url, self.etcd_url = spec, nats_url, etcd_url
        f = spec.frontend
        self.frontend_metrics_urls = frontend_metrics_urls or [f"http://{f.host}:{f.port}/metrics"]
        self.every_address = every_address  # resolve each URL's host to all its addresses (frontend pods)
        self.model, self.decode_role = model, decode_role
        self.nc: NatsClient | None = None
        self.etcd = etcd_client(etcd_url)
        self.watcher: WorkerWatcher | None = None
        self.session: aiohttp.ClientSession | None = None
        self.observer: ClusterObserver | None = None

    async def start(self) -> None:
        self.nc = await connect_nats(self.nats_url, "planner")
        await self.etcd.connect()
        self.watcher = WorkerWatcher(self.etcd, self.spec.namespace)
        await self.watcher.start()
        self.session = aiohttp.ClientSession()
        frontend = FrontendScraper(self.frontend_metrics_urls, self.model, self.session,
                                   every_address=self.every_address)
        self.observer = ClusterObserver(self.nc, self.watcher, self.spec.namespace, self.model, self.decode_role,
                                        frontend, stale_after_s=max(10.0, 3 * self.spec.planner.interval_s))
        await self.observer.start()

    async def stop(self) -> None:
        if self.observer is not None:
            await self.observer.stop()
        if self.session is not None:
            await self.session.close()
        if self.watcher is not None:
            await self.watcher.stop()
        await self.etcd.close()
        if self.nc is not None and not self.nc.is_closed:
            await self.nc.drain()

    async def observe(self, now: float) -> Observation:
        assert self.observer is not None, "ClusterLink.start() first"
        return await self.observer.observe(now)


def planner_stage(spec: ClusterSpec, spec_path: Path, endpoints: object, pools: Sequence[object],
                  on_scaled: Callable[[], None] | None = None,
                  frontend_metrics: list[str] | None = None) -> list[PlannerService]:
    """The planner component when `planner.enabled`, else nothing.

    `endpoints`: the supervisor's Endpoints (nats_url, etcd_url). `pools`: the
    components the worker stage made (LocalPools); a scaled pool missing there
    (replicas: 0 in the spec) gets a LocalPool of its own, stopped with the planner.
    `on_scaled`: called after each scaling action, e.g. to rewrite the state file
    so that `orchestrator status` lists the workers the planner added.
    `frontend_metrics`: the /metrics URL of each frontend process (default: the frontend's port).
    """
    p = spec.planner
    if not p.enabled:
        return []
    from dynamo_lite.worker.pool import LocalPool

    nats_url, etcd_url = endpoints.nats_url, endpoints.etcd_url  # type: ignore[attr-defined]
    targets = scaled_pools(spec)
    if Pool.DECODE not in targets:
        raise ValueError("planner.enabled needs a decode (or aggregated) pool to scale")
    existing = {lp.pool.name: lp for lp in pools if isinstance(lp, LocalPool)}
    owned = [LocalPool(spec, spec_path, ps, nats_url, etcd_url) for ps in targets.values() if ps.name not in existing]
    local = {**existing, **{lp.pool.name: lp for lp in owned}}
    connector = LocalConnector({pool: local[ps.name] for pool, ps in targets.items()}, on_scaled=on_scaled)
    decode = targets[Pool.DECODE]
    link = ClusterLink(spec, nats_url, etcd_url, spec.model_of(decode).name, decode.role, frontend_metrics)

    async def stop_link_and_owned_pools() -> None:
        await link.stop()
        for lp in owned:
            await lp.stop()

    return [build_service(spec, link, connector, stop_link_and_owned_pools)]


def build_service(spec: ClusterSpec, link: ClusterLink, connector: ScalingConnector,
                  on_stop: Callable[[], Awaitable[None]], dry_run: bool = False) -> PlannerService:
    """The planner service for `spec`, observing through `link` and scaling through `connector`."""
    p = spec.planner
    has_prefill = Pool.PREFILL in scaled_pools(spec)
    planner = Planner(make_policy(p, has_prefill), make_limits(p, has_prefill), MonotonicClock())
    return PlannerService(planner, connector, link.observe, p.interval_s, CollectorRegistry(),
                          dry_run=p.dry_run or dry_run, host=spec.frontend.host, port=p.metrics_port,
                          on_start=link.start, on_stop=on_stop)
