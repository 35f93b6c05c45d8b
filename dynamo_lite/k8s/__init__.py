"""Kubernetes: manifests rendered from a cluster spec, and the planner's scaling connector.

`render_k8s` (render.py) imports nothing of Kubernetes; `KubernetesScaler`
(scaler.py) needs the optional `kubernetes-asyncio` package (`pip install .[k8s]`).
"""

from dynamo_lite.k8s.names import k8s_namespace, pool_deployment, pool_deployments
from dynamo_lite.k8s.render import add_render_command, render_k8s

__all__ = ["add_render_command", "k8s_namespace", "pool_deployment", "pool_deployments", "render_k8s"]
