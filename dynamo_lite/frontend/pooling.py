"""vLLM's pooling endpoints, for the models served with `runner: pooling` (vLLM's --runner pooling).

/v1/embeddings, /pooling, /classify, /score, /v1/score, /rerank, /v1/rerank, /v2/rerank and /v2/embed take a
body naming a pooling model (or none, where the frontend serves one), and go to one of that model's engines as
they are: the engine's answer, its status and its errors are vLLM's own. The engine is the model's worker with
the fewest of these requests in flight from this process (there is no KV to route on: each input is pooled
once). A worker that cannot be reached, times out or answers 5xx is avoided for a while and the request goes to
another; only when none is left is it a 503. Text endpoints refuse a pooling model (`refuse_text`), and these endpoints
a text model, with a 400 naming `model`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from dynamo_lite.config import ModelSpec
from dynamo_lite.frontend.errors import ApiError, no_such_model
from dynamo_lite.frontend.http1 import ConnectTimeout
from dynamo_lite.frontend.ids import base_request_id
from dynamo_lite.frontend.schemas import json_object
from dynamo_lite.frontend.state import MODEL_LABEL, STATE, FrontendState
from dynamo_lite.frontend.upstream import EngineClient
from dynamo_lite.protocol import WorkerId

log = logging.getLogger(__name__)
PATHS = ("/v1/embeddings", "/pooling", "/classify", "/score", "/v1/score", "/rerank", "/v1/rerank", "/v2/rerank",
         "/v2/embed")  # fmt: skip
IN_FLIGHT = web.AppKey("pooling_in_flight", dict[WorkerId, int])
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def add_routes(app: web.Application, wrap: Callable[[Handler], Handler]) -> None:
    """The endpoints, each handler wrapped by `wrap` (the frontend's admission and request counter)."""
    app[IN_FLIGHT] = {}
    for path in PATHS:
        app.router.add_post(path, wrap(pooled))


def refuse_text(spec: ModelSpec) -> None:
    """A text endpoint asked of a pooling model: a 400 naming `model` (vLLM serves no text route then)."""
    if spec.runner == "pooling":
        raise ApiError(400, f"The model `{spec.name}` is a pooling model (runner: pooling): it serves "
                            f"{', '.join(PATHS)}, not text generation.", param="model", code="invalid_value")


async def pooled(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    raw = await request.read()
    body = json_object(raw)
    spec = _pooling_model(state, body.get("model"))
    request[MODEL_LABEL] = spec.name
    flow, fleet = state.flow, state.fleet.get(spec.name)
    if flow is None or fleet is None:
        raise ApiError(503, "The frontend is starting or stopping.", code="not_ready")
    in_flight = request.app[IN_FLIGHT]
    body_id = body.get("request_id")
    headers = {"Content-Type": "application/json",
               "X-Request-Id": base_request_id(request, body_id if isinstance(body_id, str) else None)}
    tried: list[WorkerId] = []
    while candidates := fleet.candidates(exclude=tried):
        worker = min(candidates, key=lambda w: in_flight.get(w, 0))
        in_flight[worker] = in_flight.get(worker, 0) + 1
        try:
            status, answer = await _post(flow.engines, fleet.workers[worker].engine_url, request.path, raw, headers)
        except (OSError, TimeoutError, ConnectTimeout) as e:
            status, answer = 0, f"{type(e).__name__}: {e}".encode()
        finally:
            in_flight[worker] -= 1
            if not in_flight[worker]:
                del in_flight[worker]  # (workers come and go)
        if 0 < status < 500:
            return web.Response(body=answer, status=status, content_type="application/json")
        log.warning("request %s: worker %s failed a %s request (%s); trying another", headers["X-Request-Id"],
                    worker, request.path, status or answer.decode(errors="replace")[:200])
        fleet.suspect(worker, flow.settings.suspect_s)
        tried.append(worker)
    raise ApiError(503, f"No worker of model `{spec.name}` could serve the request.", code="no_worker")


def _pooling_model(state: FrontendState, name: object) -> ModelSpec:
    """The pooling model a body names (none named: the only one served), or the error vLLM's clients expect."""
    if name is None:
        pooling = [m for m in state.models.values() if m.runner == "pooling"]
        if len(pooling) != 1:
            raise ApiError(400, f"Name the model: {len(pooling)} pooling models are served here.", param="model",
                           code="invalid_value")  # fmt: skip
        return pooling[0]
    spec = state.models.get(name) if isinstance(name, str) else None
    if spec is None:
        raise no_such_model(name)
    if spec.runner != "pooling":
        raise ApiError(400, f"The model `{name}` generates text (runner: generate): the pooling endpoints "
                            "serve models of runner: pooling.", param="model", code="invalid_value")  # fmt: skip
    return spec


async def _post(engines: EngineClient, url: str, path: str, raw: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
    response = await engines.pool.post(url, path, raw, headers, engines.connect_timeout_s, engines.timeout_s)
    try:
        return response.status, await response.read()
    finally:
        response.close()
