"""Scaling connectors: how a decision becomes running workers.

The local connector and the observe-only one live here; the Kubernetes connector,
which needs the cluster's API client, is wired in `dynamo_lite.planning.kubernetes`.
"""

from planner.connectors.base import ScalablePool, ScalingConnector
from planner.connectors.local import LocalConnector

__all__ = ["LocalConnector", "ScalablePool", "ScalingConnector"]
