"""Clocks for the planner: the decision core reads time only through one of these."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds, monotonic; only differences matter."""
        ...


class MonotonicClock:
    def now(self) -> float:
        return time.monotonic()


class VirtualClock:
    """A clock that moves only when told to: for tests and simulations."""

    def __init__(self, start: float = 0.0) -> None:
        self._t = start

    def now(self) -> float:
        return self._t

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("a clock does not go backwards")
        self._t += seconds

    def set(self, t: float) -> None:
        if t < self._t:
            raise ValueError("a clock does not go backwards")
        self._t = t
