"""The frontend's aiohttp application: its state, its connections, its routes.

`build_app(config, tokenizers)` wires everything; the connections that own I/O
(HTTP session to engines, etcd watch, NATS subscriptions, the prefill submitter)
live in one cleanup_ctx: opened before the app serves, closed in reverse order
after it stops accepting and its in-flight requests ended.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import aiohttp
import msgspec
from aiohttp import web
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from prometheus_client import CollectorRegistry

from dynamo_lite.config import ClusterSpec, FrontendSpec, ModelSpec
from dynamo_lite.discovery import WorkerWatcher, etcd_client
from dynamo_lite.frontend.admission import Admission, ApiKeys
from dynamo_lite.frontend.disagg import DisaggPolicy
from dynamo_lite.frontend.errors import openai_errors
from dynamo_lite.frontend.fleet import Fleet
from dynamo_lite.frontend.flow import FlowSettings, RequestFlow
from dynamo_lite.frontend.metrics import FrontendMetrics
from dynamo_lite.frontend.tokenizer import ModelTokenizer
from dynamo_lite.frontend.upstream import EngineClient
from dynamo_lite.protocol import LoadReport, RelayedKvEvents
from dynamo_lite.queue import PrefillSubmitter, connect_nats
from router import RouterConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FrontendConfig:
    """What the frontend needs from cluster.yaml, plus where NATS and etcd are."""

    namespace: str
    nats_url: str
    etcd_url: str
    models: tuple[ModelSpec, ...]
    frontend: FrontendSpec
    lease_ttl_s: int = 10  # workers' lease TTL: a dead worker is still listed at most this long
    ttft_target_ms: float = 500.0  # the SLOs that the goodput counter checks (planner section of the spec)
    itl_target_ms: float = 50.0

    @classmethod
    def from_spec(cls, spec: ClusterSpec, nats_url: str, etcd_url: str) -> FrontendConfig:
        return cls(spec.namespace, nats_url, etcd_url, tuple(spec.models), spec.frontend, spec.etcd.lease_ttl_s,
                   spec.planner.ttft_target_ms, spec.planner.itl_target_ms)

    def router_config(self, model: ModelSpec) -> RouterConfig:
        r = self.frontend.router
        return RouterConfig(block_size=model.block_size, mode=r.mode, overlap_weight=r.overlap_weight,
                            temperature=r.temperature, approx_ttl_s=r.approx_ttl_s)

    def flow_settings(self) -> FlowSettings:
        d = self.frontend.disaggregation
        return FlowSettings(DisaggPolicy(d.max_local_prefill_tokens, d.max_prefill_queue), d.prefill_timeout_s,
                            self.frontend.max_migrations, ttft_target_s=self.ttft_target_ms / 1000,
                            itl_target_s=self.itl_target_ms / 1000, suspect_s=float(self.lease_ttl_s))


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


Connections = Callable[[web.Application], AsyncIterator[None]]
"""A cleanup_ctx that opens what the app talks to and sets `app[STATE].flow` while open."""


def build_app(config: FrontendConfig, tokenizers: dict[str, ModelTokenizer],
              registry: CollectorRegistry | None = None, connections: Connections | None = None,
              api_keys: frozenset[str] = frozenset()) -> web.Application:  # fmt: skip
    """The app; `connections` defaults to the real ones (etcd, NATS, engines), tests pass fakes.
    With `api_keys`, every /v1 request needs one of them (see `frontend.api_keys` of the spec)."""
    from dynamo_lite.frontend import handlers

    metrics = FrontendMetrics(registry if registry is not None else CollectorRegistry())
    fleet = Fleet({m.name: config.router_config(m) for m in config.models}, metrics)
    f = config.frontend
    admission = Admission(f.max_concurrent_requests, f.max_queued_requests, f.queue_timeout_s)
    metrics.queued.set_function(lambda: admission.waiting)
    app = web.Application(middlewares=[openai_errors, _require_api_key], client_max_size=f.max_body_bytes)
    app[STATE] = FrontendState(config, tokenizers, metrics, fleet, admission, ApiKeys(api_keys),
                               models={m.name: m for m in config.models})
    app.cleanup_ctx.append(connections or open_connections)
    handlers.add_routes(app)
    return app


@web.middleware
async def _require_api_key(request: web.Request, handler: Callable) -> web.StreamResponse:
    """/v1/* needs a key when keys are configured; /health, /metrics and /openapi.json stay open (as in vLLM)."""
    if request.path.startswith("/v1/"):
        request.app[STATE].api_keys.check(request.headers.get("Authorization"))
    return await handler(request)


async def open_connections(app: web.Application) -> AsyncIterator[None]:
    state = app[STATE]
    cfg = state.config
    async with contextlib.AsyncExitStack() as stack:
        session = await stack.enter_async_context(
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), auto_decompress=False))
        etcd = await stack.enter_async_context(etcd_client(cfg.etcd_url))
        watcher = WorkerWatcher(etcd, cfg.namespace)
        watcher.add_listener(state.fleet.on_worker_change)
        await watcher.start()
        stack.push_async_callback(watcher.stop)
        nc = await connect_nats(cfg.nats_url, "frontend")
        stack.push_async_callback(_close, nc)
        for sub in await _subscribe(nc, cfg.namespace, state.fleet):
            stack.push_async_callback(sub.unsubscribe)
        submitter = PrefillSubmitter(nc, cfg.namespace)
        await submitter.start()
        stack.push_async_callback(submitter.stop)
        engines = EngineClient(session, cfg.frontend.upstream_timeout_s)
        state.flow = RequestFlow(state.fleet, engines, submitter, state.metrics, cfg.flow_settings())
        log.info("frontend connected: %d workers known, models %s", len(watcher.workers),
                 ", ".join(state.models) or "(none)")
        try:
            yield
        finally:
            state.flow = None


async def _subscribe(nc: NatsClient, namespace: str, fleet: Fleet) -> list[object]:
    async def on_kv(msg: Msg) -> None:
        try:
            fleet.on_kv_events(msgspec.json.decode(msg.data, type=RelayedKvEvents))
        except msgspec.ValidationError as e:
            log.warning("dropping malformed KV events on %s: %s", msg.subject, e)

    async def on_load(msg: Msg) -> None:
        try:
            fleet.on_load(msgspec.json.decode(msg.data, type=LoadReport))
        except msgspec.ValidationError as e:
            log.warning("dropping malformed load report on %s: %s", msg.subject, e)

    return [await nc.subscribe(f"{namespace}.kv_events.*", cb=on_kv),
            await nc.subscribe(f"{namespace}.load.*", cb=on_load)]


async def _close(nc: NatsClient) -> None:
    if not nc.is_closed:
        await nc.drain()
