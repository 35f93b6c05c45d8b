"""A request's id, as vLLM takes it from the client."""

from __future__ import annotations

import re
import uuid

from aiohttp import web

from dynamo_lite.frontend.errors import ApiError

_REQUEST_ID = re.compile(r"[A-Za-z0-9._:/+=@-]{1,128}")


def base_request_id(request: web.Request, body_id: str | None) -> str:
    """vLLM's: the X-Request-Id header, else the body's request_id, else a random one."""
    given = request.headers.get("X-Request-Id") or body_id
    if given is None:
        return uuid.uuid4().hex
    if not _REQUEST_ID.fullmatch(given):
        raise ApiError(400, "The request id (X-Request-Id or request_id) must be 1-128 characters of A-Z a-z 0-9 "
                            "._:/+=@-.", param="request_id", code="invalid_value")
    return given
