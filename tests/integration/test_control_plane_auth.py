"""Credentials against real servers: the embedded NATS as `up` starts it (random token, loopback),
the embedded etcd (loopback, no auth), and an etcd with authentication turned on."""

from __future__ import annotations

import stat
import time
from collections.abc import AsyncIterator
from pathlib import Path

import psutil
import pytest

from dynamo_lite import credentials
from dynamo_lite.config import parse_cluster_spec
from dynamo_lite.credentials import EtcdCredentials, NatsCredentials
from dynamo_lite.discovery import (
    EtcdAuthError,
    WorkerRegistration,
    WorkerWatcher,
    etcd_client,
)
from dynamo_lite.infra import EmbeddedEtcd, EmbeddedNats
from dynamo_lite.protocol import Role, WorkerId, WorkerRecord
from dynamo_lite.queue import connect_nats
from dynamo_lite.queue.connection import NatsAuthError
from dynamo_lite.orchestrator.status import cluster_status
from tests.integration.etcd_auth import enable_auth

pytestmark = pytest.mark.integration
NS = "auth"


def listening(pid: int) -> set[str]:
    return {c.laddr.ip for c in psutil.Process(pid).net_connections(kind="inet") if c.status == psutil.CONN_LISTEN}


def record(worker_id: str) -> WorkerRecord:
    return WorkerRecord(worker_id=WorkerId(worker_id), role=Role.DECODE, model="m",
                        engine_url="http://127.0.0.1:9000", block_size=16)


@pytest.fixture
async def nats_with_token(tmp_path: Path) -> AsyncIterator[EmbeddedNats]:
    server = EmbeddedNats(tmp_path / "state", token=credentials.new_token())  # as `orchestrator up` does
    try:
        await server.start()
        yield server
    finally:
        await server.stop()


async def test_embedded_nats_wants_its_token_and_listens_on_loopback(
        nats_with_token: EmbeddedNats, monkeypatch: pytest.MonkeyPatch) -> None:
    server, token = nats_with_token, nats_with_token.token
    assert token is not None and server.process.pid is not None
    assert stat.S_IMODE(server.config_path.stat().st_mode) == 0o600
    assert token not in " ".join(psutil.Process(server.process.pid).cmdline()), "never on a command line"
    assert listening(server.process.pid) == {"127.0.0.1"}, "client and monitoring ports on loopback"

    for creds, problem in ((NatsCredentials(), "the server needs credentials and none were given"),
                           (NatsCredentials(token="not-the-token"), "the token, or the user and password, is wrong")):
        started = time.monotonic()
        with pytest.raises(NatsAuthError, match=f"refused intruder: authorization violation: {problem}"):
            await connect_nats(server.url, "intruder", credentials=creds)
        assert time.monotonic() - started < 3, "refused at once, not retried forever"

    nc = await connect_nats(server.url, "owner", credentials=NatsCredentials(token=token))
    try:
        sub = await nc.subscribe("ping")
        await nc.publish("ping", b"1")
        assert (await sub.next_msg(timeout=2)).data == b"1"
        assert (await nc.jetstream().account_info()).streams == 0
    finally:
        await nc.close()
    monkeypatch.setenv(credentials.NATS_TOKEN, token)  # how the processes `up` starts receive it
    nc = await connect_nats(server.url, "child")
    assert nc.is_connected
    await nc.close()


async def test_embedded_etcd_listens_on_loopback_only(etcd_server: EmbeddedEtcd) -> None:
    assert etcd_server.process.pid is not None
    assert listening(etcd_server.process.pid) == {"127.0.0.1"}, "client and peer ports on loopback"


async def test_etcd_with_auth_serves_the_right_credentials_only(
        etcd_server: EmbeddedEtcd, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    await enable_auth(etcd_server.url, "dl", "dl-password")
    right = EtcdCredentials("dl", "dl-password")
    async with etcd_client(etcd_server.url, credentials=right) as client:
        registration = WorkerRegistration(client, NS, record("w1"), ttl_s=5)
        await registration.start()
        watcher = WorkerWatcher(client, NS)
        await watcher.start()
        assert set(watcher.workers) == {"w1"}
        second = WorkerRegistration(client, NS, record("w2"), ttl_s=5)
        await second.start()
        await watcher.wait_for(lambda ws: "w2" in ws, timeout_s=5)
        await second.stop()
        await watcher.stop()

        cases = [(EtcdCredentials(), "user name is empty.*no credentials were given: set etcd.user"),
                 (EtcdCredentials("dl", "wrong"), "authentication failed.*wrong etcd user name or password")]
        for creds, problem in cases:
            started = time.monotonic()
            other = etcd_client(etcd_server.url, credentials=creds)  # connects (authenticates) on first use
            try:
                with pytest.raises(EtcdAuthError, match=problem):
                    await WorkerRegistration(other, NS, record("intruder"), ttl_s=5).start(timeout_s=30)
                with pytest.raises(EtcdAuthError, match=problem):
                    await WorkerWatcher(other, NS).start()
            finally:
                await other.close()
            assert time.monotonic() - started < 5, "refused at once, not retried as if etcd were down"
        with pytest.raises(EtcdAuthError, match="wrong etcd user name or password"):
            async with etcd_client(etcd_server.url, credentials=EtcdCredentials("dl", "wrong")):
                pass

        # A spec naming an external etcd with auth: `status` reads the password from the variable it names.
        spec = parse_cluster_spec(f"namespace: {NS}\nstate_dir: {tmp_path / 'state'}\n"
                                  f"etcd: {{url: '{etcd_server.url}', user: dl, password_env: TEST_ETCD_PW}}\n")
        monkeypatch.setenv("TEST_ETCD_PW", "dl-password")
        status = await cluster_status(spec)
        (check,) = status.checks
        assert check.healthy and [w.worker_id for w in status.workers] == ["w1"], check
        monkeypatch.setenv("TEST_ETCD_PW", "wrong")
        (check,) = (await cluster_status(spec)).checks
        assert not check.healthy and check.detail.startswith("refused: etcd refused the request"), check

        monkeypatch.setenv(credentials.ETCD_USER, "dl")  # how the processes `up` starts receive them
        monkeypatch.setenv(credentials.ETCD_PASSWORD, "dl-password")
        async with etcd_client(etcd_server.url) as child:
            assert len(await child.get_prefix(f"/dynamo_lite/{NS}/".encode())) == 1
        await registration.stop()
