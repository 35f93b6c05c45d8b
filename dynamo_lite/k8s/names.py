"""Names, labels and in-cluster URLs of the Kubernetes objects rendered from one ClusterSpec.

The renderer and the planner's Kubernetes connector both use these, so the
Deployment the planner scales is always the one the renderer wrote.
"""

from __future__ import annotations

import re

from dynamo_lite.config import ClusterSpec, KubernetesPoolSpec, PoolSpec

CONFIG_DIR = "/etc/dynamo_lite"
"""Where the ConfigMap with cluster.yaml is mounted in every pod."""
CONFIG_PATH = f"{CONFIG_DIR}/cluster.yaml"
STATE_DIR = "/var/lib/dynamo_lite"
"""DYNAMO_LITE_STATE_DIR in every pod (an emptyDir): builtin models are built under it."""
MODELS_DIR = "/models"
"""Mount point of `kubernetes.models_claim`."""
NATS_PORT, ETCD_PORT = 4222, 2379
ENGINE_PORT = 8100  # engine HTTP API, on the pod IP
KV_EVENTS_PORT, KV_REPLAY_PORT = 5557, 5558  # loopback, between engine and agent containers
NIXL_PORT = 5600  # NIXL side channel of the engine, on the pod IP
PART_OF = "dynamo-lite"


def dns_label(name: str) -> str:
    """A cluster.yaml name as a DNS-1123 label: lower case, `_` as `-`."""
    label = re.sub(r"[^a-z0-9-]", "-", name.lower()).strip("-")
    if not label or len(label) > 63:
        raise ValueError(f"{name!r} cannot be a Kubernetes name")
    return label


def k8s_namespace(spec: ClusterSpec) -> str:
    return dns_label(spec.kubernetes.namespace or spec.namespace)


def object_name(spec: ClusterSpec, component: str) -> str:
    """`<cluster>-<component>`: clusters can share a Kubernetes namespace. At most 52
    characters, so that StatefulSet pod names and their revision labels stay valid."""
    name = f"{dns_label(spec.namespace)}-{dns_label(component)}"
    if len(name) > 52:
        raise ValueError(f"Kubernetes name {name!r} is longer than 52 characters: shorten the namespace or pool name")
    return name


def pool_deployment(spec: ClusterSpec, pool: PoolSpec) -> str:
    """Name of the Deployment whose replicas are the workers of `pool`."""
    return object_name(spec, f"pool-{pool.name}")


def pool_deployments(spec: ClusterSpec) -> dict[str, str]:
    """Pool name -> Deployment name, for the planner's Kubernetes connector."""
    return {p.name: pool_deployment(spec, p) for p in spec.pools}


def pool_settings(spec: ClusterSpec, pool: PoolSpec) -> KubernetesPoolSpec:
    found = next((k for k in spec.kubernetes.pools if k.pool == pool.name), None)
    return found or KubernetesPoolSpec(pool=pool.name)


def labels(spec: ClusterSpec, component: str, pool: str | None = None) -> dict[str, str]:
    """Selector labels of one component (and pool)."""
    out = {
        "app.kubernetes.io/part-of": PART_OF,
        "app.kubernetes.io/instance": dns_label(spec.namespace),
        "app.kubernetes.io/component": component,
    }
    if pool is not None:
        out["dynamo-lite/pool"] = dns_label(pool)
    return out


def nats_url(spec: ClusterSpec) -> str:
    """The spec's external NATS, or the in-cluster Service the renderer adds."""
    if spec.nats.url:
        return spec.nats.url
    return f"nats://{object_name(spec, 'nats')}.{k8s_namespace(spec)}.svc:{NATS_PORT}"


def etcd_url(spec: ClusterSpec) -> str:
    if spec.etcd.url:
        return spec.etcd.url
    return f"http://{object_name(spec, 'etcd')}.{k8s_namespace(spec)}.svc:{ETCD_PORT}"


def credentials_secret(spec: ClusterSpec) -> str:
    """The Secret, created by the operator, that holds the external NATS and etcd secrets."""
    return object_name(spec, "credentials")


def frontend_pods_url(spec: ClusterSpec) -> str:
    """The frontend's headless Service, whose name resolves to every ready frontend pod: the planner
    scrapes each replica's /metrics there (a scrape of the Service reaches one replica)."""
    return f"http://{object_name(spec, 'frontend-pods')}.{k8s_namespace(spec)}.svc:{spec.frontend.port}"
