"""Who may call, and how many at once: API keys and the admission queue.

`ApiKeys` checks `Authorization: Bearer <key>` against the configured keys in
constant time (every key compared, on SHA-256 digests of equal length), so the
answer's timing says nothing about how close a guess was. `Admission` lets
`limit` requests run; up to `max_queued` more wait for at most `timeout_s`, and
each freed slot goes to the waiter of lowest (priority, arrival): vLLM's
`priority` field (lower first), first come first served among equals. Beyond
`max_queued`, or after that wait, the request is refused with 429.
"""

from __future__ import annotations

import asyncio
import hashlib
import heapq
import hmac
import itertools
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from dynamo_lite.frontend.errors import ApiError

RETRY_AFTER_S = 1


class ApiKeys:
    def __init__(self, keys: frozenset[str]) -> None:
        self._digests = [hashlib.sha256(k.encode()).digest() for k in sorted(keys)]

    @property
    def enabled(self) -> bool:
        return bool(self._digests)

    def check(self, authorization: str | None) -> None:
        """Raises a 401 ApiError unless the header carries an accepted key."""
        if not self.enabled:
            return
        scheme, _, key = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise ApiError(401, "You didn't provide an API key. Send it as 'Authorization: Bearer <key>'.",
                           code="invalid_api_key")
        digest = hashlib.sha256(key.strip().encode()).digest()
        match = False
        for known in self._digests:
            match |= hmac.compare_digest(digest, known)
        if not match:
            raise ApiError(401, "Incorrect API key provided.", code="invalid_api_key")


class Refused(ApiError):
    """A 429 of the admission queue; `reason` (queue_full, queue_timeout) labels the rejection counter."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(429, message, code="rate_limit_exceeded", headers={"Retry-After": str(RETRY_AFTER_S)})
        self.reason = reason


Waited = Callable[[int, float], None]
"""Told (priority, seconds waited) of each request that waited for its slot."""


class Admission:
    """`limit` slots. A request that finds none free waits, with up to `max_queued` others, at most
    `timeout_s`; a freed slot passes straight to the waiter of lowest (priority, arrival)."""

    def __init__(self, limit: int, max_queued: int, timeout_s: float, waited: Waited | None = None) -> None:
        self.limit = limit
        self.max_queued = max_queued
        self.timeout_s = timeout_s
        self.running = 0
        self._waited = waited
        self._queue: list[tuple[int, int, asyncio.Future[None]]] = []  # a heap of (priority, arrival, waiter)
        self._arrivals = itertools.count()

    @property
    def waiting(self) -> int:
        return len(self._queue)

    @asynccontextmanager
    async def slot(self, priority: Callable[[], int] = lambda: 0) -> AsyncIterator[None]:
        """Hold one of the `limit` slots for the body of the `async with`. `priority` (lower is served
        first) is asked only of a request that has to wait."""
        if self.running < self.limit and not self._queue:
            self.running += 1
        else:
            await self._wait(priority())
        try:
            yield
        finally:
            self._release()

    async def _wait(self, priority: int) -> None:
        if len(self._queue) >= self.max_queued:
            raise Refused("queue_full", f"Too many requests: {self.running} running and {len(self._queue)} queued; "
                                        "retry shortly.")  # fmt: skip
        started = time.monotonic()
        entry = (priority, next(self._arrivals), asyncio.get_running_loop().create_future())
        heapq.heappush(self._queue, entry)
        try:
            async with asyncio.timeout(self.timeout_s):
                await entry[2]
        except BaseException as e:  # timed out or cancelled (the client went away)
            if entry[2].done() and not entry[2].cancelled():
                self._release()  # the slot came just as the wait ended: pass it on
            elif entry in self._queue:
                self._queue.remove(entry)
                heapq.heapify(self._queue)
            if isinstance(e, TimeoutError):
                raise Refused("queue_timeout", f"Too many requests: no slot free within {self.timeout_s:g} s; "
                                               "retry shortly.") from None  # fmt: skip
            raise
        if self._waited is not None:
            self._waited(priority, time.monotonic() - started)

    def _release(self) -> None:
        """A slot is free: it goes to the first waiter in (priority, arrival) order, or back to the pool."""
        while self._queue:
            waiter = heapq.heappop(self._queue)[2]
            if not waiter.done():  # (a cancelled one leaves the queue itself, but may not have yet)
                waiter.set_result(None)  # `running` stays: the slot changes hands
                return
        self.running -= 1


def band(priority: int) -> str:
    """The label of a priority in the admission metrics: high (< 0), default (0) or low (> 0)."""
    return "high" if priority < 0 else "low" if priority > 0 else "default"
