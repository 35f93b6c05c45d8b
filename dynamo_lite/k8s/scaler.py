"""Scale worker pools on Kubernetes: read and patch the `scale` subresource of their Deployments.

The planner's Kubernetes connector calls this; it needs the optional
`kubernetes-asyncio` package (`pip install .[k8s]`). RBAC: `get` and `patch` on
`deployments/scale`, which is all the rendered planner Role grants.

Manual changes are honoured: `get_replicas` returns the Deployment's desired
replicas as they are now, whoever set them (`kubectl scale`, the planner, an
apply), so the planner decides from the current size, never from its own last
target. A patch carries the resourceVersion of the last read of that Deployment,
so a change made between the read and the patch makes the API server answer 409
and `set_replicas` raise `ScaleConflict` instead of overwriting it; the planner
reads again on its next tick. A patch without an earlier read is unconditional.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

log = logging.getLogger(__name__)

class ScaleError(RuntimeError):
    """The API server refused to read or change a Deployment's scale."""


class DeploymentNotFound(ScaleError):
    pass


class ScaleConflict(ScaleError):
    """The Deployment's scale changed since it was last read; read it again."""


@dataclass(frozen=True)
class DeploymentScale:
    desired: int  # spec.replicas: what the Deployment is asked to run
    current: int  # status.replicas: pods that exist now (starting ones included)


class KubernetesScaler:
    """Scale of Deployments in one namespace. Use one per event loop; close it (or use
    `async with`) to release the HTTP session.

    `api` is an `ApiClient` built by the caller (tests point it at a fake API server);
    `connect()` builds one from the pod's service account, or else from kubeconfig.
    """

    def __init__(self, namespace: str, api: client.ApiClient, field_manager: str = "dynamo-lite-planner") -> None:
        self.namespace = namespace
        self.field_manager = field_manager
        self._api = api
        self._apps = client.AppsV1Api(api)
        self._versions: dict[str, str] = {}  # deployment -> resourceVersion of its last read scale

    @classmethod
    async def connect(cls, namespace: str, kubeconfig: str | None = None) -> KubernetesScaler:
        """In a pod: its service account. Elsewhere: `kubeconfig` (default ~/.kube/config)."""
        configuration = client.Configuration()
        try:
            config.load_incluster_config(client_configuration=configuration)
        except config.ConfigException:
            await config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        return cls(namespace, client.ApiClient(configuration))

    async def get_scale(self, deployment: str) -> DeploymentScale:
        """Desired and current replicas of `deployment`, as the API server has them now."""
        try:
            scale = await self._apps.read_namespaced_deployment_scale(deployment, self.namespace)
        except ApiException as e:
            raise self._error("read", deployment, e) from None
        if scale.metadata is not None and scale.metadata.resource_version:
            self._versions[deployment] = scale.metadata.resource_version
        desired = (scale.spec.replicas if scale.spec is not None else None) or 0
        current = (scale.status.replicas if scale.status is not None else None) or 0
        return DeploymentScale(desired=desired, current=current)

    async def get_replicas(self, deployment: str) -> int:
        """The desired replicas now (spec.replicas), including changes made by hand."""
        return (await self.get_scale(deployment)).desired

    async def set_replicas(self, deployment: str, n: int) -> None:
        """Ask for `n` replicas. Raises ScaleConflict if the scale changed since this
        scaler last read it, DeploymentNotFound, or ScaleError for other refusals."""
        if n < 0:
            raise ValueError(f"replicas must be >= 0, got {n}")
        body: dict[str, Any] = {"spec": {"replicas": n}}
        version = self._versions.pop(deployment, None)
        if version is not None:
            body["metadata"] = {"resourceVersion": version}
        try:
            scale = await self._apps.patch_namespaced_deployment_scale(
                deployment, self.namespace, body, field_manager=self.field_manager
            )  # a dict body goes as a strategic merge patch: here the same as a JSON merge patch
        except ApiException as e:
            raise self._error("patch", deployment, e) from None
        if scale.metadata is not None and scale.metadata.resource_version:
            self._versions[deployment] = scale.metadata.resource_version
        log.info("kubernetes: deployment %s/%s scaled to %d", self.namespace, deployment, n)

    def _error(self, verb: str, deployment: str, e: ApiException) -> ScaleError:
        where = f"deployment {self.namespace}/{deployment}"
        if e.status == 404:
            return DeploymentNotFound(f"{where}: not found")
        if e.status == 409:
            return ScaleConflict(f"{where}: scale changed since it was read; not overwritten")
        return ScaleError(f"{where}: cannot {verb} scale: HTTP {e.status} {e.reason}")

    async def close(self) -> None:
        await self._api.close()

    async def __aenter__(self) -> KubernetesScaler:
        return self

    async def __aexit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        await self.close()
