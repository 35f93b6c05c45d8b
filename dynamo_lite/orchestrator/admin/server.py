"""The admin HTTP API that `orchestrator up` serves, apart from the public OpenAI API.

    GET  /status               processes, health checks and registered workers, as `orchestrator status`
    GET  /pools                each pool `up` runs: name, role, engine, model, current replicas
    POST /pools/{name}/scale   body {"replicas": N}: grow or shrink the pool; answers once done
    GET  /metrics              the supervisor's own metrics (restarts), for Prometheus; needs no token

It listens on `admin.host:admin.port` (127.0.0.1 and a free port by default). With a
token, every request must carry `Authorization: Bearer <token>` (compared in constant
time), else 401. Errors are JSON: `{"error": "..."}`. Scaling calls of one pool are
served one at a time; the planner, when enabled, may later move the pool again.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

import msgspec
import pydantic
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from dynamo_lite.config import AdminSpec, ClusterSpec, PoolSpec
from dynamo_lite.orchestrator.admin.schema import (
    CheckInfo,
    PoolInfo,
    ScaleReply,
    ScaleRequest,
    StatusReply,
)
from dynamo_lite.orchestrator.status import ClusterStatus

log = logging.getLogger(__name__)


class AdminPool(Protocol):
    """A pool the admin API can scale (a LocalPool)."""

    pool: PoolSpec

    @property
    def size(self) -> int: ...

    async def scale_to(self, n: int) -> None: ...


SPEC = web.AppKey("spec", ClusterSpec)
POOLS = web.AppKey("pools", Callable[[], Sequence[AdminPool]])
STATUS = web.AppKey("status", Callable[[], Awaitable[ClusterStatus]])
ON_SCALED = web.AppKey("on_scaled", Callable[[], None])
LOCKS = web.AppKey("locks", dict[str, asyncio.Lock])


def admin_app(spec: ClusterSpec, pools: Callable[[], Sequence[AdminPool]],
              status: Callable[[], Awaitable[ClusterStatus]], on_scaled: Callable[[], None],
              token: str | None, registry: CollectorRegistry | None = None) -> web.Application:
    """The admin app. `pools`: the pools running now; `status`: the cluster's status;
    `on_scaled`: called after each scaling (success or not), e.g. to rewrite the state file;
    `registry`: the supervisor's metrics, served on /metrics."""
    app = web.Application(middlewares=[_bearer(token)] if token else [])
    app[SPEC], app[POOLS], app[STATUS], app[ON_SCALED], app[LOCKS] = spec, pools, status, on_scaled, {}
    app.router.add_get("/status", _status)
    app.router.add_get("/pools", _pools)
    app.router.add_post("/pools/{name}/scale", _scale)
    metrics = registry if registry is not None else CollectorRegistry()

    async def serve_metrics(_: web.Request) -> web.Response:  # aiohttp deprecates plain functions as handlers
        return web.Response(body=generate_latest(metrics), headers={"Content-Type": CONTENT_TYPE_LATEST})

    app.router.add_get("/metrics", serve_metrics)
    return app


def _bearer(token: str):
    expected = token.encode()

    @web.middleware
    async def require_token(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                            ) -> web.StreamResponse:
        if request.path == "/metrics":  # counts only, as the frontend's and the engines' /metrics
            return await handler(request)
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), expected):
            return _error(401, "missing or wrong bearer token (Authorization: Bearer <token>)",
                          headers={"WWW-Authenticate": 'Bearer realm="dynamo_lite admin"'})
        return await handler(request)

    return require_token


def _json(value: object, status: int = 200) -> web.Response:
    return web.Response(body=msgspec.json.encode(value), status=status, content_type="application/json")


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
    response = _json({"error": message}, status)
    response.headers.update(headers or {})
    return response


def _info(spec: ClusterSpec, pool: AdminPool) -> PoolInfo:
    p = pool.pool
    return PoolInfo(name=p.name, role=p.role.value, engine=p.engine, model=spec.model_of(p).name, replicas=pool.size)


async def _status(request: web.Request) -> web.Response:
    status = await request.app[STATUS]()
    state = status.state
    return _json(StatusReply(
        namespace=request.app[SPEC].namespace, healthy=status.healthy,
        supervisor_pid=state.supervisor_pid if state else None, processes=state.processes if state else [],
        checks=[CheckInfo(name=c.name, url=c.url, healthy=c.healthy, detail=c.detail) for c in status.checks],
        workers=status.workers,
    ))


async def _pools(request: web.Request) -> web.Response:
    spec = request.app[SPEC]
    return _json([_info(spec, p) for p in request.app[POOLS]()])


async def _scale(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    pools = {p.pool.name: p for p in request.app[POOLS]()}
    pool = pools.get(name)
    if pool is None:
        return _error(404, f"no pool {name!r} runs under this `orchestrator up` (pools: {', '.join(pools) or 'none'})")
    try:
        body = ScaleRequest.model_validate_json(await request.read())
    except pydantic.ValidationError as e:
        problems = "; ".join(f"{'.'.join(map(str, err['loc'])) or 'body'}: {err['msg']}" for err in e.errors())
        return _error(400, f'expected {{"replicas": N}} with 0 <= N <= 1024: {problems}')
    async with request.app[LOCKS].setdefault(name, asyncio.Lock()):
        previous = pool.size
        log.info("admin: scaling pool %s from %d to %d replicas", name, previous, body.replicas)
        try:
            await pool.scale_to(body.replicas)
        except Exception as e:
            log.exception("admin: scaling pool %s to %d failed", name, body.replicas)
            return _error(500, f"scaling pool {name!r} to {body.replicas} failed: {e}")
        finally:
            request.app[ON_SCALED]()
    return _json(ScaleReply(pool=_info(request.app[SPEC], pool), previous=previous))


class AdminServer:
    """The admin API as part of the supervisor: `start()` binds, `url` says where, `stop()` closes."""

    def __init__(self, spec: AdminSpec, app: web.Application) -> None:
        self.spec = spec
        self.app = app
        self.url: str | None = None
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        if self._runner is not None:
            return
        runner = web.AppRunner(self.app, access_log=None)
        await runner.setup()
        try:
            site = web.TCPSite(runner, self.spec.host, self.spec.port)
            await site.start()
        except OSError as e:
            await runner.cleanup()
            where = f"{self.spec.host}:{self.spec.port}"
            raise OSError(e.errno, f"admin API: cannot listen on {where}: {e.strerror}") from e
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        host, port = runner.addresses[0][:2]
        host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)  # all interfaces: reach it on loopback
        self.url = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
