"""Local connector: scale pools of worker processes under `orchestrator up`'s supervisor.

Each pool is a `ScalablePool` (LocalPool): growing spawns agents and waits for
their registration; shrinking stops the newest agents, each of which revokes its
lease first, so routers stop sending it work, drains, then stops its engine.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from planner.connectors.base import ScalablePool
from planner.types import Decision, Pool, Replicas

log = logging.getLogger(__name__)


class LocalConnector:
    def __init__(self, pools: dict[Pool, ScalablePool], stop_timeout_s: float = 120.0,
                 on_scaled: Callable[[], None] | None = None) -> None:
        self.pools = pools
        self.stop_timeout_s = stop_timeout_s
        self.on_scaled = on_scaled
        """Called after each change (done or failed), e.g. to rewrite the cluster's state file."""
        self.failures = 0
        self._tasks: dict[Pool, asyncio.Task[None]] = {}

    async def refresh(self) -> None:
        return None  # sizes are known locally: `size` changes as soon as a change starts

    def current(self) -> Replicas:
        return Replicas(*(self.pools[p].size if p in self.pools else 0 for p in (Pool.PREFILL, Pool.DECODE)))

    def busy(self) -> dict[str, bool]:
        return {p.value: self._busy(p) for p in self.pools}

    def _busy(self, pool: Pool) -> bool:
        task = self._tasks.get(pool)
        return task is not None and not task.done()

    def apply(self, decision: Decision) -> None:
        for pool in Pool:
            d = decision.of(pool)
            if d.delta == 0 or pool not in self.pools:
                continue
            if self._busy(pool):
                log.info("planner: %s pool still applying its last change; %d -> %d waits", pool.value,
                         d.current, d.target)
                continue
            log.info("planner: scaling %s %d -> %d", pool.value, d.current, d.target)
            task = asyncio.create_task(self._scale(pool, d.target), name=f"planner-scale-{pool.value}")
            self._tasks[pool] = task

    async def _scale(self, pool: Pool, n: int) -> None:
        try:
            await self.pools[pool].scale_to(n)
            log.info("planner: %s pool now has %d replicas", pool.value, n)
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - one failed change must not stop the planner; it retries next tick
            self.failures += 1
            log.exception("planner: scaling %s to %d failed", pool.value, n)
        finally:
            if self.on_scaled is not None:
                self.on_scaled()

    async def wait_idle(self) -> None:
        """Wait until every change in progress is done (tests, shutdown)."""
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)

    async def stop(self) -> None:
        tasks = [t for t in self._tasks.values() if not t.done()]
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=self.stop_timeout_s)
            for t in pending:
                t.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        self._tasks.clear()
