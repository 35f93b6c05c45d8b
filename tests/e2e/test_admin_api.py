"""`orchestrator up` with credentials everywhere, as a user runs it: an external etcd with
authentication, the embedded NATS with its random token, and the admin API behind a token,
scaled from the command line with `orchestrator scale`."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import msgspec
import psutil
import pytest

from dynamo_lite.credentials import EtcdCredentials
from dynamo_lite.discovery import etcd_client
from dynamo_lite.infra import EmbeddedEtcd
from dynamo_lite.orchestrator.state import ClusterState
from tests.e2e.test_orchestrator_up import orchestrator, start_up, wait_gone
from tests.integration.etcd_auth import enable_auth

pytestmark = pytest.mark.integration
ADMIN_TOKEN, ETCD_PASSWORD = "e2e-admin-token", "e2e-etcd-password"


@pytest.fixture
def etcd_with_auth(tmp_path: Path) -> Iterator[EmbeddedEtcd]:
    """An etcd that `up` does not start (the spec names it), with user `dl` allowed /dynamo_lite/."""
    server = EmbeddedEtcd(tmp_path / "external-etcd")
    try:
        asyncio.run(server.start())
        asyncio.run(enable_auth(server.url, "dl", ETCD_PASSWORD))
        yield server
    finally:
        asyncio.run(server.stop())


def get(url: str, token: str | None = None) -> tuple[int, object]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def registered(etcd_url: str) -> list[str]:
    async def read() -> list[str]:
        async with etcd_client(etcd_url, credentials=EtcdCredentials("dl", ETCD_PASSWORD)) as client:
            return sorted(kv.key.decode().rsplit("/", 1)[1] for kv in await client.get_prefix(b"/dynamo_lite/adm/"))

    return asyncio.run(read())


def scale(spec: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(orchestrator("scale", "-f", str(spec), *args), capture_output=True, text=True,
                          timeout=120, env=env, check=False)


def test_admin_api_and_scale_with_credentials_everywhere(
        tmp_path: Path, etcd_with_auth: EmbeddedEtcd, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("E2E_ETCD_PASSWORD", ETCD_PASSWORD)
    monkeypatch.setenv("E2E_ADMIN_TOKEN", ADMIN_TOKEN)
    spec = tmp_path / "cluster.yaml"
    spec.write_text(
        f"namespace: adm\nstate_dir: {tmp_path / 'state'}\n"
        f"etcd: {{url: '{etcd_with_auth.url}', user: dl, password_env: E2E_ETCD_PASSWORD}}\n"
        "admin: {token_env: E2E_ADMIN_TOKEN}\n"
        "models: [{name: tiny, path: 'builtin:tiny', block_size: 16}]\n"
        "frontend: {port: 0}\n"
        "pools: [{name: decode, role: aggregated, engine: mock, mock: {speedup_ratio: 50}}]\n"
    )
    up = start_up(spec)
    try:
        state_file = tmp_path / "state" / "cluster.json"
        assert stat.S_IMODE(state_file.stat().st_mode) == 0o600, "it holds the NATS token"
        state = msgspec.json.decode(state_file.read_bytes(), type=ClusterState)
        assert state.nats_token and state.admin_url and state.admin_url.startswith("http://127.0.0.1:")
        for p in state.processes:
            command_line = " ".join(psutil.Process(p.pid).cmdline())
            assert state.nats_token not in command_line and ETCD_PASSWORD not in command_line, p.name

        assert get(f"{state.admin_url}/status") == (401, {"error": "missing or wrong bearer token "
                                                                   "(Authorization: Bearer <token>)"})
        code, status = get(f"{state.admin_url}/status", ADMIN_TOKEN)
        assert code == 200 and status["healthy"], status  # type: ignore[index]
        assert [w["pool"] for w in status["workers"]] == ["decode"]  # type: ignore[index]
        assert {c["name"] for c in status["checks"]} >= {"nats", "etcd", "frontend"}  # type: ignore[index]
        assert get(f"{state.admin_url}/pools", ADMIN_TOKEN) == (200, [
            {"name": "decode", "role": "aggregated", "engine": "mock", "model": "tiny", "replicas": 1}])

        grown = scale(spec, "decode", "2")
        assert (grown.returncode, grown.stdout) == (0, "pool decode: 1 -> 2 replicas\n"), grown.stderr
        assert len(registered(etcd_with_auth.url)) == 2
        state = msgspec.json.decode(state_file.read_bytes(), type=ClusterState)
        assert len([p for p in state.processes if p.name.startswith("worker ")]) == 2, "state file refreshed"
        shrunk = scale(spec, "decode", "1")
        assert (shrunk.returncode, shrunk.stdout) == (0, "pool decode: 2 -> 1 replicas\n"), shrunk.stderr
        assert len(registered(etcd_with_auth.url)) == 1, "the lease is revoked at once"

        no_token = scale(spec, "decode", "3", env={k: v for k, v in os.environ.items() if k != "E2E_ADMIN_TOKEN"})
        assert no_token.returncode == 2
        assert "admin.token_env: environment variable E2E_ADMIN_TOKEN is not set" in no_token.stderr
        wrong = scale(spec, "decode", "3", env={**os.environ, "E2E_ADMIN_TOKEN": "guess"})
        assert wrong.returncode == 1 and "401 missing or wrong bearer token" in wrong.stderr
        unknown = scale(spec, "prefill", "1")
        assert unknown.returncode == 1 and "no pool 'prefill' runs under this `orchestrator up`" in unknown.stderr

        status_cli = subprocess.run(orchestrator("status", "-f", str(spec)), capture_output=True, text=True,
                                    timeout=30, check=False)
        assert status_cli.returncode == 0, status_cli.stdout + status_cli.stderr
        assert "workers (1):" in status_cli.stdout

        pids = [p.pid for p in msgspec.json.decode(state_file.read_bytes(), type=ClusterState).processes]
        up.terminate()
        assert up.wait(timeout=90) == 0
        wait_gone(pids, 10)
    finally:
        up.kill()
