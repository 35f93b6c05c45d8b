"""A connector that scales nothing: for a planner that only observes and logs (`--connector none`)."""

from __future__ import annotations

from planner.types import Decision, Replicas


class ObserveOnlyConnector:
    """Reports fixed replica counts (the spec's) and applies nothing."""

    def __init__(self, replicas: Replicas) -> None:
        self.replicas = replicas
        self.failures = 0

    async def refresh(self) -> None:
        return None

    def current(self) -> Replicas:
        return self.replicas

    def apply(self, decision: Decision) -> None:
        return None

    def busy(self) -> dict[str, bool]:
        return {}

    async def stop(self) -> None:
        return None
