"""Calling the admin API of a running `orchestrator up` (what `orchestrator scale` does)."""

from __future__ import annotations

import aiohttp
import msgspec

from dynamo_lite.orchestrator.admin.schema import ScaleReply


class AdminError(RuntimeError):
    """The admin API answered with an error, or could not be reached; the message says which."""


async def scale_pool(url: str, pool: str, replicas: int, token: str | None, timeout_s: float) -> ScaleReply:
    """POST /pools/{pool}/scale and wait (up to `timeout_s`) until the pool has `replicas` workers."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as session,
            session.post(f"{url}/pools/{pool}/scale", json={"replicas": replicas}, headers=headers) as resp,
        ):
            body = await resp.read()
            if resp.status != 200:
                raise AdminError(f"admin API {url}: {resp.status} {_message(body)}")
            return msgspec.json.decode(body, type=ScaleReply)
    except (aiohttp.ClientError, TimeoutError, OSError) as e:
        raise AdminError(f"admin API {url}: {type(e).__name__}: {e}") from None


def _message(body: bytes) -> str:
    try:
        return str(msgspec.json.decode(body, type=dict[str, str])["error"])
    except (msgspec.DecodeError, msgspec.ValidationError, KeyError):
        return body.decode(errors="replace")[:200]
