"""An embedded nats-server with JetStream, its file store under the cluster's state dir."""

from __future__ import annotations

import os
import re
from pathlib import Path

from dynamo_lite.infra.binaries import find_nats_server
from dynamo_lite.infra.health import http_ok
from dynamo_lite.infra.ports import free_port
from dynamo_lite.infra.process import ManagedProcess, RestartableChild


class EmbeddedNats(RestartableChild):
    """nats-server on `host:port` with JetStream storing under `state_dir/nats`.

    Ports picked at construction (0 means free ones) stay fixed across restarts,
    so clients reconnect to the same URL. With a `token`, every client must present
    it; it goes to the server in a config file only its owner can read
    (`state_dir/nats-server.conf`, mode 0600), never on the command line.
    The monitoring port (health checks) needs no token and binds to `host` too.
    """

    part = "nats-server"

    def __init__(self, state_dir: Path, host: str = "127.0.0.1", port: int = 0, token: str | None = None) -> None:
        self.host = host
        self.port = port or free_port(host)
        self.monitor_port = free_port(host)
        self.token = token
        self.config_path = state_dir / "nats-server.conf"
        store = state_dir / "nats"
        argv = [str(find_nats_server())]
        if token is not None:
            argv += ["--config", str(self.config_path)]
        argv += [
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
        if self.token is not None:
            _write_auth_config(self.config_path, self.token)
        self.process.start()
        await self.process.wait_healthy(lambda: http_ok(self.health_url), timeout_s)

    async def stop(self) -> None:
        await self.process.stop()


def _write_auth_config(path: Path, token: str) -> None:
    """A nats-server config file that asks every client for `token`, readable by its owner only."""
    if not re.fullmatch(r"[A-Za-z0-9_-]{16,}", token):  # nothing to escape in the config syntax
        raise ValueError("the NATS token must be URL-safe base64 of 16+ characters (secrets.token_urlsafe)")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        os.fchmod(f.fileno(), 0o600)  # an older file may have had other permissions
        f.write(f'authorization {{\n  token: "{token}"\n}}\n')
