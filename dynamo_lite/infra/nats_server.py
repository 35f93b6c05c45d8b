"""An embedded nats-server with JetStream, its file store under the cluster's state dir."""

from __future__ import annotations

from pathlib import Path

from dynamo_lite.infra.binaries import find_nats_server
from dynamo_lite.infra.health import http_ok
from dynamo_lite.infra.ports import free_port
from dynamo_lite.infra.process import ManagedProcess


class EmbeddedNats:
    """nats-server on `host:port` with JetStream storing under `state_dir/nats`.

    Ports picked at construction (0 means free ones) stay fixed across restarts,
    so clients reconnect to the same URL.
    """

    def __init__(self, state_dir: Path, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self.port = port or free_port(host)
        self.monitor_port = free_port(host)
        store = state_dir / "nats"
        argv = [
            str(find_nats_server()),
            "--jetstream",
            "--store_dir", str(store),
            "--addr", host,
            "--port", str(self.port),
            "--http_port", str(self.monitor_port),
            "--server_name", f"dynamo_lite_{self.port}",
        ]  # fmt: skip
        self.process = ManagedProcess("nats-server", argv, state_dir / "logs" / "nats-server.log")

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    @property
    def health_url(self) -> str:
        return f"http://{self.host}:{self.monitor_port}/healthz?js-enabled-only=true"

    async def start(self, timeout_s: float = 30.0) -> None:
        self.process.start()
        await self.process.wait_healthy(lambda: http_ok(self.health_url), timeout_s)

    async def stop(self) -> None:
        await self.process.stop()
