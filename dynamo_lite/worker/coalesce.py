"""Items sent in groups: at once after a quiet spell, at most once per window under load.

The worker agent relays its engine's KV event batches this way. Each NATS message costs a
socket write in the agent, a wake-up of nats-server and one of every frontend, and under
load an engine sends a batch about every request: on the overhead workload (about 900
requests/s through one worker) the agent spent 41% of its time in that write. With a
window, a batch that comes after a quiet window goes out at once (no added latency at low
load), and the batches that follow within the window go out together at its end, in order.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from dynamo_lite.tasks import cancel_and_wait

T = TypeVar("T")
log = logging.getLogger(__name__)


class Coalescer(Generic[T]):
    """`add(item)`; `send(items)` is called with what was added, in order, at most once per `window_s`.

    Owns at most one task (the send at a window's end); `close()` ends it and sends what is left.
    """

    def __init__(self, send: Callable[[list[T]], Awaitable[None]], window_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        self._send, self._window_s, self._clock = send, window_s, clock
        self._items: list[T] = []
        self._sent_at = float("-inf")
        self._timer: asyncio.Task[None] | None = None

    async def add(self, item: T) -> None:
        self._items.append(item)
        if self._timer is not None:
            return  # the window's end sends it
        wait = self._sent_at + self._window_s - self._clock()
        if wait <= 0:
            await self._flush()
        else:
            self._timer = asyncio.create_task(self._at_window_end(wait), name="coalescer-window")

    async def close(self) -> None:
        await cancel_and_wait(self._timer)
        self._timer = None
        await self._flush()

    async def _at_window_end(self, wait: float) -> None:
        await asyncio.sleep(wait)
        self._timer = None
        try:
            await self._flush()
        except Exception:  # nobody awaits this task: say what was lost (a KV event consumer sees the seq gap)
            log.exception("sending a coalesced group failed; its items are dropped")

    async def _flush(self) -> None:
        items, self._items = self._items, []
        if items:
            self._sent_at = self._clock()
            await self._send(items)
