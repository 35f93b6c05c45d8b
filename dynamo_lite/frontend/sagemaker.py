"""SageMaker's endpoints, as vLLM serves them: POST /invocations and GET / POST /ping.

/invocations is a chat request when the body has `messages`, a completion when it has `prompt`
(vLLM tries its chat request first, then its completion request); any other body is a 400. A body for a
pooling model (one it names, or the only model served) goes to that model's engine's own /invocations
(pooling.py), which reads it as vLLM reads it.
/ping answers as /health. The API-key middleware (app.py) asks a key of /invocations too, as it
generates; vLLM leaves it open.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import msgspec
from aiohttp import web

from dynamo_lite.frontend.errors import ApiError
from dynamo_lite.frontend.state import STATE

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def add_routes(app: web.Application, chat: Handler, complete: Handler, pool: Handler, health: Handler) -> None:
    """`chat`, `complete`, `pool`: the /v1 handlers and the pooling one, admission and counting included."""
    app.router.add_post("/invocations", _invocations(chat, complete, pool))
    app.router.add_get("/ping", health)
    app.router.add_post("/ping", health)


def _invocations(chat: Handler, complete: Handler, pool: Handler) -> Handler:
    async def invocations(request: web.Request) -> web.StreamResponse:
        try:
            fields = msgspec.json.decode(await request.read())
        except msgspec.DecodeError as e:
            raise ApiError(400, f"JSON decode error: {e}") from None
        models = request.app[STATE].models
        named = fields.get("model") if isinstance(fields, dict) else None
        spec = models.get(named) if isinstance(named, str) else next(iter(models.values())) if len(models) == 1 \
            else None  # fmt: skip
        if spec is not None and spec.runner == "pooling":
            return await pool(request)
        if isinstance(fields, dict) and "messages" in fields:
            return await chat(request)
        if isinstance(fields, dict) and "prompt" in fields:
            return await complete(request)
        raise ApiError(400, "Cannot find suitable handler for request. Expected one of: ['ChatCompletionRequest', "
                            "'CompletionRequest'] (a body with `messages` or `prompt`)", param="messages")  # fmt: skip

    return invocations
