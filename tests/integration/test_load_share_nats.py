"""`LoadShare` over a real nats-server: two frontends' fleets learn each other's in-flight load,
ignore their own, hear once when the other goes idle or stops, and forget one that vanished."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry

from dynamo_lite.discovery import WorkerChange
from dynamo_lite.frontend.fleet import Fleet
from dynamo_lite.frontend.load_share import LoadShare, LoadShareMetrics
from dynamo_lite.frontend.metrics import FrontendMetrics
from dynamo_lite.infra import EmbeddedNats
from dynamo_lite.protocol import RequestId, Role, WorkerId, WorkerRecord
from dynamo_lite.queue import connect_nats
from router import RouterConfig
from tests.waiting import eventually_async

pytestmark = pytest.mark.integration
A = WorkerId("a")


def fleet(peer_ttl_s: float = 0.5) -> Fleet:
    f = Fleet({"m": RouterConfig(block_size=16, peer_load_ttl_s=peer_ttl_s)}, FrontendMetrics(CollectorRegistry()))
    r = WorkerRecord(worker_id=A, role=Role.AGGREGATED, model="m", engine_url="http://x", block_size=16)
    f.on_worker_change(WorkerChange(A, r, None))
    return f


async def test_two_frontends_see_each_others_load_and_not_their_own(nats_server: EmbeddedNats) -> None:
    ncs = [await connect_nats(nats_server.url, f"fe{i}") for i in range(2)]
    fleets = [fleet(), fleet()]
    registries = [CollectorRegistry() for _ in range(2)]
    metrics = [LoadShareMetrics(r) for r in registries]

    def published() -> float | None:
        return registries[0].get_sample_value("dynamo_lite_frontend_load_shares_published_total")

    shares = [LoadShare(nc, "ns", f, f"fe{i}", m, interval_s=0.05)
              for i, (nc, f, m) in enumerate(zip(ncs, fleets, metrics))]
    try:
        for s in shares:
            await s.start()
        router0, router1 = (f.models["m"].router for f in fleets)
        router0.on_request_start(RequestId("r"), router0.route(list(range(64)), [A]))
        await eventually_async(lambda: router1.load_of(A).requests == 1, timeout=5, what="fe1 to see fe0's request")
        assert router0.load_of(A).requests == 1  # its own, not counted again from its own messages
        assert router1.own_loads() == {}  # fe1 republishes nothing of fe0's
        router0.on_request_finish(RequestId("r"))
        await eventually_async(lambda: router1.load_of(A).requests == 0, timeout=5, what="fe0 idle, told once")
        await asyncio.sleep(0.3)
        sent = published()
        await asyncio.sleep(0.3)
        assert published() == sent, "an idle frontend stays quiet"

        router0.on_request_start(RequestId("s"), router0.route(list(range(64)), [A]))
        await eventually_async(lambda: router1.load_of(A).requests == 1, timeout=5, what="the new request")
        await shares[0].stop()  # an orderly stop says idle at once
        await eventually_async(lambda: router1.load_of(A).requests == 0, timeout=0.4, what="fe0's goodbye")

        shares[0] = LoadShare(ncs[0], "ns", fleets[0], "fe0", metrics[0], interval_s=0.05)
        await shares[0].start()
        await eventually_async(lambda: router1.load_of(A).requests == 1, timeout=5, what="fe0 back")
        await ncs[0].close()  # vanishes without a word, as a killed process: expires after the TTL
        await eventually_async(lambda: router1.load_of(A).requests == 0, timeout=3, what="fe0's load to expire")
    finally:
        for s in shares:
            await s.stop()
        for nc in ncs:
            if not nc.is_closed:
                await nc.close()


async def test_a_change_after_a_quiet_spell_is_told_at_once_and_a_burst_once_per_interval(
        nats_server: EmbeddedNats) -> None:
    """Two clients that send at nearly the same moment must not route blind to each other for a whole interval:
    a new request is published when it starts, and further changes wait for the minimum gap (5 s here)."""
    ncs = [await connect_nats(nats_server.url, f"fe{i}") for i in range(2)]
    fleets = [fleet(peer_ttl_s=30), fleet(peer_ttl_s=30)]
    registry = CollectorRegistry()
    shares = [LoadShare(ncs[0], "ns", fleets[0], "fe0", LoadShareMetrics(registry), interval_s=10.0, min_gap_s=5.0),
              LoadShare(ncs[1], "ns", fleets[1], "fe1", LoadShareMetrics(CollectorRegistry()), interval_s=10.0,
                        min_gap_s=5.0)]
    try:
        for s in shares:
            await s.start()
        router0, router1 = (f.models["m"].router for f in fleets)
        await asyncio.sleep(0.2)  # quiet
        router0.on_request_start(RequestId("r"), router0.route(list(range(64)), [A]))
        await eventually_async(lambda: router1.load_of(A).requests == 1, timeout=1, what="the new request, at once")
        router0.on_request_start(RequestId("s"), router0.route(list(range(64, 128)), [A]))
        await asyncio.sleep(1.0)
        assert router1.load_of(A).requests == 1, "a second change within the gap waits for it"
        assert registry.get_sample_value("dynamo_lite_frontend_load_shares_published_total") == 1
    finally:
        for s in shares:
            await s.stop()
        for nc in ncs:
            await nc.close()
