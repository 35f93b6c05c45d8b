"""The planner on a mock fleet: a step of load adds prefill and decode workers through
the local connector; when the load stops they are removed, and no request fails.

A small load generator stands in for the frontend: each request goes through the
JetStream prefill queue (PrefillSubmitter), then to a live decode worker (round
robin over the etcd view) with the returned kv_transfer_params.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest

from dynamo_lite.config import load_cluster_spec
from dynamo_lite.discovery import WorkerWatcher, etcd_client
from dynamo_lite.infra import EmbeddedEtcd, EmbeddedNats, free_port
from dynamo_lite.protocol import RequestId, Role
from dynamo_lite.queue import PrefillSubmitter, connect_nats
from dynamo_lite.orchestrator.supervisor import Supervisor
from dynamo_lite.worker.pool import local_pools
from planner import Replicas
from planner.connectors.local import LocalConnector
from dynamo_lite.planning import PlannerService, planner_stage
from tests.waiting import eventually_async

pytestmark = [pytest.mark.integration, pytest.mark.slow]
NS = "plan"
ISL, OSL = 2048, 48


def write_spec(tmp_path: Path, nats_url: str, etcd_url: str) -> Path:
    """External NATS and etcd (the fixtures): the supervisor starts only the stages, wired as the CLI does."""
    path = tmp_path / "cluster.yaml"
    # Simulated time at a tenth of wall-clock speed: a prefill of 2048 tokens takes ~0.6 s,
    # a decode token ~60 ms; a small KV cache (640 blocks of 16) fills with ~4 requests.
    # So 3 requests per second overload one prefill and one decode worker, not two of each.
    mock = "{timing: roofline, speedup_ratio: 0.1, num_gpu_blocks: 640}"
    path.write_text(
        f"namespace: {NS}\nstate_dir: {tmp_path / 'state'}\n"
        f"nats: {{url: '{nats_url}'}}\netcd: {{url: '{etcd_url}', lease_ttl_s: 3}}\n"
        "models: [{name: m, path: builtin:tiny, block_size: 16}]\n"
        f"frontend: {{port: {free_port()}}}\n"
        "pools:\n"
        f"  - {{name: prefill, role: prefill, engine: mock, replicas: 1, mock: {mock}}}\n"
        f"  - {{name: decode, role: decode, engine: mock, replicas: 1, mock: {mock}}}\n"
        "planner: {enabled: true, policy: load, interval_s: 1, cooldown_s: 4, scale_down_after: 3, max_step: 1,\n"
        "          max_total_replicas: 4, prefill: {min_replicas: 1, max_replicas: 2},\n"
        "          decode: {min_replicas: 1, max_replicas: 2}, prefill_queue_up: 2, trend_horizon_s: 0}\n"
    )
    return path


@dataclass
class Generator:
    """Sends requests at a rate until told to stop; records every outcome."""

    submitter: PrefillSubmitter
    watcher: WorkerWatcher
    session: aiohttp.ClientSession
    ok: int = 0
    failures: list[str] = field(default_factory=list)
    decode_workers_used: set[str] = field(default_factory=set)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _ids: itertools.count = field(default_factory=itertools.count)
    _rr: itertools.count = field(default_factory=itertools.count)

    async def run(self, rate: float, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            task = asyncio.create_task(self.one(next(self._ids)))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            await asyncio.sleep(1 / rate)

    async def one(self, n: int) -> None:
        prompt = [(n * 7919 + i) % 30000 + 100 for i in range(ISL)]  # unique: no prefix hits
        try:
            result = await self.submitter.prefill(RequestId(f"r{n}"), "m", prompt, timeout_s=60)
            workers = sorted(self.watcher.by_role(Role.DECODE, "m"), key=lambda w: w.worker_id)
            worker = workers[next(self._rr) % len(workers)]
            self.decode_workers_used.add(worker.worker_id)
            body = {"model": "m", "prompt": prompt, "max_tokens": OSL, "ignore_eos": True,
                    "kv_transfer_params": result.kv_transfer_params}
            async with self.session.post(f"{worker.engine_url}/v1/completions", json=body) as r:
                data = await r.json()
                if r.status != 200 or data["usage"]["completion_tokens"] != OSL:
                    self.failures.append(f"r{n} on {worker.worker_id}: {r.status} {data}")
                    return
            self.ok += 1
        except Exception as e:  # noqa: BLE001 - every failure is recorded and asserted on
            self.failures.append(f"r{n}: {type(e).__name__}: {e}")

    async def drain(self, timeout_s: float) -> None:
        if self._tasks:
            await asyncio.wait_for(asyncio.gather(*self._tasks), timeout_s)


@pytest.fixture
async def watcher(etcd_server: EmbeddedEtcd) -> AsyncIterator[WorkerWatcher]:
    async with etcd_client(etcd_server.url) as client:
        w = WorkerWatcher(client, NS)
        await w.start()
        yield w
        await w.stop()


async def wait_replicas(service: PlannerService, want: Replicas, timeout_s: float, what: str) -> float:
    started, connector = time.monotonic(), service.connector

    def settled() -> bool:
        last = "\n".join(d.explain() for d in service.decisions[-5:])
        assert connector.current() == want and not any(connector.busy().values()), \
            f"replicas {connector.current()} (busy {connector.busy()}); last decisions:\n{last}"
        return True

    await eventually_async(settled, timeout=timeout_s, interval=0.2, what=f"replicas {want} {what}")
    return time.monotonic() - started


async def test_step_load_scales_both_pools_up_then_down_without_failing_requests(
    tmp_path: Path, nats_server: EmbeddedNats, etcd_server: EmbeddedEtcd, watcher: WorkerWatcher,
) -> None:
    spec_path = write_spec(tmp_path, nats_server.url, etcd_server.url)
    spec = load_cluster_spec(spec_path)
    pools: list = []

    def worker_pools(spec, spec_path, endpoints):  # noqa: ANN001, ANN202 - a ComponentFactory
        pools[:] = local_pools(spec, spec_path, endpoints.nats_url, endpoints.etcd_url)
        return list(pools)

    def planner(spec, spec_path, endpoints):  # noqa: ANN001, ANN202 - a ComponentFactory
        return planner_stage(spec, spec_path, endpoints, pools)

    supervisor = Supervisor(spec, spec_path, component_factories=[worker_pools, planner], out=io.StringIO())
    nc = await connect_nats(nats_server.url, "load-generator")
    submitter = PrefillSubmitter(nc, NS)
    try:
        await supervisor.start()
        service = supervisor.components[-1]
        assert isinstance(service, PlannerService) and isinstance(service.connector, LocalConnector)
        await submitter.start()
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
            gen = Generator(submitter, watcher, session)
            # Step up: 3 requests/s against one prefill and one decode worker.
            load = asyncio.create_task(gen.run(rate=3, seconds=40))
            up_s = await wait_replicas(service, Replicas(2, 2), 35, "after the load step")
            load.cancel()
            await asyncio.gather(load, return_exceptions=True)
            # A trickle keeps requests in flight on every decode worker while the planner scales down.
            trickle = asyncio.create_task(gen.run(rate=0.7, seconds=60))
            down_s = await wait_replicas(service, Replicas(1, 1), 45, "after the load stopped")
            trickle.cancel()
            await asyncio.gather(trickle, return_exceptions=True)
            await gen.drain(60)
        directions = [(d.prefill.delta, d.decode.delta) for d in service.decisions]
        assert any(p > 0 for p, _ in directions) and any(d > 0 for _, d in directions)
        assert any(p < 0 for p, _ in directions) and any(d < 0 for _, d in directions)
        assert gen.failures == [], gen.failures[:5]
        assert gen.ok > 20 and len(gen.decode_workers_used) >= 2
        assert all(not p.draining for p in pools), "every removed worker was stopped"
        async with aiohttp.ClientSession() as s, s.get(str(service.url)) as r:
            text = await r.text()
        assert 'dynamo_lite_planner_decisions_total{direction="up",pool="prefill"}' in text
        print(f"scaled up in {up_s:.1f} s, down in {down_s:.1f} s; {gen.ok} requests ok")
    finally:
        await submitter.stop()
        await supervisor.shutdown()
        await nc.close()

async def test_scale_down_removes_from_routing_first_and_lets_in_flight_requests_finish(
    tmp_path: Path, nats_server: EmbeddedNats, etcd_server: EmbeddedEtcd, watcher: WorkerWatcher,
) -> None:
    spec_path = tmp_path / "cluster.yaml"
    spec_path.write_text(
        f"namespace: {NS}\nstate_dir: {tmp_path / 'state'}\netcd: {{lease_ttl_s: 3}}\n"
        "models: [{name: m, path: builtin:tiny, block_size: 16}]\n"
        "pools: [{name: decode, role: decode, engine: mock, replicas: 2, mock: {speedup_ratio: 0.2}}]\n"
    )
    [pool] = local_pools(load_cluster_spec(spec_path), spec_path, nats_server.url, etcd_server.url)
    try:
        await pool.start()
        newest = list(pool.replicas)[-1]
        await watcher.wait_for(lambda ws: newest in ws, timeout_s=10)
        url = watcher.workers[newest].engine_url  # type: ignore[index]
        body = {"model": "m", "prompt": list(range(100, 400)), "max_tokens": 150, "ignore_eos": True}
        async with aiohttp.ClientSession() as s:
            request = asyncio.create_task(s.post(f"{url}/v1/completions", json=body))

            async def running() -> bool:  # then it runs for ~5 s of decoding at this speed
                async with s.get(f"{url}/metrics") as r:
                    lines = (await r.text()).splitlines()
                return any(line.startswith("vllm:num_requests_running{") and not line.endswith(" 0.0")
                           for line in lines)

            await eventually_async(running, timeout=10, what="the request running on the worker")
            started = time.monotonic()
            scaling = asyncio.create_task(pool.scale_to(1))
            await watcher.wait_for(lambda ws: newest not in ws, timeout_s=5)
            unrouted_s = time.monotonic() - started
            assert not request.done(), "the worker left routing while its request still ran"
            async with await request as r:
                data = await r.json()
            await scaling
        assert unrouted_s < 1.5, "removed from routing first, not after the drain"
        assert r.status == 200 and data["usage"]["completion_tokens"] == 150, data
        assert pool.size == 1 and not pool.draining and newest not in pool.replicas
    finally:
        await pool.stop()
