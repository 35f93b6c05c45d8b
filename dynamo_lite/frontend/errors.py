"""OpenAI-shaped errors: `{"error": {"message", "type", "param", "code"}}` with the right status.

Handlers raise `ApiError`; a `RequestFailed` of the request path becomes one
through `api_error`, the one place that gives those failures a status. The
`openai_errors` middleware turns an ApiError, aiohttp's own HTTP errors (unknown
route 404, wrong method 405, body too large 413, a body that cannot be read or
inflated 400) and any unexpected exception (500, logged, message not leaked) into
that shape. A declared Content-Length over the limit is a 413 before
any handler runs, rather than a wait for a body that may never come.
"""

from __future__ import annotations

import logging
from typing import Any

import msgspec
from aiohttp import web

from dynamo_lite.frontend.request import (
    EngineRefused,
    InvalidRequest,
    MigrationsExhausted,
    NoWorker,
    Overloaded,
    PromptTooLong,
    RequestFailed,
    WorkerTimedOut,
)

log = logging.getLogger(__name__)

_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    404: "not_found_error",
    405: "invalid_request_error",
    408: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_exceeded",
    500: "internal_server_error",
    502: "upstream_error",
    503: "service_unavailable",
    504: "timeout_error",
}


class ApiError(Exception):
    """An error the client gets as OpenAI-shaped JSON."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return error_body(self.status, self.message, self.param, self.code)


_STATUS_OF: dict[type[RequestFailed], tuple[int, str | None]] = {
    InvalidRequest: (400, None),
    PromptTooLong: (400, "context_length_exceeded"),
    EngineRefused: (400, "engine_rejected"),
    MigrationsExhausted: (502, "worker_failed"),
    NoWorker: (503, "no_worker_available"),
    WorkerTimedOut: (504, "upstream_timeout"),
}


def no_such_model(name: object) -> ApiError:
    """A request for a model this frontend does not serve (vLLM's 404)."""
    return ApiError(404, f"The model `{name}` does not exist.", param="model", code="model_not_found")


def api_error(failure: RequestFailed) -> ApiError:
    """The HTTP answer to a failure of the request path."""
    if isinstance(failure, Overloaded):
        return ApiError(429, failure.message, code="rate_limit_exceeded",
                        headers={"Retry-After": str(failure.retry_after_s)})
    status, code = _STATUS_OF.get(type(failure), (500, None))
    return ApiError(status, failure.message, param=failure.param, code=code)


def error_body(status: int, message: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    kind = _TYPES.get(status, "invalid_request_error" if status < 500 else "internal_server_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def json_response(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(body=msgspec.json.encode(data), status=status, content_type="application/json",
                        headers=headers)


ANTHROPIC_PATHS = "/v1/messages"  # Anthropic's API: its errors in Anthropic's shape, as vLLM answers there
_ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                    404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 503: "overloaded_error"}


def anthropic_error(body: dict[str, Any], status: int) -> dict[str, Any]:
    """An OpenAI error body in Anthropic's shape: {"type": "error", "error": {"type", "message"}}."""
    kind = _ANTHROPIC_TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")
    return {"type": "error", "error": {"type": kind, "message": body["error"]["message"]}}


@web.middleware
async def openai_errors(request: web.Request, handler: Any) -> web.StreamResponse:
    response = await _errors_as_json(request, handler)
    if response.status >= 400 and request.path.startswith(ANTHROPIC_PATHS) and isinstance(response, web.Response) \
            and response.content_type == "application/json" and isinstance(response.body, bytes):
        body = msgspec.json.decode(response.body)
        if isinstance(body, dict) and isinstance(body.get("error"), dict) and "message" in body["error"]:
            response.body = msgspec.json.encode(anthropic_error(body, response.status))
    return response


async def _errors_as_json(request: web.Request, handler: Any) -> web.StreamResponse:
    if (request.content_length or 0) > request.client_max_size:
        return _too_large(request)
    try:
        return await handler(request)
    except ApiError as e:
        return json_response(e.body(), e.status, e.headers)
    except web.HTTPRequestEntityTooLarge:
        return _too_large(request)
    except web.RequestPayloadError as e:  # e.g. Content-Encoding: deflate over bytes that are not deflate
        why = (str(e).strip().splitlines() or ["unreadable"])[-1].strip()  # aiohttp's: "400, message:\n  <why>"
        return json_response(error_body(400, f"Could not read the request body: {why}", code="invalid_body"), 400)
    except web.HTTPException as e:
        if e.status < 400:
            raise
        kept = {k: v for k, v in e.headers.items() if k.lower() not in ("content-type", "content-length")}
        return json_response(error_body(e.status, e.reason or "error"), e.status, kept)  # kept: Allow of a 405
    except Exception:  # the client gets a clean 500, the log gets the traceback
        log.exception("unhandled error in %s %s", request.method, request.path)
        return json_response(error_body(500, "Internal server error."), 500)


def _too_large(request: web.Request) -> web.Response:
    return json_response(error_body(413, f"Request body too large: the limit is {request.client_max_size} bytes.",
                                    code="request_too_large"), 413)
