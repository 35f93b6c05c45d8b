"""The frontend (Deployment, Service, and a headless Service naming each replica) and the planner (Deployment, with RBAC that
allows nothing but reading and patching the scale of this cluster's pool Deployments)."""

from __future__ import annotations

from dynamo_lite.config import ClusterSpec
from dynamo_lite.k8s.names import (
    CONFIG_PATH,
    etcd_url,
    k8s_namespace,
    labels,
    nats_url,
    object_name,
    pool_deployments,
)
from dynamo_lite.k8s.pods import (
    Obj,
    container,
    credentials_env,
    http_probe,
    metadata,
    pod_template,
)

PLANNER_COMMAND = ["python", "-m", "dynamo_lite.planning"]
"""The planner's entry point; it is told `--connector kubernetes` (see `planner_container`)."""


def frontend(spec: ClusterSpec, spec_text: str) -> list[Obj]:
    name, ns, port = object_name(spec, "frontend"), k8s_namespace(spec), spec.frontend.port
    selector = labels(spec, "frontend")
    command = ["python", "-m", "dynamo_lite.frontend", "-f", CONFIG_PATH, "--nats-url", nats_url(spec),
               "--etcd-url", etcd_url(spec), "--host", "0.0.0.0", "--port", str(port)]
    api = container(
        spec, "frontend", command, ports=[{"name": "http", "containerPort": port}], env=credentials_env(spec),
        resources={"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "4Gi"}},
        # The first start builds a builtin model's tokenizer; after that /health answers at once.
        startupProbe=http_probe("http", "/health", 5, 60),
        readinessProbe=http_probe("http", "/health", 5, 3),
        livenessProbe=http_probe("http", "/health", 15, 4),
    )
    pod = pod_template(spec, spec_text, selector, [api], terminationGracePeriodSeconds=45)
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": metadata(spec, name, ns, selector),
        "spec": {"replicas": spec.frontend.k8s_replicas(), "selector": {"matchLabels": selector},
                 "template": pod},
    }
    ports = [{"name": "http", "port": port, "targetPort": "http"}]
    service = {
        "apiVersion": "v1", "kind": "Service", "metadata": metadata(spec, name, ns, selector),
        "spec": {"type": spec.kubernetes.frontend_service_type, "selector": selector, "ports": ports},
    }
    # Headless: its DNS name resolves to every ready pod, for the planner's per-replica scrapes.
    pods = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": metadata(spec, object_name(spec, "frontend-pods"), ns, selector),
        "spec": {"clusterIP": "None", "selector": selector, "ports": ports},
    }
    return [service, pods, deployment]


def planner_rbac(spec: ClusterSpec) -> list[Obj]:
    """ServiceAccount, Role and RoleBinding: get and patch `deployments/scale` of the pool
    Deployments by name; nothing else (not even the Deployments themselves)."""
    name, ns = object_name(spec, "planner"), k8s_namespace(spec)
    meta = metadata(spec, name, ns, labels(spec, "planner"))
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta,
        "rules": [{"apiGroups": ["apps"], "resources": ["deployments/scale"],
                   "resourceNames": sorted(pool_deployments(spec).values()), "verbs": ["get", "patch"]}],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}],
    }
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta}
    return [account, role, binding]


def planner(spec: ClusterSpec, spec_text: str) -> list[Obj]:
    """Rendered only when `planner.enabled`; one replica (two planners would fight)."""
    if not spec.planner.enabled or not spec.pools:
        return []
    name, ns = object_name(spec, "planner"), k8s_namespace(spec)
    selector = labels(spec, "planner")
    command = [*PLANNER_COMMAND, "-f", CONFIG_PATH, "--nats-url", nats_url(spec), "--etcd-url", etcd_url(spec),
               "--connector", "kubernetes"]
    main = container(spec, "planner", command, env=credentials_env(spec),
                     resources={"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}})
    pod = pod_template(spec, spec_text, selector, [main], serviceAccountName=name,
                       terminationGracePeriodSeconds=30)
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": metadata(spec, name, ns, selector),
        "spec": {"replicas": 1, "strategy": {"type": "Recreate"}, "selector": {"matchLabels": selector},
                 "template": pod},
    }
    return [*planner_rbac(spec), deployment]
