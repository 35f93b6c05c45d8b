"""One way to connect to NATS: reconnect forever, bounded connect time, a name per component,
credentials from the caller or the process environment, and a clear error when they are refused."""

from __future__ import annotations

import asyncio
import logging

from nats.aio.client import Client as NatsClient

from dynamo_lite.credentials import (
    NATS_PASSWORD,
    NATS_TOKEN,
    NATS_USER,
    NatsCredentials,
)
from dynamo_lite.tasks import cancel_and_wait

log = logging.getLogger(__name__)


class NatsAuthError(RuntimeError):
    """The server refused this client's credentials (or their absence); retrying cannot help."""


async def connect_nats(url: str, name: str, connect_timeout_s: float = 5.0,
                       credentials: NatsCredentials | None = None) -> NatsClient:
    """Connected client that keeps reconnecting (every 0.5 s) if the server goes away.

    `credentials`: None takes them from the process environment (DYNAMO_LITE_NATS_TOKEN,
    or _USER and _PASSWORD), which is how `orchestrator up` hands them to what it starts.
    While the server is unreachable the first connection is retried without end; a server
    that refuses the credentials raises NatsAuthError at once.
    """
    creds = credentials if credentials is not None else NatsCredentials.from_environ()
    nc = NatsClient()
    refused: asyncio.Future[Exception] = asyncio.get_running_loop().create_future()
    connecting: asyncio.Task[None] | None = None

    async def on_disconnect() -> None:
        log.warning("%s: disconnected from NATS %s", name, url)

    async def on_reconnect() -> None:
        log.info("%s: reconnected to NATS %s", name, url)

    async def on_error(e: Exception) -> None:
        if "authorization violation" in str(e).lower() and connecting is not None and not connecting.done():
            if not refused.done():
                refused.set_result(e)
            return
        log.warning("%s: NATS error: %s", name, e)

    connecting = asyncio.create_task(nc.connect(
        url,
        name=name,
        connect_timeout=connect_timeout_s,
        max_reconnect_attempts=-1,
        reconnect_time_wait=0.5,
        disconnected_cb=on_disconnect,
        reconnected_cb=on_reconnect,
        error_cb=on_error,
        **creds.connect_options(),
    ))
    try:
        await asyncio.wait([connecting, refused], return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not connecting.done():  # refused, or we were cancelled: stop retrying
            await cancel_and_wait(connecting)
            await nc.close()
    if connecting.cancelled() and refused.done():
        raise NatsAuthError(f"NATS {url} refused {name}: authorization violation: {_hint(creds)}")
    connecting.result()  # raises what connect raised
    return nc


def _hint(creds: NatsCredentials) -> str:
    if not creds:
        return (f"the server needs credentials and none were given ({NATS_TOKEN}, or {NATS_USER} and "
                f"{NATS_PASSWORD}; `orchestrator up` sets them for what it starts; for an external server "
                "name them in cluster.yaml: nats.token_env, or nats.user and nats.password_env)")
    return "the token, or the user and password, is wrong"
