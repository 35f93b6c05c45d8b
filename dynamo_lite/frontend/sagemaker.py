"""SageMaker's endpoints, as vLLM serves them: POST /invocations and GET / POST /ping.

/invocations is a chat request when the body has `messages`, a completion when it has `prompt`
(vLLM tries its chat request first, then its completion request); any other body is a 400.
/ping answers as /health. The API-key middleware (app.py) asks a key of /invocations too, as it
generates; vLLM leaves it open.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import msgspec
from aiohttp import web

from dynamo_lite.frontend.errors import ApiError

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def add_routes(app: web.Application, chat: Handler, complete: Handler, health: Handler) -> None:
    """`chat`, `complete`: the /v1 handlers, admission and counting included."""
    app.router.add_post("/invocations", _invocations(chat, complete))
    app.router.add_get("/ping", health)
    app.router.add_post("/ping", health)


def _invocations(chat: Handler, complete: Handler) -> Handler:
    async def invocations(request: web.Request) -> web.StreamResponse:
        try:
            fields = msgspec.json.decode(await request.read())
        except msgspec.DecodeError as e:
            raise ApiError(400, f"JSON decode error: {e}") from None
        if isinstance(fields, dict) and "messages" in fields:
            return await chat(request)
        if isinstance(fields, dict) and "prompt" in fields:
            return await complete(request)
        raise ApiError(400, "Cannot find suitable handler for request. Expected one of: ['ChatCompletionRequest', "
                            "'CompletionRequest'] (a body with `messages` or `prompt`)", param="messages")  # fmt: skip

    return invocations
