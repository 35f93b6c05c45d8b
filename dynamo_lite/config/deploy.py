"""cluster.yaml sections for running elsewhere and watching: Kubernetes and Prometheus."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from dynamo_lite.config.base import Name, Port, Section


class KubernetesPoolSpec(Section):
    pool: Name
    """Name of the pool in `pools` these settings apply to."""
    gpus: Annotated[int, Field(ge=0)] = 0
    """GPUs per worker (limit of `gpu_resource` on the engine container); 0: a CPU worker."""
    gpu_resource: str = "nvidia.com/gpu"
    """Extended resource name of the GPUs (the device plugin's)."""
    cpu: str = "2"
    """CPU request and limit of the engine container, in Kubernetes quantity notation."""
    memory: str = "8Gi"
    """Memory request and limit of the engine container."""
    node_selector: dict[str, str] = {}
    """Node labels the workers must run on, e.g. a GPU type."""
    termination_grace_s: Annotated[int, Field(ge=10)] = 90
    """Pod grace period: the agent revokes its lease and drains (up to 30 s) before the engine stops."""


class KubernetesSpec(Section):
    namespace: str | None = None
    """Kubernetes namespace of every object; null: the cluster's `namespace`, lower-cased, `_` as `-`."""
    image: str = "dynamo-lite:0.1.0"
    """Image of the frontend, planner and worker agents, and of CPU engines (deploy/docker/Dockerfile)."""
    gpu_image: str = "dynamo-lite:0.1.0-cuda"
    """Image of the engine container in pools with `gpus` above 0 (the Dockerfile's `cuda` target)."""
    image_pull_policy: Literal["IfNotPresent", "Always", "Never"] = "IfNotPresent"
    """Pull policy of the dynamo_lite images."""
    nats_image: str = "nats:2.10-alpine"
    """Image of the NATS server (JetStream), when `nats.url` is absent."""
    etcd_image: str = "quay.io/coreos/etcd:v3.5.17"
    """Image of etcd, when `etcd.url` is absent."""
    storage_class: str | None = None
    """StorageClass of the NATS and etcd volumes; null: the cluster's default."""
    nats_storage_gib: Annotated[int, Field(ge=1)] = 10
    """Size of the NATS JetStream volume."""
    etcd_storage_gib: Annotated[int, Field(ge=1)] = 2
    """Size of the etcd data volume."""
    frontend_service_type: Literal["ClusterIP", "NodePort", "LoadBalancer"] = "ClusterIP"
    """How the OpenAI API is exposed."""
    models_claim: str | None = None
    """PersistentVolumeClaim with the model directories, mounted read-only at /models; null: builtin models only."""
    pools: list[KubernetesPoolSpec] = []
    """Per-pool pod settings (GPUs, CPU, memory); a pool not listed gets the defaults."""


class PrometheusSpec(Section):
    enabled: bool = False
    """Start Prometheus (Debian package `prometheus`) with `orchestrator up`, scraping every component."""
    host: str = "127.0.0.1"
    """Interface its web UI and API listen on."""
    port: Port = 9090
    """Its port; 0 picks a free one."""
    scrape_interval_s: Annotated[float, Field(gt=0, le=300)] = 5.0
    """How often every target is scraped."""


class ObservabilitySpec(Section):
    prometheus: PrometheusSpec = PrometheusSpec()
    """`orchestrator up` always writes Prometheus file-SD targets to `<state_dir>/prometheus/targets.json`."""
