"""`KubernetesScaler` against a small fake of the apps/v1 Deployment `scale` subresource.

No Kubernetes API server can run here, so the test starts an aiohttp server on a
free loopback port that answers GET and PATCH on
/apis/apps/v1/namespaces/NS/deployments/NAME/scale the way the API server does:
`autoscaling/v1` Scale objects, a resourceVersion bumped on every change, 409 when
a patch names an older resourceVersion, 404 for an unknown Deployment, 415 for a
patch type it does not take. What it does not model: authentication, RBAC,
admission, and the Deployment controller (status.replicas follows spec at once).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

pytest.importorskip("kubernetes_asyncio", reason="the k8s extra (kubernetes-asyncio) is not installed")

from kubernetes_asyncio import client  # noqa: E402

from dynamo_lite.k8s.scaler import DeploymentNotFound, KubernetesScaler, ScaleConflict, ScaleError  # noqa: E402

pytestmark = pytest.mark.integration

NS = "dynamo-llama"
PATCH_TYPES = {"application/merge-patch+json", "application/strategic-merge-patch+json"}


@dataclass
class FakeDeployment:
    replicas: int
    version: int = 1


@dataclass
class FakeScaleApi:
    deployments: dict[str, FakeDeployment]
    requests: list[tuple[str, str, str, dict[str, str]]] = field(default_factory=list)  # method, name, content type, query

    def scale_by_hand(self, name: str, replicas: int) -> None:
        """What `kubectl scale deployment NAME --replicas N` does."""
        d = self.deployments[name]
        d.replicas, d.version = replicas, d.version + 1

    def _scale(self, name: str) -> dict[str, object]:
        d = self.deployments[name]
        return {"apiVersion": "autoscaling/v1", "kind": "Scale",
                "metadata": {"name": name, "namespace": NS, "resourceVersion": str(d.version)},
                "spec": {"replicas": d.replicas}, "status": {"replicas": d.replicas, "selector": f"pool={name}"}}

    @staticmethod
    def _status(code: int, reason: str, message: str) -> web.Response:
        body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "message": message,
                "code": code}
        return web.json_response(body, status=code)

    async def handle(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        self.requests.append((request.method, name, request.content_type, dict(request.query)))
        if request.match_info["ns"] != NS or name not in self.deployments:
            return self._status(404, "NotFound", f'deployments.apps "{name}" not found')
        if request.method == "GET":
            return web.json_response(self._scale(name))
        if request.content_type not in PATCH_TYPES:
            return self._status(415, "UnsupportedMediaType", "the body of the request was in an unknown format")
        patch = json.loads(await request.text())
        d = self.deployments[name]
        version = patch.get("metadata", {}).get("resourceVersion")
        if version is not None and version != str(d.version):
            return self._status(409, "Conflict", "the object has been modified; please apply your changes "
                                                 "to the latest version and try again")
        replicas = patch.get("spec", {}).get("replicas")
        if not isinstance(replicas, int) or replicas < 0:
            return self._status(422, "Invalid", "spec.replicas: must be a non-negative integer")
        if replicas != d.replicas:
            d.replicas, d.version = replicas, d.version + 1
        return web.json_response(self._scale(name))


@pytest.fixture
async def api() -> AsyncIterator[tuple[FakeScaleApi, str]]:
    fake = FakeScaleApi({"llama-pool-prefill": FakeDeployment(1), "llama-pool-decode": FakeDeployment(2)})
    app = web.Application()
    path = "/apis/apps/v1/namespaces/{ns}/deployments/{name}/scale"
    app.router.add_get(path, fake.handle)
    app.router.add_patch(path, fake.handle)
    server = TestServer(app, host="127.0.0.1", port=0)  # a free loopback port
    await server.start_server()
    try:
        yield fake, f"http://127.0.0.1:{server.port}"
    finally:
        await server.close()


def scaler_for(url: str) -> KubernetesScaler:
    configuration = client.Configuration(host=url)
    return KubernetesScaler(NS, client.ApiClient(configuration))


async def test_reads_and_patches_the_scale(api: tuple[FakeScaleApi, str]) -> None:
    fake, url = api
    async with scaler_for(url) as scaler:
        assert await scaler.get_replicas("llama-pool-decode") == 2
        scale = await scaler.get_scale("llama-pool-prefill")
        assert (scale.desired, scale.current) == (1, 1)
        await scaler.set_replicas("llama-pool-decode", 4)
        assert fake.deployments["llama-pool-decode"].replicas == 4
        assert await scaler.get_replicas("llama-pool-decode") == 4
    method, name, content_type, query = fake.requests[2]
    assert (method, name, content_type) == ("PATCH", "llama-pool-decode", "application/strategic-merge-patch+json")
    assert query["fieldManager"] == "dynamo-lite-planner"


async def test_manual_changes_are_read_and_never_overwritten(api: tuple[FakeScaleApi, str]) -> None:
    fake, url = api
    async with scaler_for(url) as scaler:
        assert await scaler.get_replicas("llama-pool-decode") == 2
        fake.scale_by_hand("llama-pool-decode", 5)  # an operator scales while the planner decides
        with pytest.raises(ScaleConflict, match="changed since it was read"):
            await scaler.set_replicas("llama-pool-decode", 3)
        assert fake.deployments["llama-pool-decode"].replicas == 5
        assert await scaler.get_replicas("llama-pool-decode") == 5  # the next tick starts from the operator's 5
        await scaler.set_replicas("llama-pool-decode", 6)
        assert fake.deployments["llama-pool-decode"].replicas == 6
        await scaler.set_replicas("llama-pool-decode", 5)  # follows its own patch: still conditional and valid
        fake.scale_by_hand("llama-pool-decode", 1)
        with pytest.raises(ScaleConflict):
            await scaler.set_replicas("llama-pool-decode", 2)
        assert fake.deployments["llama-pool-decode"].replicas == 1


async def test_a_patch_without_an_earlier_read_is_unconditional(api: tuple[FakeScaleApi, str]) -> None:
    fake, url = api
    async with scaler_for(url) as scaler:
        fake.scale_by_hand("llama-pool-prefill", 3)
        await scaler.set_replicas("llama-pool-prefill", 2)
        assert fake.deployments["llama-pool-prefill"].replicas == 2


async def test_errors_name_the_deployment(api: tuple[FakeScaleApi, str]) -> None:
    _, url = api
    async with scaler_for(url) as scaler:
        with pytest.raises(DeploymentNotFound, match="dynamo-llama/nope"):
            await scaler.get_replicas("nope")
        with pytest.raises(DeploymentNotFound):
            await scaler.set_replicas("nope", 1)
        with pytest.raises(ValueError):
            await scaler.set_replicas("llama-pool-decode", -1)
    async with KubernetesScaler("elsewhere", client.ApiClient(client.Configuration(host=url))) as scaler:
        with pytest.raises(ScaleError, match="elsewhere/llama-pool-decode"):
            await scaler.get_replicas("llama-pool-decode")


async def test_planner_connector_scales_deployments_and_follows_manual_changes(
    api: tuple[FakeScaleApi, str],
) -> None:
    from dynamo_lite.planning.kubernetes import KubernetesConnector
    from planner.types import Decision, Pool, PoolDecision, Replicas

    fake, url = api

    async def connect(namespace: str) -> KubernetesScaler:
        assert namespace == NS
        return scaler_for(url)

    connector = KubernetesConnector(NS, {Pool.PREFILL: "llama-pool-prefill", Pool.DECODE: "llama-pool-decode"},
                                    connect=connect)

    def decision(prefill: tuple[int, int], decode: tuple[int, int]) -> Decision:
        return Decision(at=0.0, prefill=PoolDecision(Pool.PREFILL, *prefill, prefill[1], "test"),
                        decode=PoolDecision(Pool.DECODE, *decode, decode[1], "test"))

    try:
        await connector.refresh()
        assert connector.current() == Replicas(1, 2)
        connector.apply(decision((1, 2), (2, 2)))
        await connector.wait_idle()
        assert fake.deployments["llama-pool-prefill"].replicas == 2 and connector.current() == Replicas(2, 2)

        fake.scale_by_hand("llama-pool-decode", 5)  # an operator scales by hand between ticks
        await connector.refresh()
        assert connector.current() == Replicas(2, 5), "the next decision starts from the operator's change"

        fake.scale_by_hand("llama-pool-decode", 6)  # ... and again, after the planner read 5
        connector.apply(decision((2, 2), (5, 3)))
        await connector.wait_idle()
        assert fake.deployments["llama-pool-decode"].replicas == 6, "a stale patch never overwrites a manual change"
        assert connector.failures == 1
    finally:
        await connector.stop()
