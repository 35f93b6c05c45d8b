"""Scaling connectors: how a decision becomes running workers (local processes, Kubernetes)."""

from planner.connectors.base import ScalablePool, ScalingConnector
from planner.connectors.kubernetes import KubernetesConnector
from planner.connectors.local import LocalConnector

__all__ = ["KubernetesConnector", "LocalConnector", "ScalablePool", "ScalingConnector"]
