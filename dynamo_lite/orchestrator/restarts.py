"""When to restart a part of the cluster that died, and when to give up on it. Pure: no I/O, time passed in.

A part (nats-server, etcd, the frontend, Prometheus, one worker pool) that fails is
restarted after a delay that doubles with each failure in the recent window
(`backoff_s`, 2x, 4x ... up to `max_backoff_s`). More than `limit` failures within
`window_s` is a crash loop: the part is marked failed and left alone, so a child
that dies at start does not spin the machine. A part that stays up for a whole
window starts afresh.
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True)
class RestartPolicy:
    backoff_s: float = 1.0  # delay before the first restart
    max_backoff_s: float = 30.0  # the delay doubles per recent failure, up to this
    limit: int = 5  # failures within `window_s` after which the part is given up
    window_s: float = 300.0  # how far back failures count


class PartState(enum.StrEnum):
    RUNNING = "running"
    RESTARTING = "restarting"  # died; waiting out the backoff, or starting again
    FAILED = "failed"  # crash loop: no more restarts


@dataclass
class PartHealth:
    """What `status` shows of one part."""

    part: str
    state: PartState = PartState.RUNNING
    restarts: int = 0  # restarts done, over the part's life
    last_restart: float | None = None  # wall-clock time of the last one
    reason: str = ""  # why it last died (exit code, last log lines)


class RestartTracker:
    """The restart decisions for one part."""

    def __init__(self, part: str, policy: RestartPolicy) -> None:
        self.policy = policy
        self.health = PartHealth(part)
        self._failures: deque[float] = deque()

    def failed(self, now: float, reason: str) -> float | None:
        """The part died at `now`: the delay before restarting it, or None to give up (crash loop)."""
        self._failures.append(now)
        while self._failures and self._failures[0] < now - self.policy.window_s:
            self._failures.popleft()
        self.health.reason = reason
        if len(self._failures) > self.policy.limit:
            self.health.state = PartState.FAILED
            return None
        self.health.state = PartState.RESTARTING
        return min(self.policy.max_backoff_s, self.policy.backoff_s * 2 ** (len(self._failures) - 1))

    def restarted(self, wall_time: float) -> None:
        """The part is running again."""
        self.health.state = PartState.RUNNING
        self.health.restarts += 1
        self.health.last_restart = wall_time
