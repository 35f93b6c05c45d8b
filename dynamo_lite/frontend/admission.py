"""Who may call, and how many at once: API keys and the admission queue.

`ApiKeys` checks `Authorization: Bearer <key>` against the configured keys in
constant time (every key compared, on SHA-256 digests of equal length), so the
answer's timing says nothing about how close a guess was. `Admission` lets
`limit` requests run; up to `max_queued` more wait (FIFO) for at most
`timeout_s`; beyond that, or after that wait, the request is refused with 429.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
from collections.abc import AsyncIterator
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


class Admission:
    def __init__(self, limit: int, max_queued: int, timeout_s: float) -> None:
        self.limit = limit
        self.max_queued = max_queued
        self.timeout_s = timeout_s
        self.waiting = 0
        self.running = 0
        self._slots = asyncio.Semaphore(limit)

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Hold one of the `limit` slots for the body of the `async with`."""
        if self._slots.locked() and self.waiting >= self.max_queued:
            raise _too_many(f"Too many requests: {self.limit} running and {self.waiting} queued; retry shortly.")
        self.waiting += 1
        try:
            await asyncio.wait_for(self._slots.acquire(), self.timeout_s)
        except TimeoutError:
            raise _too_many(f"Too many requests: no slot free within {self.timeout_s:g} s; retry shortly.") from None
        finally:
            self.waiting -= 1
        self.running += 1
        try:
            yield
        finally:
            self.running -= 1
            self._slots.release()


def _too_many(message: str) -> ApiError:
    return ApiError(429, message, code="rate_limit_exceeded", headers={"Retry-After": str(RETRY_AFTER_S)})
