"""One way to connect to NATS: reconnect forever, bounded connect time, a name per component."""

from __future__ import annotations

import logging

import nats
from nats.aio.client import Client as NatsClient

log = logging.getLogger(__name__)


async def connect_nats(url: str, name: str, connect_timeout_s: float = 5.0) -> NatsClient:
    """Connected client that keeps reconnecting (every 0.5 s) if the server goes away."""

    async def on_disconnect() -> None:
        log.warning("%s: disconnected from NATS %s", name, url)

    async def on_reconnect() -> None:
        log.info("%s: reconnected to NATS %s", name, url)

    async def on_error(e: Exception) -> None:
        log.warning("%s: NATS error: %s", name, e)

    return await nats.connect(
        url,
        name=name,
        connect_timeout=connect_timeout_s,
        max_reconnect_attempts=-1,
        reconnect_time_wait=0.5,
        disconnected_cb=on_disconnect,
        reconnected_cb=on_reconnect,
        error_cb=on_error,
    )
