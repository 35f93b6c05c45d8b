"""listens_on: the process that answers on a port is the one we started; ensure_free: a taken port is found."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from dynamo_lite.infra import free_port
from dynamo_lite.infra.ports import PortInUse, ensure_free, listens_on
from tests.waiting import eventually


def test_listens_on_tells_the_owner_of_a_port() -> None:
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        eventually(lambda: listens_on(server.pid, port), timeout=10, interval=0.05, what="http.server listening")
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            pass  # the port answers ...
        assert not listens_on(idle.pid, port)  # ... but not for this process
        assert not listens_on(server.pid, free_port())
    finally:
        server.kill()
        idle.kill()
        server.wait()
        idle.wait()
    assert not listens_on(server.pid, port)  # gone


def test_ensure_free_refuses_a_port_held_with_so_reuseport() -> None:
    """A listener with SO_REUSEPORT lets a second SO_REUSEPORT bind join it silently; the plain bind of
    ensure_free does not, so the supervisor finds the port taken before its frontends would share it."""
    port = free_port()
    ensure_free("127.0.0.1", port)
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        holder.bind(("127.0.0.1", port))
        holder.listen()
        with socket.socket() as joiner:  # what the holder allows
            joiner.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            joiner.bind(("127.0.0.1", port))
        with pytest.raises(PortInUse, match=f"port {port} on 127.0.0.1 is already in use"):
            ensure_free("127.0.0.1", port)
    ensure_free("127.0.0.1", port)  # free again once the holder closed
