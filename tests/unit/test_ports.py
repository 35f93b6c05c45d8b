"""listens_on: the process that answers on a port is the one we started; ensure_free: a taken port is found."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from dynamo_lite.infra import free_port, ports
from dynamo_lite.infra.ports import LOWEST, PortInUse, _ephemeral_low, ensure_free, listens_on
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


def test_free_port_is_below_the_ephemeral_range_that_outgoing_connections_take() -> None:
    """A port from the kernel's ephemeral range may be taken as the local port of any outgoing connection
    before its server binds it (a clean-clone CI run: `up` refused its frontend port as in use)."""
    low = _ephemeral_low()
    ports = {free_port() for _ in range(50)}
    if low > LOWEST + 1000:  # Linux's default range (32768-60999) leaves 22,768 ports below it
        assert all(LOWEST <= p < low for p in ports) and len(ports) > 40
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports.pop()))  # free to bind


def test_free_port_falls_back_to_the_kernels_pick_where_the_range_leaves_no_room(tmp_path, monkeypatch) -> None:
    (tmp_path / "range").write_text("1024\t65535\n")
    assert _ephemeral_low(tmp_path / "range") == 1024
    assert _ephemeral_low(tmp_path / "absent") == 32768
    real_low = _ephemeral_low()
    monkeypatch.setattr(ports, "_ephemeral_low", lambda: 1024)
    port = free_port()
    assert port >= real_low  # the kernel's pick, from its ephemeral range
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
