"""Waiting for a condition in a test, instead of a fixed sleep or a hand-written deadline loop.

    eventually(check, timeout=10, what="the engine to exit")               # blocking
    await eventually_async(check, timeout=10, what="the worker registered")  # on the event loop

`check` is called until it returns something truthy, which is returned (a check made of asserts
ends with `return True`). A check that raises AssertionError or returns something falsy (None
too) is tried again `interval` seconds later; any other exception ends the wait at once (raise
`pytest.fail(...)` for "this will never happen: stop waiting"). At the deadline an AssertionError
names what was awaited, for how long, and the last failure (chained). `eventually_async` also
takes a check that returns an awaitable.
Import as `from tests.waiting import eventually`.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")


class _Wait:
    def __init__(self, what: str, timeout: float, interval: float) -> None:
        self.what, self.timeout, self.interval = what, timeout, interval
        self.deadline = time.monotonic() + timeout
        self.value: Any = None
        self.error: AssertionError | None = None

    def passed(self, value: Any, error: AssertionError | None) -> bool:
        self.value, self.error = value, error
        return error is None and bool(value)

    def pause(self) -> float:
        """Seconds to sleep before the next try; raises once the deadline has passed."""
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            last = f"{type(self.error).__name__}: {self.error}" if self.error else f"the check returned {self.value!r}"
            raise AssertionError(f"timed out after {self.timeout:g} s waiting for {self.what}; last: {last}") \
                from self.error
        return min(self.interval, remaining)


def _call(check: Callable[[], Any]) -> tuple[Any, AssertionError | None]:
    try:
        return check(), None
    except AssertionError as e:
        return None, e


async def _call_async(check: Callable[[], Any]) -> tuple[Any, AssertionError | None]:
    try:
        value = check()
        return (await value if inspect.isawaitable(value) else value), None
    except AssertionError as e:
        return None, e


def eventually(check: Callable[[], T], *, timeout: float, what: str, interval: float = 0.1) -> T:
    """Retry `check` (blocking) until it passes; its truthy value is returned. Not for a running event loop."""
    wait = _Wait(what, timeout, interval)
    while not wait.passed(*_call(check)):
        time.sleep(wait.pause())
    return wait.value


async def eventually_async(check: Callable[[], T | Awaitable[T]], *, timeout: float, what: str,
                           interval: float = 0.1) -> T:
    """Retry `check` (sync or async) without blocking the event loop until it passes; its truthy value is returned."""
    wait = _Wait(what, timeout, interval)
    while not wait.passed(*await _call_async(check)):
        await asyncio.sleep(wait.pause())
    return wait.value
