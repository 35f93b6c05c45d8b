"""Discovery against a real etcd: registration, watch, lease expiry, etcd restart."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from dynamo_lite.discovery import WorkerRegistration, WorkerWatcher, etcd_client
from dynamo_lite.infra import EmbeddedEtcd
from dynamo_lite.protocol import Role, WorkerId, WorkerRecord

pytestmark = pytest.mark.integration
NS = "test"


def record(worker_id: str, role: Role = Role.DECODE, port: int = 9000) -> WorkerRecord:
    return WorkerRecord(
        worker_id=WorkerId(worker_id), role=role, model="m", engine_url=f"http://127.0.0.1:{port}", block_size=16
    )


async def test_register_then_watch_sees_snapshot_and_changes(etcd_server: EmbeddedEtcd) -> None:
    async with etcd_client(etcd_server.url) as client:
        first = WorkerRegistration(client, NS, record("w1"), ttl_s=5)
        await first.start()
        watcher = WorkerWatcher(client, NS)
        await watcher.start()
        assert set(watcher.workers) == {"w1"}, "snapshot holds the worker registered before the watch"
        changes = []
        watcher.add_listener(changes.append)

        second = WorkerRegistration(client, NS, record("w2", Role.PREFILL), ttl_s=5)
        await second.start()
        await watcher.wait_for(lambda ws: "w2" in ws, timeout_s=5)
        assert watcher.by_role(Role.PREFILL) == [record("w2", Role.PREFILL)]
        await second.update(record("w2", Role.PREFILL, port=9999))
        await watcher.wait_for(lambda ws: ws["w2"].engine_url.endswith(":9999"), timeout_s=5)

        started = time.monotonic()
        await first.stop()
        await watcher.wait_for(lambda ws: "w1" not in ws, timeout_s=5)
        assert time.monotonic() - started < 1.0, "revoking the lease removes the worker at once"
        assert [(c.worker_id, c.record is None) for c in changes] == [("w2", False), ("w2", False), ("w1", True)]
        assert changes[1].previous == record("w2", Role.PREFILL)
        await second.stop()
        await watcher.stop()


REGISTER_AND_HANG = textwrap.dedent(
    """
    import asyncio, sys
    from dynamo_lite.discovery import WorkerRegistration, etcd_client
    from dynamo_lite.protocol import Role, WorkerId, WorkerRecord

    async def main():
        async with etcd_client(sys.argv[1]) as client:
            rec = WorkerRecord(worker_id=WorkerId("doomed"), role=Role.DECODE, model="m",
                               engine_url="http://127.0.0.1:1", block_size=16)
            reg = WorkerRegistration(client, "test", rec, ttl_s=3)
            await reg.start()
            print("registered", flush=True)
            await asyncio.sleep(3600)

    asyncio.run(main())
    """
)


async def test_killed_worker_disappears_within_its_ttl(etcd_server: EmbeddedEtcd) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", REGISTER_AND_HANG, etcd_server.url], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 30)
        assert line.strip() == "registered"
        async with etcd_client(etcd_server.url) as client:
            watcher = WorkerWatcher(client, NS)
            await watcher.start()
            assert "doomed" in watcher.workers
            await asyncio.sleep(4)  # longer than the TTL: the keep-alive must be holding it
            assert "doomed" in watcher.workers, "a live worker keeps its lease past the TTL"
            os.kill(proc.pid, signal.SIGKILL)
            killed = time.monotonic()
            await watcher.wait_for(lambda ws: "doomed" not in ws, timeout_s=10)
            gone_after = time.monotonic() - killed
            assert gone_after <= 3 + 1.5, f"lease TTL is 3 s, the worker went away after {gone_after:.1f} s"
            await watcher.stop()
    finally:
        proc.kill()
        proc.wait()


async def test_registration_and_watch_survive_etcd_restart(etcd_server: EmbeddedEtcd) -> None:
    async with etcd_client(etcd_server.url) as worker_client, etcd_client(etcd_server.url) as router_client:
        reg = WorkerRegistration(worker_client, NS, record("survivor"), ttl_s=3)
        await reg.start()
        watcher = WorkerWatcher(router_client, NS, retry_s=0.2)
        await watcher.start()
        changes = []
        watcher.add_listener(changes.append)

        await etcd_server.stop()
        await asyncio.sleep(1.5)  # the downtime is the fault
        await etcd_server.start()

        # A change made right after the restart must reach the watcher: it resumes from its revision.
        other = WorkerRegistration(worker_client, NS, record("newcomer"), ttl_s=3)
        await other.start()
        await watcher.wait_for(lambda ws: {"survivor", "newcomer"} <= set(ws), timeout_s=15)
        await asyncio.sleep(4)  # past the TTL: the survivor's keep-alive works against the new server
        assert {"survivor", "newcomer"} <= set(watcher.workers)
        assert reg.registered.is_set()

        await other.stop()
        await watcher.wait_for(lambda ws: "newcomer" not in ws, timeout_s=5)
        assert [(c.worker_id, c.record is not None) for c in changes] == [("newcomer", True), ("newcomer", False)]
        await reg.stop()
        await watcher.stop()


async def test_registration_comes_back_after_etcd_loses_its_data(tmp_path) -> None:
    """An etcd replaced by an empty one (new data dir, same port): the worker registers again."""
    first = EmbeddedEtcd(tmp_path / "a")
    await first.start()
    try:
        async with etcd_client(first.url) as client:
            reg = WorkerRegistration(client, NS, record("phoenix"), ttl_s=2)
            await reg.start()
            await first.stop()
            replacement = EmbeddedEtcd(tmp_path / "b", port=first.port)
            await replacement.start()
            try:
                async with etcd_client(replacement.url) as reader:
                    watcher = WorkerWatcher(reader, NS)
                    await watcher.start()
                    await watcher.wait_for(lambda ws: "phoenix" in ws, timeout_s=15)
                    await watcher.stop()
                await reg.stop()
            finally:
                await replacement.stop()
    finally:
        await first.stop()
