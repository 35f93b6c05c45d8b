"""The contract between the planner loop and whatever runs the workers."""

from __future__ import annotations

from typing import Protocol

from planner.types import Decision, Replicas


class ScalingConnector(Protocol):
    """Applies decisions. Called from the planner's loop only (one event loop)."""

    async def refresh(self) -> None:
        """Called at the start of every tick, before `current()`: re-read what is running
        where that takes I/O (a Deployment's replicas); a no-op for local pools."""
        ...

    def current(self) -> Replicas:
        """Replicas each pool has now, counting workers starting and not those draining;
        what `Planner.tick` is given as `current`."""
        ...

    def apply(self, decision: Decision) -> None:
        """Start moving each pool to its target; returns at once (scaling runs in the
        background, owned by the connector). A pool still busy with an earlier change
        keeps it; the planner asks again next tick."""
        ...

    def busy(self) -> dict[str, bool]:
        """Per pool name: whether a change is still being applied."""
        ...

    async def stop(self) -> None:
        """Wait for changes in progress (bounded), then cancel what is left."""
        ...


class ScalablePool(Protocol):
    """What the local connector needs of a pool (`dynamo_lite.worker.pool.LocalPool`)."""

    @property
    def size(self) -> int: ...

    async def scale_to(self, n: int) -> None: ...
