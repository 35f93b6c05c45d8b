"""The frontend's aiohttp application: its state (state.py), its connections, its routes (handlers.py).

`build_app(config, tokenizers)` wires everything; the connections that own I/O
(kept-alive connections to engines, etcd watch, NATS subscriptions, the prefill submitter)
live in one cleanup_ctx: opened before the app serves, closed in reverse order
after it stops accepting and its in-flight requests ended.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Callable

import msgspec
from aiohttp import web
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from prometheus_client import CollectorRegistry

from dynamo_lite.discovery import WorkerWatcher, etcd_client
from dynamo_lite.frontend import batch as batch_chat
from dynamo_lite.frontend.admission import Admission, ApiKeys, band
from dynamo_lite.frontend.errors import ANTHROPIC_PATHS, openai_errors
from dynamo_lite.frontend.fleet import Fleet
from dynamo_lite.frontend.flow import RequestFlow
from dynamo_lite.frontend.handlers import add_routes
from dynamo_lite.frontend.http1 import EnginePool
from dynamo_lite.frontend.load_share import open_load_share
from dynamo_lite.frontend.metrics import FrontendMetrics
from dynamo_lite.frontend.pooling import PATHS as POOLING_PATHS
from dynamo_lite.frontend.snapshot import open_snapshots
from dynamo_lite.frontend.state import STATE, FrontendConfig, FrontendState
from dynamo_lite.frontend.tokenizer import ModelTokenizer
from dynamo_lite.frontend.upstream import EngineClient
from dynamo_lite.infra.loop_lag import LoopLag
from dynamo_lite.protocol import KvEventsMessage, LoadReport
from dynamo_lite.queue import PrefillSubmitter, connect_nats

log = logging.getLogger(__name__)


Connections = Callable[[web.Application], AsyncIterator[None]]
"""A cleanup_ctx that opens what the app talks to and sets `app[STATE].flow` while open."""


def build_app(config: FrontendConfig, tokenizers: dict[str, ModelTokenizer],
              registry: CollectorRegistry | None = None, connections: Connections | None = None,
              api_keys: frozenset[str] = frozenset()) -> web.Application:  # fmt: skip
    """The app; `connections` defaults to the real ones (etcd, NATS, engines), tests pass fakes.
    With `api_keys`, every /v1 request needs one of them (see `frontend.api_keys` of the spec)."""
    metrics = FrontendMetrics(registry if registry is not None else CollectorRegistry())
    fleet = Fleet({m.name: config.router_config(m) for m in config.models}, metrics)
    f = config.frontend
    admission = Admission(f.max_concurrent_requests, f.max_queued_requests, f.queue_timeout_s,
                          waited=lambda priority, s: metrics.queue_time_by_band[band(priority)].observe(s))
    metrics.queued.set_function(lambda: admission.waiting)
    app = web.Application(middlewares=[openai_errors, _require_api_key], client_max_size=f.max_body_bytes)
    app[STATE] = FrontendState(config, tokenizers, metrics, fleet, admission, ApiKeys(api_keys),
                               models={m.name: m for m in config.models})
    app.cleanup_ctx.append(connections or open_connections)
    add_routes(app)
    batch_chat.add_routes(app)
    return app


@web.middleware
async def _require_api_key(request: web.Request, handler: Callable) -> web.StreamResponse:
    """/v1/* needs a key when keys are configured; /health, /ping, /metrics and /openapi.json stay open (as in
    vLLM). /invocations and the pooling endpoints need one too: they run the model as /v1/* does (vLLM leaves
    them open)."""
    path = request.path
    if path.startswith(("/v1/", "/v2/")) or path == "/invocations" or path in POOLING_PATHS:
        authorization = request.headers.get("Authorization")
        if authorization is None and path.startswith(ANTHROPIC_PATHS) and "x-api-key" in request.headers:
            authorization = f"Bearer {request.headers['x-api-key']}"  # how Anthropic's clients send a key
        request.app[STATE].api_keys.check(authorization)
    return await handler(request)


async def open_connections(app: web.Application) -> AsyncIterator[None]:
    state = app[STATE]
    cfg = state.config
    async with contextlib.AsyncExitStack() as stack:
        lag = LoopLag(state.metrics.loop_lag.observe)
        lag.start()
        stack.push_async_callback(lag.stop)
        engine_pool = EnginePool()
        stack.push_async_callback(engine_pool.close)
        etcd = await stack.enter_async_context(etcd_client(cfg.etcd_url))
        watcher = WorkerWatcher(etcd, cfg.namespace)
        watcher.add_listener(state.fleet.on_worker_change)
        await watcher.start()
        stack.push_async_callback(watcher.stop)
        nc = await connect_nats(cfg.nats_url, "frontend")
        stack.push_async_callback(_close, nc)
        for sub in await _subscribe(nc, cfg.namespace, state.fleet):
            stack.push_async_callback(sub.unsubscribe)
        frontend_id = uuid.uuid4().hex[:12]  # this process, among the frontends sharing load and asking snapshots
        await open_load_share(stack, nc, state, frontend_id)
        await open_snapshots(stack, nc, state, watcher, frontend_id)
        submitter = PrefillSubmitter(nc, cfg.namespace)
        await submitter.start()
        stack.push_async_callback(submitter.stop)
        engines = EngineClient(engine_pool, cfg.frontend.upstream_timeout_s)
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
            batches = msgspec.json.decode(msg.data, type=KvEventsMessage)
        except msgspec.DecodeError as e:  # (a ValidationError is one)
            log.warning("dropping malformed KV events on %s: %s", msg.subject, e)
            return
        for batch in batches:
            fleet.on_kv_events(batch)

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
