"""Autoscaling for dynamo_lite: decide how many prefill and decode workers to run.

The decision core is pure (no aiohttp, nats, etcd or prometheus imports):
`Planner` (core.py) applies limits, cool-down, hysteresis, step and budget to a
`Policy`'s proposals: `LoadPolicy` (queue depth and KV usage thresholds) or
`SlaPolicy` (TTFT/ITL targets and an `EngineProfile`). Time comes from an
injected `Clock`. `planner.connectors` holds the scaling-connector interface
and the local one. The I/O lives in `dynamo_lite.planning`: observing the cluster,
metrics, the Kubernetes connector, the profiler and the loop `orchestrator up` runs.
This package imports nothing of `dynamo_lite`.
"""

from planner.clock import Clock, MonotonicClock, VirtualClock
from planner.core import Planner
from planner.load_policy import LoadPolicy, LoadPolicyConfig
from planner.policy import Policy
from planner.profile import DEFAULT_PROFILE, DecodePoint, EngineProfile, PrefillPoint
from planner.sla_policy import SlaPolicy, SlaPolicyConfig
from planner.types import (
    Decision,
    DecodeLoad,
    Limits,
    Observation,
    Pool,
    PoolDecision,
    PoolLimits,
    Proposal,
    Replicas,
    Traffic,
)  # fmt: skip

__all__ = [
    "DEFAULT_PROFILE", "Clock", "Decision", "DecodeLoad", "DecodePoint", "EngineProfile", "Limits", "LoadPolicy",
    "LoadPolicyConfig", "MonotonicClock", "Observation", "Planner", "Policy", "Pool", "PoolDecision", "PoolLimits",
    "PrefillPoint", "Proposal", "Replicas", "SlaPolicy", "SlaPolicyConfig", "Traffic", "VirtualClock",
]
