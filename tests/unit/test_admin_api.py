"""The admin API of `orchestrator up` against fake pools: routes, typed bodies, bearer tokens."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import msgspec
import pytest
from aiohttp.test_utils import TestClient, TestServer

from dynamo_lite.orchestrator.admin import (
    AdminServer,
    PoolInfo,
    ScaleReply,
    StatusReply,
    admin_app,
    scale_pool,
)
from dynamo_lite.orchestrator.admin.client import AdminError
from dynamo_lite.config import AdminSpec, ClusterSpec, PoolSpec, parse_cluster_spec
from dynamo_lite.protocol import Role, WorkerId, WorkerRecord
from dynamo_lite.orchestrator.state import ClusterState, ProcessInfo
from dynamo_lite.orchestrator.status import Check, ClusterStatus

SPEC = parse_cluster_spec(
    "models: [{name: tiny, path: 'builtin:tiny'}]\n"
    "pools:\n  - {name: prefill, role: prefill, engine: mock}\n"
    "  - {name: decode, role: decode, engine: mock, replicas: 2}\n"
)


@dataclass
class FakePool:
    """A LocalPool's scaling surface; fails when asked for more than `fail_above` workers."""

    pool: PoolSpec
    size: int
    fail_above: int = 8
    calls: list[int] = field(default_factory=list)

    async def scale_to(self, n: int) -> None:
        self.calls.append(n)
        if n > self.fail_above:
            raise RuntimeError(f"worker {self.pool.name}-9 exited while starting")
        self.size = n


def status() -> ClusterStatus:
    state = ClusterState(namespace="default", spec_path="c.yaml", supervisor_pid=os.getpid(), nats_url="nats://x:1",
                         etcd_url="http://x:2", nats_embedded=True, etcd_embedded=True, nats_token="s3cret-nats",
                         processes=[ProcessInfo(name="frontend", pid=7, url="http://127.0.0.1:8000")])
    worker = WorkerRecord(worker_id=WorkerId("decode-0-abc"), role=Role.DECODE, model="tiny",
                          engine_url="http://127.0.0.1:9", block_size=16, pool="decode")
    return ClusterStatus(state, [Check("nats", "nats://x:1", True, "JetStream on")], [worker])


Client = Callable[..., TestClient]


@pytest.fixture
async def client() -> AsyncIterator[Client]:
    made: list[TestClient] = []

    async def make(token: str | None = None, spec: ClusterSpec = SPEC) -> TestClient:
        pools = [FakePool(p, p.replicas) for p in spec.pools]
        scaled: list[int] = []

        async def get_status() -> ClusterStatus:
            return status()

        app = admin_app(spec, lambda: pools, get_status, lambda: scaled.append(1), token)
        c = TestClient(TestServer(app))
        await c.start_server()
        c.pools, c.scaled = pools, scaled  # type: ignore[attr-defined]
        made.append(c)
        return c

    yield make  # type: ignore[misc]
    for c in made:
        await c.close()


async def test_status_lists_processes_checks_and_workers_without_secrets(client: Client) -> None:
    c = await client()
    resp = await c.get("/status")
    assert resp.status == 200
    body = await resp.read()
    reply = msgspec.json.decode(body, type=StatusReply)
    assert reply.healthy and reply.supervisor_pid == os.getpid()
    assert [p.name for p in reply.processes] == ["frontend"] and reply.workers[0].worker_id == "decode-0-abc"
    assert b"s3cret-nats" not in body


async def test_pools_and_scaling(client: Client) -> None:
    c = await client()
    pools = msgspec.json.decode(await (await c.get("/pools")).read(), type=list[PoolInfo])
    assert pools == [PoolInfo(name="prefill", role="prefill", engine="mock", model="tiny", replicas=1),
                     PoolInfo(name="decode", role="decode", engine="mock", model="tiny", replicas=2)]
    resp = await c.post("/pools/decode/scale", json={"replicas": 3})
    assert resp.status == 200
    reply = msgspec.json.decode(await resp.read(), type=ScaleReply)
    assert (reply.previous, reply.pool.replicas, c.pools[1].size, c.scaled) == (2, 3, 3, [1])


@pytest.mark.parametrize(("path", "body", "status", "says"), [
    ("/pools/nope/scale", {"replicas": 1}, 404,
     "no pool 'nope' runs under this `orchestrator up` (pools: prefill, decode)"),
    ("/pools/decode/scale", {"replicas": -1}, 400, "replicas: Input should be greater than or equal to 0"),
    ("/pools/decode/scale", {"replicas": 1, "force": True}, 400, "force: Extra inputs are not permitted"),
    ("/pools/decode/scale", [], 400, 'expected {"replicas": N}'),
    ("/pools/decode/scale", {"replicas": 9}, 500, "scaling pool 'decode' to 9 failed: worker decode-9 exited"),
])
async def test_bad_requests_get_json_errors(client: Client, path: str, body: object, status: int, says: str) -> None:
    c = await client()
    resp = await c.post(path, json=body)
    assert resp.status == status
    assert says in (await resp.json())["error"]


async def test_a_configured_token_is_required_on_every_route(client: Client) -> None:
    c = await client(token="admin-t0ken")
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic admin-t0ken"},
                    {"Authorization": "admin-t0ken"}):
        for method, path in (("GET", "/status"), ("GET", "/pools"), ("POST", "/pools/decode/scale")):
            resp = await c.request(method, path, headers=headers, json={"replicas": 1})
            assert resp.status == 401, (method, path, headers)
            assert "bearer token" in (await resp.json())["error"]
            assert resp.headers["WWW-Authenticate"].startswith("Bearer")
    assert c.pools[1].calls == []
    ok = await c.get("/pools", headers={"Authorization": "Bearer admin-t0ken"})
    assert ok.status == 200


async def test_server_binds_a_free_loopback_port_and_the_client_scales() -> None:
    pools = [FakePool(p, p.replicas) for p in SPEC.pools]

    async def get_status() -> ClusterStatus:
        return status()

    server = AdminServer(AdminSpec(), admin_app(SPEC, lambda: pools, get_status, lambda: None, "t0ken"))
    await server.start()
    try:
        assert server.url is not None and server.url.startswith("http://127.0.0.1:")
        reply = await scale_pool(server.url, "prefill", 2, "t0ken", timeout_s=10)
        assert (reply.previous, reply.pool.replicas) == (1, 2)
        with pytest.raises(AdminError, match="401 missing or wrong bearer token"):
            await scale_pool(server.url, "prefill", 2, None, timeout_s=10)
    finally:
        await server.stop()
    with pytest.raises(AdminError, match="ClientConnectorError"):
        await scale_pool(server.url, "prefill", 2, "t0ken", timeout_s=10)
