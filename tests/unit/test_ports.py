"""listens_on: the process that answers on a port is the one we started."""

from __future__ import annotations

import socket
import subprocess
import sys

from dynamo_lite.infra import free_port
from dynamo_lite.infra.ports import listens_on
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
