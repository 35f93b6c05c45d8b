"""The planner's I/O: observing the cluster, Prometheus metrics, and the loop `orchestrator up` runs."""

from planner.runtime.service import PlannerService
from planner.runtime.stage import planner_stage

__all__ = ["PlannerService", "planner_stage"]
