"""An embedded single-member etcd, its data under the cluster's state dir."""

from __future__ import annotations

from pathlib import Path

from dynamo_lite.infra.binaries import find_etcd
from dynamo_lite.infra.health import http_ok
from dynamo_lite.infra.ports import free_port
from dynamo_lite.infra.process import ManagedProcess, RestartableChild


class EmbeddedEtcd(RestartableChild):
    """etcd on `host:port` with its data in `state_dir/etcd`.

    Ports picked at construction stay fixed across restarts; the data directory
    survives a restart, so leases and keys do too.
    """

    part = "etcd"

    def __init__(self, state_dir: Path, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self.port = port or free_port(host)
        self.peer_port = free_port(host)
        client_url = f"http://{host}:{self.port}"
        peer_url = f"http://{host}:{self.peer_port}"
        argv = [
            str(find_etcd()),
            "--name", "dynamo_lite",
            "--data-dir", str(state_dir / "etcd"),
            "--listen-client-urls", client_url,
            "--advertise-client-urls", client_url,
            "--listen-peer-urls", peer_url,
            "--initial-advertise-peer-urls", peer_url,
            "--initial-cluster", f"dynamo_lite={peer_url}",
            "--log-level", "warn",
        ]  # fmt: skip
        self.process = ManagedProcess("etcd", argv, state_dir / "logs" / "etcd.log")

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self, timeout_s: float = 30.0) -> None:
        self.process.start()
        await self.process.wait_healthy(lambda: http_ok(f"{self.url}/health", contains='"true"'), timeout_s)

    async def stop(self) -> None:
        await self.process.stop()
