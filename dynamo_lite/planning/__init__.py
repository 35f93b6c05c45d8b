"""The planner's I/O: observing the cluster, Prometheus metrics, and the loop `orchestrator up` runs."""

from dynamo_lite.planning.service import PlannerService
from dynamo_lite.planning.stage import planner_stage

__all__ = ["PlannerService", "planner_stage"]
