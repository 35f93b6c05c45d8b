"""The contract every scaling policy follows."""

from __future__ import annotations

from typing import Protocol

from planner.types import Observation, Pool, Proposal, Replicas


class Policy(Protocol):
    name: str

    def propose(self, obs: Observation, current: Replicas, now: float) -> dict[Pool, Proposal]:
        """Called once per tick by `Planner.tick`, with the replicas the pools have now.

        Returns a proposal for each pool. It may keep state between ticks (trends,
        smoothed corrections) but must not do I/O; limits, the step, cool-down,
        scale-down hysteresis and the budget are applied by the planner afterwards.
        """
        ...
