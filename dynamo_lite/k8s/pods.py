"""Pieces every rendered pod shares: the config and state volumes, the downward-API
environment, probes, and the pod template around a list of containers.

Objects are plain JSON-able dicts in the Kubernetes API's own field names, so they
dump to YAML as they are; tests load each into the official client's typed models.
"""

from __future__ import annotations

import hashlib
from typing import Any

from dynamo_lite import credentials
from dynamo_lite.config import ClusterSpec
from dynamo_lite.k8s.names import (
    CONFIG_DIR,
    MODELS_DIR,
    STATE_DIR,
    credentials_secret,
    object_name,
)

Obj = dict[str, Any]
"""One Kubernetes object, or a part of one, in the API's JSON shape."""

CONFIG_VOLUME, STATE_VOLUME, MODELS_VOLUME = "cluster-config", "state", "models"


def config_map_name(spec: ClusterSpec) -> str:
    return object_name(spec, "config")


def config_hash(spec_text: str) -> str:
    """Pod annotation: a changed cluster.yaml rolls every pod that reads it."""
    return hashlib.sha256(spec_text.encode()).hexdigest()[:16]


def downward_env() -> list[Obj]:
    """POD_NAME and POD_IP first, so later values can say `$(POD_IP)`; the state directory."""
    return [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "DYNAMO_LITE_STATE_DIR", "value": STATE_DIR},
        {"name": "PYTHONUNBUFFERED", "value": "1"},
    ]


def credentials_env(spec: ClusterSpec) -> list[Obj]:
    """The external NATS and etcd credentials, for the containers that connect to them: user
    names as values, secrets from the Secret `credentials_secret(spec)`, which the operator
    creates (keys `nats-token`, `nats-password`, `etcd-password`; see README)."""
    secret = credentials_secret(spec)

    def from_secret(name: str, key: str) -> Obj:
        return {"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}

    out: list[Obj] = []
    if spec.nats.token_env:
        out.append(from_secret(credentials.NATS_TOKEN, "nats-token"))
    if spec.nats.user:
        out += [{"name": credentials.NATS_USER, "value": spec.nats.user},
                from_secret(credentials.NATS_PASSWORD, "nats-password")]
    if spec.etcd.user:
        out += [{"name": credentials.ETCD_USER, "value": spec.etcd.user},
                from_secret(credentials.ETCD_PASSWORD, "etcd-password")]
    return out


def env_list(env: dict[str, str]) -> list[Obj]:
    return [{"name": k, "value": v} for k, v in env.items()]


def volumes(spec: ClusterSpec) -> list[Obj]:
    out: list[Obj] = [
        {"name": CONFIG_VOLUME, "configMap": {"name": config_map_name(spec)}},
        {"name": STATE_VOLUME, "emptyDir": {}},
    ]
    if spec.kubernetes.models_claim:
        out.append({"name": MODELS_VOLUME,
                    "persistentVolumeClaim": {"claimName": spec.kubernetes.models_claim, "readOnly": True}})
    return out


def mounts(spec: ClusterSpec) -> list[Obj]:
    out: list[Obj] = [
        {"name": CONFIG_VOLUME, "mountPath": CONFIG_DIR, "readOnly": True},
        {"name": STATE_VOLUME, "mountPath": STATE_DIR},
    ]
    if spec.kubernetes.models_claim:
        out.append({"name": MODELS_VOLUME, "mountPath": MODELS_DIR, "readOnly": True})
    return out


def http_probe(port: int | str, path: str, period_s: int, failures: int, timeout_s: int = 5) -> Obj:
    return {"httpGet": {"path": path, "port": port}, "periodSeconds": period_s,
            "failureThreshold": failures, "timeoutSeconds": timeout_s}


def container(spec: ClusterSpec, name: str, command: list[str], image: str | None = None, **fields: Any) -> Obj:
    """A container of the dynamo_lite image with the shared environment and mounts;
    `fields` are further Container fields in the API's spelling."""
    out: Obj = {
        "name": name,
        "image": image or spec.kubernetes.image,
        "imagePullPolicy": spec.kubernetes.image_pull_policy,
        "command": command,
        "env": downward_env() + fields.pop("env", []),
        "volumeMounts": mounts(spec) + fields.pop("volumeMounts", []),
    }
    out.update(fields)
    return out


def pod_template(spec: ClusterSpec, spec_text: str, labels: dict[str, str], containers: list[Obj],
                 **pod_fields: Any) -> Obj:
    return {
        "metadata": {"labels": labels, "annotations": {"dynamo-lite/config-hash": config_hash(spec_text)}},
        "spec": {
            "containers": containers,
            "volumes": volumes(spec) + pod_fields.pop("extra_volumes", []),
            **pod_fields,
        },
    }


def metadata(spec: ClusterSpec, name: str, namespace: str, labels: dict[str, str]) -> Obj:
    return {"name": name, "namespace": namespace, "labels": labels}
