"""Fixtures shared by every test: real nats-server and etcd on free loopback ports."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from dynamo_lite.infra import EmbeddedEtcd, EmbeddedNats


@pytest.fixture
async def nats_server(tmp_path: Path) -> AsyncIterator[EmbeddedNats]:
    server = EmbeddedNats(tmp_path / "nats-state")
    try:
        await server.start()
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def etcd_server(tmp_path: Path) -> AsyncIterator[EmbeddedEtcd]:
    server = EmbeddedEtcd(tmp_path / "etcd-state")
    try:
        await server.start()
        yield server
    finally:
        await server.stop()
