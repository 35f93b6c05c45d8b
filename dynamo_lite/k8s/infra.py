"""The cluster's shared objects: its Namespace, the ConfigMap with cluster.yaml, and
NATS (JetStream) and etcd as single-member StatefulSets with persistent volumes.

NATS and etcd are rendered only where the spec names no external `url`. One
member each: the control plane tolerates their restart (workers re-register,
watchers resume, JetStream keeps the queue on its volume), not their loss.
"""

from __future__ import annotations

from dynamo_lite.config import ClusterSpec
from dynamo_lite.k8s.names import (
    CONFIG_PATH,
    ETCD_PORT,
    NATS_PORT,
    k8s_namespace,
    labels,
    object_name,
)
from dynamo_lite.k8s.pods import Obj, config_map_name, http_probe, metadata

NATS_MONITOR_PORT, ETCD_PEER_PORT = 8222, 2380


def namespace(spec: ClusterSpec) -> list[Obj]:
    """The Namespace object, except for `default`, which every cluster has."""
    ns = k8s_namespace(spec)
    if ns == "default":
        return []
    return [{"apiVersion": "v1", "kind": "Namespace",
             "metadata": {"name": ns, "labels": {"app.kubernetes.io/part-of": "dynamo-lite"}}}]


def config_map(spec: ClusterSpec, spec_text: str) -> Obj:
    """cluster.yaml, verbatim: every component reads the same spec as `orchestrator up` does."""
    meta = metadata(spec, config_map_name(spec), k8s_namespace(spec), labels(spec, "config"))
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta,
            "data": {CONFIG_PATH.rsplit("/", 1)[1]: spec_text}}


def _headless_service(spec: ClusterSpec, component: str, ports: list[Obj]) -> Obj:
    name = object_name(spec, component)
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": metadata(spec, name, k8s_namespace(spec), labels(spec, component)),
        # Headless: the name resolves to the single member's pod IP.
        "spec": {"clusterIP": "None", "selector": labels(spec, component), "ports": ports,
                 "publishNotReadyAddresses": True},
    }


def _volume_claim(spec: ClusterSpec, gib: int) -> Obj:
    claim: Obj = {"metadata": {"name": "data"},
                  "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": f"{gib}Gi"}}}}
    if spec.kubernetes.storage_class:
        claim["spec"]["storageClassName"] = spec.kubernetes.storage_class
    return claim


def _stateful_set(spec: ClusterSpec, component: str, container: Obj, gib: int) -> Obj:
    name = object_name(spec, component)
    return {
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": metadata(spec, name, k8s_namespace(spec), labels(spec, component)),
        "spec": {
            "serviceName": name,
            "replicas": 1,
            "selector": {"matchLabels": labels(spec, component)},
            "template": {"metadata": {"labels": labels(spec, component)},
                         "spec": {"containers": [container], "terminationGracePeriodSeconds": 30}},
            "volumeClaimTemplates": [_volume_claim(spec, gib)],
        },
    }


def nats(spec: ClusterSpec) -> list[Obj]:
    if spec.nats.url:
        return []
    container: Obj = {
        "name": "nats",
        "image": spec.kubernetes.nats_image,
        "args": ["--jetstream", "--store_dir", "/data", "--port", str(NATS_PORT),
                 "--http_port", str(NATS_MONITOR_PORT)],
        "ports": [{"name": "client", "containerPort": NATS_PORT},
                  {"name": "monitor", "containerPort": NATS_MONITOR_PORT}],
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
        "readinessProbe": http_probe("monitor", "/healthz?js-enabled-only=true", 10, 3),
        "livenessProbe": http_probe("monitor", "/healthz", 30, 3),
        "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
    }
    ports = [{"name": "client", "port": NATS_PORT, "targetPort": "client"},
             {"name": "monitor", "port": NATS_MONITOR_PORT, "targetPort": "monitor"}]
    return [_headless_service(spec, "nats", ports),
            _stateful_set(spec, "nats", container, spec.kubernetes.nats_storage_gib)]


def etcd(spec: ClusterSpec) -> list[Obj]:
    if spec.etcd.url:
        return []
    name, ns = object_name(spec, "etcd"), k8s_namespace(spec)
    container: Obj = {
        "name": "etcd",
        "image": spec.kubernetes.etcd_image,
        "command": [
            "etcd", "--name", "$(POD_NAME)", "--data-dir", "/var/lib/etcd/data",
            "--listen-client-urls", f"http://0.0.0.0:{ETCD_PORT}",
            "--advertise-client-urls", f"http://{name}.{ns}.svc:{ETCD_PORT}",
            "--listen-peer-urls", f"http://0.0.0.0:{ETCD_PEER_PORT}",
            "--initial-advertise-peer-urls", f"http://$(POD_NAME).{name}.{ns}.svc:{ETCD_PEER_PORT}",
            "--initial-cluster", f"$(POD_NAME)=http://$(POD_NAME).{name}.{ns}.svc:{ETCD_PEER_PORT}",
            "--auto-compaction-retention", "1",
        ],  # fmt: skip
        "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
        "ports": [{"name": "client", "containerPort": ETCD_PORT}, {"name": "peer", "containerPort": ETCD_PEER_PORT}],
        "volumeMounts": [{"name": "data", "mountPath": "/var/lib/etcd"}],
        "readinessProbe": http_probe("client", "/health", 10, 3),
        "livenessProbe": http_probe("client", "/health", 30, 3),
        "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
    }
    ports = [{"name": "client", "port": ETCD_PORT, "targetPort": "client"},
             {"name": "peer", "port": ETCD_PEER_PORT, "targetPort": "peer"}]
    return [_headless_service(spec, "etcd", ports),
            _stateful_set(spec, "etcd", container, spec.kubernetes.etcd_storage_gib)]
