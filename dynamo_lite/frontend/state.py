"""The frontend's configuration and the state its handlers share, under one `web.AppKey`.

app.py builds it; handlers.py reads it. Neither module imports the other's internals.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from aiohttp import web

from dynamo_lite.config import ClusterSpec, FrontendSpec, ModelSpec, PlannerSpec
from dynamo_lite.frontend.admission import Admission, ApiKeys
from dynamo_lite.frontend.disagg import DisaggPolicy
from dynamo_lite.frontend.fleet import Fleet
from dynamo_lite.frontend.flow import FlowSettings, RequestFlow
from dynamo_lite.frontend.metrics import FrontendMetrics
from dynamo_lite.frontend.tokenizer import ModelTokenizer
from planner.profile import EngineProfile
from router import RouterConfig, Seed

_SLO = PlannerSpec()  # the SLO defaults are the planner section's


@dataclass(frozen=True)
class FrontendConfig:
    """What the frontend needs from cluster.yaml, plus where NATS and etcd are."""

    namespace: str
    nats_url: str
    etcd_url: str
    models: tuple[ModelSpec, ...]
    frontend: FrontendSpec
    lease_ttl_s: int = 10  # workers' lease TTL: a dead worker is still listed at most this long
    ttft_target_ms: float = _SLO.ttft_target_ms  # the SLOs that the goodput counter checks (planner section)
    itl_target_ms: float = _SLO.itl_target_ms
    ttft_profile: str | None = None  # engine profile seeding the ttft mode (router.profile, else planner.profile)

    @classmethod
    def from_spec(cls, spec: ClusterSpec, nats_url: str, etcd_url: str) -> FrontendConfig:
        return cls(spec.namespace, nats_url, etcd_url, tuple(spec.models), spec.frontend, spec.etcd.lease_ttl_s,
                   spec.planner.ttft_target_ms, spec.planner.itl_target_ms,
                   spec.frontend.router.profile or spec.planner.profile)

    def router_config(self, model: ModelSpec) -> RouterConfig:
        r = self.frontend.router
        seed = Seed()
        if self.ttft_profile is not None:  # read once at start-up
            seed = Seed.from_profile([(p.isl, p.ttft_s) for p in EngineProfile.load(self.ttft_profile).prefill])
        return RouterConfig(block_size=model.block_size, mode=r.mode, overlap_weight=r.overlap_weight,
                            temperature=r.temperature, approx_ttl_s=r.approx_ttl_s, copy_weight=r.copy_weight,
                            inflight_ttl_s=r.inflight_ttl_s, worker_speeds=r.worker_speeds,
                            itl_target_s=self.itl_target_ms / 1000 if r.itl_guard else 0.0, ttft_seed=seed)

    def flow_settings(self) -> FlowSettings:
        d, factor = self.frontend.disaggregation, self.frontend.admission.reject_predicted_ttft_factor
        ttft_s = self.ttft_target_ms / 1000
        return FlowSettings(DisaggPolicy(d.max_local_prefill_tokens, d.max_prefill_queue, d.decision),
                            d.prefill_timeout_s, self.frontend.max_migrations, ttft_target_s=ttft_s,
                            itl_target_s=self.itl_target_ms / 1000, suspect_s=float(self.lease_ttl_s),
                            reject_ttft_s=factor * ttft_s if factor is not None else None)


@dataclass
class FrontendState:
    config: FrontendConfig
    tokenizers: dict[str, ModelTokenizer]
    metrics: FrontendMetrics
    fleet: Fleet
    admission: Admission
    api_keys: ApiKeys
    flow: RequestFlow | None = None  # set while the connections are open
    models: dict[str, ModelSpec] = field(default_factory=dict)


STATE = web.AppKey("state", FrontendState)
MODEL_LABEL = web.RequestKey("model_label", str)  # the served model a request names, for its metrics
