"""Keep the cluster as declared: restart what `orchestrator up` started when it dies on its own.

The supervisor hands its parts (embedded nats-server and etcd, the frontend,
Prometheus, each worker pool) to a `Reconciler`. Every `interval_s` it asks each
running part whether it is down (`failure()`); a part that is gets its own
recovery task: wait out the backoff (restarts.py), `recover()`, and try again if
that fails, until the part runs again or is given up as a crash loop. Operator
intent wins because the supervisor stops the reconciler before it stops anything
on purpose (shutdown, `down`), and pools never report workers they retire
(scale-down) as failed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Protocol, runtime_checkable

from prometheus_client import CollectorRegistry, Counter

from dynamo_lite.orchestrator.restarts import (
    PartHealth,
    PartState,
    RestartPolicy,
    RestartTracker,
)
from dynamo_lite.tasks import cancel_and_wait

log = logging.getLogger(__name__)


@runtime_checkable
class Recoverable(Protocol):
    """A part the supervisor keeps running."""

    part: str  # its name in `status`, the log and the restarts metric: "nats-server", "pool decode" ...

    def failure(self) -> str | None:
        """Why the part is down now (exit code, last log lines), or None while it runs as declared."""
        ...

    async def recover(self) -> None:
        """Bring it back as declared (same ports and data; replaced workers get new ids); raise if that fails."""
        ...


class SupervisorMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.restarts = Counter("dynamo_lite_supervisor_restarts", "Parts restarted by orchestrator up after "
                                "they died on their own (a worker pool counts each replacement).", ["part"],
                                registry=registry)  # fmt: skip
        self.failed = Counter("dynamo_lite_supervisor_given_up", "Parts given up after a crash loop "
                              "(supervisor.restart_limit failures within supervisor.restart_window_s).", ["part"],
                              registry=registry)  # fmt: skip


class Reconciler:
    def __init__(self, parts: list[Recoverable], policy: RestartPolicy, metrics: SupervisorMetrics,
                 on_change: Callable[[], None] = lambda: None, interval_s: float = 0.5,
                 clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        self.parts = parts
        self.trackers = {p.part: RestartTracker(p.part, policy) for p in parts}
        self.metrics = metrics
        self.on_change = on_change  # the parts' health changed (e.g. rewrite the state file)
        self.interval_s = interval_s
        self.clock = clock
        self._watch: asyncio.Task[None] | None = None
        self._recoveries: dict[str, asyncio.Task[None]] = {}
        for p in parts:  # every part's series exists from the start, at 0
            metrics.restarts.labels(p.part)
            metrics.failed.labels(p.part)

    def health(self) -> list[PartHealth]:
        return [t.health for t in self.trackers.values()]

    def start(self) -> None:
        if self._watch is None:
            self._watch = asyncio.create_task(self._watch_loop(), name="reconciler")

    async def stop(self) -> None:
        """Stop watching and cancel recoveries in progress (a part half restarted is stopped by its owner)."""
        tasks = [t for t in (self._watch, *self._recoveries.values()) if t is not None]
        await cancel_and_wait(*tasks)
        self._watch = None
        self._recoveries.clear()

    async def _watch_loop(self) -> None:
        while True:
            for part in self.parts:
                if part.part in self._recoveries or self.trackers[part.part].health.state is PartState.FAILED:
                    continue
                why = part.failure()
                if why is not None:
                    self._recoveries[part.part] = asyncio.create_task(self._recover(part, why),
                                                                      name=f"recover {part.part}")
            await asyncio.sleep(self.interval_s)

    async def _recover(self, part: Recoverable, why: str) -> None:
        tracker = self.trackers[part.part]
        try:
            while True:
                delay = tracker.failed(self.clock(), why)
                self.on_change()
                if delay is None:
                    self.metrics.failed.labels(part.part).inc()
                    log.error("%s keeps failing (%d times within %.0f s): giving up on it. Last failure: %s",
                              part.part, tracker.policy.limit + 1, tracker.policy.window_s, why)
                    return
                log.warning("%s is down (%s); restarting it in %.1f s", part.part, why.splitlines()[0], delay)
                await asyncio.sleep(delay)
                try:
                    await part.recover()
                except Exception as e:  # noqa: BLE001 - a failed restart is the next failure, with its reason
                    why = f"restart failed: {e}"
                    continue
                tracker.restarted(time.time())
                self.metrics.restarts.labels(part.part).inc()
                self.on_change()
                log.info("%s is running again (restart %d)", part.part, tracker.health.restarts)
                return
        finally:
            self._recoveries.pop(part.part, None)
