"""Worker agents with mock engines, as real processes against real NATS and etcd."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import msgspec
import pytest
from nats.aio.client import Client as NatsClient

from dynamo_lite.discovery import WorkerWatcher, etcd_client
from dynamo_lite.infra import EmbeddedEtcd, EmbeddedNats
from dynamo_lite.protocol import BlockStored, KvEventsMessage, LoadReport, RelayedKvEvents, RequestId, Role
from dynamo_lite.queue import PrefillSubmitter, connect_nats
from dynamo_lite.orchestrator.state import pid_alive
from tests.waiting import eventually_async

pytestmark = pytest.mark.integration
NS = "agents"
BLOCK = 16


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(
        f"namespace: {NS}\nstate_dir: {tmp_path / 'state'}\netcd: {{lease_ttl_s: 3}}\n"
        f"models: [{{name: m, path: builtin:tiny, block_size: {BLOCK}}}]\n"
        "pools:\n"
        "  - {name: prefill, role: prefill, engine: mock, mock: {speedup_ratio: 20}}\n"
        "  - {name: decode, role: decode, engine: mock, mock: {speedup_ratio: 20}}\n"
    )
    return path


@pytest.fixture
async def watcher(etcd_server: EmbeddedEtcd) -> AsyncIterator[WorkerWatcher]:
    async with etcd_client(etcd_server.url) as client:
        w = WorkerWatcher(client, NS)
        await w.start()
        yield w
        await w.stop()


@pytest.fixture
async def nc(nats_server: EmbeddedNats) -> AsyncIterator[NatsClient]:
    client = await connect_nats(nats_server.url, "test")
    yield client
    await client.close()


async def collect(nc: NatsClient, subject: str, type_: type) -> list:
    """Every message on `subject` as `type_`; a KV events message's batches one by one."""
    got: list = []

    async def on_msg(msg) -> None:  # noqa: ANN001
        if type_ is RelayedKvEvents:  # a message holds one or more batches (protocol.KvEventsMessage)
            got.extend(msgspec.json.decode(msg.data, type=KvEventsMessage))
        else:
            got.append(msgspec.json.decode(msg.data, type=type_))

    await nc.subscribe(subject, cb=on_msg)
    return got


async def local_compute_tokens(url: str) -> float:
    async with aiohttp.ClientSession() as s, s.get(f"{url}/metrics") as r:
        text = await r.text()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("vllm:prompt_tokens_by_source_total") and 'source="local_compute"' in line)


async def test_prefill_and_decode_agents_move_a_request(
    spec: Path, nats_server: EmbeddedNats, etcd_server: EmbeddedEtcd, watcher: WorkerWatcher,
    nc: NatsClient, start_agent,
) -> None:
    events = await collect(nc, f"{NS}.kv_events.*", RelayedKvEvents)
    loads = await collect(nc, f"{NS}.load.*", LoadReport)
    prefill = start_agent(spec, "prefill", nats_server.url, etcd_server.url, "p0")
    decode = start_agent(spec, "decode", nats_server.url, etcd_server.url, "d0")
    p = await prefill.wait_registered(watcher, 60)
    d = await decode.wait_registered(watcher, 60)
    assert (p.role, p.model, p.block_size, p.pool) == (Role.PREFILL, "m", BLOCK, "prefill")
    assert d.role == Role.DECODE and d.kv_capacity_blocks == 16384, "capacity read from vllm:cache_config_info"
    assert p.nixl_side_channel and d.nixl_side_channel and p.nixl_side_channel != d.nixl_side_channel

    submitter = PrefillSubmitter(nc, NS)
    await submitter.start()
    prompt = list(range(1000, 1000 + 10 * BLOCK + 5))
    result = await submitter.prefill(RequestId("req-1"), "m", prompt, timeout_s=30)
    assert result.worker_id == "p0" and result.prompt_tokens == len(prompt)
    assert result.kv_transfer_params["do_remote_prefill"] is True

    before = await local_compute_tokens(d.engine_url)
    body = {"model": "m", "prompt": prompt, "max_tokens": 4, "kv_transfer_params": result.kv_transfer_params}
    async with aiohttp.ClientSession() as s, s.post(f"{d.engine_url}/v1/completions", json=body) as r:
        assert r.status == 200
        assert (await r.json())["usage"]["completion_tokens"] == 4
    assert await local_compute_tokens(d.engine_url) == before, "decode computed no prompt token itself"

    def relayed() -> bool:  # events as they happen, a load report per second
        stored = {(e.worker_id, tuple(ev.token_ids)) for e in events for ev in e.batch.events
                  if isinstance(ev, BlockStored)}
        assert ("p0", tuple(prompt[: 10 * BLOCK])) in stored, "the prefill engine's stored blocks were relayed"
        assert any(w == "d0" for w, _ in stored), "the decode engine's blocks too"
        assert {r.worker_id for r in loads} == {"p0", "d0"}
        return True

    await eventually_async(relayed, timeout=10, what="KV events and load reports from both workers on NATS")
    for worker in ("p0", "d0"):
        seqs = [e.seq for e in events if e.worker_id == worker]
        assert seqs == list(range(len(seqs))), "relayed in order, from the engine's first batch"
    async with aiohttp.ClientSession() as s, s.get(f"{p.agent_url}/metrics") as r:
        agent_metrics = await r.text()
    assert 'dynamo_lite_worker_prefill_jobs_total{outcome="done"} 1.0' in agent_metrics
    assert 'dynamo_lite_worker_kv_event_batches_total{path="live"}' in agent_metrics
    assert "dynamo_lite_worker_registered 1.0" in agent_metrics
    await submitter.stop()


async def test_sigterm_revokes_lease_then_stops_engine(
    spec: Path, nats_server: EmbeddedNats, etcd_server: EmbeddedEtcd, watcher: WorkerWatcher, start_agent,
) -> None:
    agent = start_agent(spec, "decode", nats_server.url, etcd_server.url, "d-term")
    record = await agent.wait_registered(watcher, 60)
    engine_pid = record.pid
    assert engine_pid and pid_alive(engine_pid)
    agent.proc.send_signal(signal.SIGTERM)
    started = time.monotonic()
    await watcher.wait_for(lambda ws: "d-term" not in ws, timeout_s=5)
    assert time.monotonic() - started < 1.5, "the lease is revoked first, not left to expire"
    assert await asyncio.to_thread(agent.proc.wait, 30) == 0
    assert not pid_alive(engine_pid), "the agent stopped its engine"


async def test_killed_agent_takes_its_engine_and_leaves_within_ttl(
    spec: Path, nats_server: EmbeddedNats, etcd_server: EmbeddedEtcd, watcher: WorkerWatcher, start_agent,
) -> None:
    agent = start_agent(spec, "decode", nats_server.url, etcd_server.url, "d-kill")
    record = await agent.wait_registered(watcher, 60)
    os.kill(agent.proc.pid, signal.SIGKILL)
    killed = time.monotonic()
    await watcher.wait_for(lambda ws: "d-kill" not in ws, timeout_s=10)
    assert time.monotonic() - killed < 3 + 1.5, "gone within the 3 s lease TTL"
    assert record.pid
    await eventually_async(lambda: not pid_alive(record.pid), timeout=10,
                           what="the engine to die with its agent (parent-death signal)")


async def test_relay_replays_events_published_before_it_listened(tmp_path: Path) -> None:
    """The engine publishes before anyone subscribes; the relay recovers those batches from the replay socket."""
    from dynamo_lite.engines.mock import KvEventsConfig, MockEngineArgs, engine_command
    from dynamo_lite.infra import ManagedProcess, free_port
    from dynamo_lite.infra.health import http_ok
    from dynamo_lite.protocol import WorkerId
    from dynamo_lite.worker.kv_relay import KvEventRelay

    port, events_port, replay_port = free_port(), free_port(), free_port()
    args = MockEngineArgs(model="m", port=port, block_size=BLOCK, speedup_ratio=50, kv_events_config=KvEventsConfig(
        enable_kv_cache_events=True, publisher="zmq", endpoint=f"tcp://127.0.0.1:{events_port}",
        replay_endpoint=f"tcp://127.0.0.1:{replay_port}", topic="kv"))
    engine = ManagedProcess("mock", engine_command(args), tmp_path / "mock.log")
    engine.start()
    try:
        await engine.wait_healthy(lambda: http_ok(f"http://127.0.0.1:{port}/health"), 30)
        async with aiohttp.ClientSession() as s:
            for i in range(3):  # three batches nobody hears
                prompt = list(range(i * 100, i * 100 + 2 * BLOCK))
                async with s.post(f"http://127.0.0.1:{port}/v1/completions",
                                  json={"model": "m", "prompt": prompt, "max_tokens": 1}) as r:
                    assert r.status == 200
            relayed: list[RelayedKvEvents] = []

            async def publish(batch: RelayedKvEvents, replayed: bool) -> None:
                relayed.append(batch)

            relay = KvEventRelay(WorkerId("w"), f"tcp://127.0.0.1:{events_port}", publish,
                                 replay_endpoint=f"tcp://127.0.0.1:{replay_port}")
            relay.start()
            # The engine's PUB reconnects to the new SUB, and drops what it sends before that; nothing
            # shows when it has, and a dropped batch 3 would leave no later one to trigger the replay.
            await asyncio.sleep(1.0)
            async with s.post(f"http://127.0.0.1:{port}/v1/completions",
                              json={"model": "m", "prompt": list(range(500, 500 + 2 * BLOCK)), "max_tokens": 1}) as r:
                assert r.status == 200
            try:
                await eventually_async(lambda: len(relayed) >= 4, timeout=10, interval=0.05,
                                       what="3 replayed batches and the live one")
            finally:
                await relay.stop()
        assert [b.seq for b in relayed] == [0, 1, 2, 3]
        assert relay.batches_replayed == 3
        first = relayed[0].batch.events[0]
        assert isinstance(first, BlockStored) and first.token_ids == list(range(0, 2 * BLOCK))
    finally:
        await engine.stop()
