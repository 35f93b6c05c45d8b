"""How late a process's event loop runs what is due: an operator's first question when every stream
of a process pauses at once.

A task sleeps `interval_s` again and again; how much later than asked it wakes is the lag. It counts
whatever held the loop: code that blocked it (a long synchronous call), a garbage collection, or the
process waiting for a CPU. Each lag goes to `observe` (a histogram); one of `warn_s` or more is also
logged, with the time, so a stall in a benchmark's tail can be found in the log.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from dynamo_lite.tasks import cancel_and_wait

log = logging.getLogger(__name__)


class LoopLag:
    """Measures the running loop's lag from `start()` until `stop()`."""

    def __init__(self, observe: Callable[[float], None], interval_s: float = 0.1, warn_s: float = 0.5) -> None:
        self._observe = observe
        self._interval_s = interval_s
        self._warn_s = warn_s
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._measure_forever(), name="event-loop-lag")

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None

    async def _measure_forever(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + self._interval_s
            await asyncio.sleep(self._interval_s)
            lag = max(0.0, loop.time() - due)
            self._observe(lag)
            if lag >= self._warn_s:
                log.warning("event loop stalled: it ran %.2f s late", lag)
