"""cluster.yaml: its schema, its loader and the errors it explains.

- `schema`: `ClusterSpec` and its sections, `load_cluster_spec`, `parse_cluster_spec`;
- `base`: the shared types (`Section`, `ConfigError`, URL and name types);
- `frontend`: the `frontend:` section (router, disaggregation, admission, API keys);
- `control`: NATS, etcd and the admin API; `deploy`: Kubernetes and Prometheus;
- `errors`: turning pydantic's errors into "file:line: key.path: problem" lines.

Every public name is importable from `dynamo_lite.config`.
"""

from dynamo_lite.config.base import (
    ConfigError,
    EnvVar,
    EtcdUrl,
    Name,
    NatsUrl,
    Port,
    Section,
    is_loopback,
)
from dynamo_lite.config.control import AdminSpec, EtcdSpec, NatsSpec, SupervisorSpec
from dynamo_lite.config.deploy import (
    KubernetesPoolSpec,
    KubernetesSpec,
    ObservabilitySpec,
    PrometheusSpec,
)
from dynamo_lite.config.frontend import (
    ApiKeysSpec,
    DisaggregationSpec,
    FrontendSpec,
    RouterMode,
    RouterSpec,
)
from dynamo_lite.config.schema import (
    ClusterSpec,
    KvTransferSpec,
    MockEngineSpec,
    ModelSpec,
    PlannerSpec,
    PoolLimits,
    PoolSpec,
    VllmEngineSpec,
    load_cluster_spec,
    parse_cluster_spec,
    split_url,
)

__all__ = [
    "AdminSpec", "ApiKeysSpec", "ClusterSpec", "ConfigError", "DisaggregationSpec", "EnvVar", "EtcdSpec",
    "EtcdUrl", "FrontendSpec", "KubernetesPoolSpec", "KubernetesSpec", "KvTransferSpec", "MockEngineSpec",
    "ModelSpec", "Name", "NatsSpec", "NatsUrl", "ObservabilitySpec", "PlannerSpec", "PoolLimits", "PoolSpec",
    "Port", "PrometheusSpec", "RouterMode", "RouterSpec", "Section", "SupervisorSpec", "VllmEngineSpec", "is_loopback",
    "load_cluster_spec", "parse_cluster_spec", "split_url",
]
