"""Simulated time for the mock engine, paced against the wall clock."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


class SimClock:
    """The engine's simulated time, paced to the wall clock times the speed-up.

    While busy, time advances by exactly each pass's duration, so the engine's
    own timings follow the model even when Python overhead makes it lag the
    wall clock; `pace()` sleeps only while it is ahead. While idle it follows
    the wall clock. (Sleeping per pass would not do: the event loop cannot
    sleep less than a millisecond, which at speed-up 100 is 100 ms simulated.)
    """

    MIN_SLEEP_S = 1e-3  # wall seconds; below this the loop runs on and catches up later
    MAX_BUSY_S = 2e-3  # wall seconds the loop may run passes without yielding to HTTP handlers

    def __init__(self, speedup: float, monotonic: Callable[[], float] = time.monotonic) -> None:
        if speedup <= 0:
            raise ValueError("speed-up ratio must be positive")
        self.speedup = speedup
        self._monotonic = monotonic
        self._t0 = monotonic()
        self._t = 0.0  # simulated time of the engine loop: the end of the pass in progress
        self._pass_start = 0.0
        self._last_yield = self._t0
        self._wake_at: float | None = None  # when the first arrival of an idle spell came
        self.idle = True

    def wall(self) -> float:
        """Simulated time as the wall clock sees it."""
        return (self._monotonic() - self._t0) * self.speedup

    def now(self) -> float:
        """The simulated time of an event happening now.

        Busy: the wall clock's, kept within the pass in progress (the loop runs
        up to MIN_SLEEP_S ahead of the wall clock, and may lag behind it).
        Idle: the wall clock's, or the first arrival's if one is waiting.
        """
        if not self.idle:
            return min(max(self.wall(), self._pass_start), self._t)
        return self._wake_at if self._wake_at is not None else max(self.wall(), self._t)

    def arrival(self) -> float:
        """`now()` for a new request. Requests that arrive while the loop is
        idle, before it wakes up, arrive together: the wall time the server
        spends taking them in is not part of the simulation."""
        t = self.now()
        if self.idle:
            self._wake_at = t
        return t

    @property
    def loop_time(self) -> float:
        return self._t

    def wake(self, at_least: float | None = None) -> None:
        """Leave idle at the first arrival of the idle spell, or at `at_least` (a
        KV transfer landing), or else at the wall clock's time."""
        targets = [t for t in (at_least, self._wake_at) if t is not None]
        self._t = self._pass_start = max(self._t, max(targets) if targets else self.wall())
        self._wake_at = None
        self.idle = False

    def advance(self, seconds: float) -> None:
        self._pass_start = self._t
        self._t += seconds

    def lag(self) -> float:
        """How far (simulated seconds) the loop is behind the wall clock; negative when ahead."""
        return self.wall() - self._t

    async def pace(self) -> None:
        """Sleep while the loop is ahead of the wall clock; otherwise yield every
        MAX_BUSY_S, so that a lagging loop hands out tokens in batches (one write
        per stream for several passes) rather than one syscall per token."""
        ahead = -self.lag() / self.speedup
        if ahead < self.MIN_SLEEP_S and self._monotonic() - self._last_yield < self.MAX_BUSY_S:
            return
        await asyncio.sleep(max(ahead, 0.0) if ahead >= self.MIN_SLEEP_S else 0)
        self._last_yield = self._monotonic()
