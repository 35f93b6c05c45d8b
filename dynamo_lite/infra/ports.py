"""Free loopback ports for embedded servers and tests, and who listens on one."""

from __future__ import annotations

import random
import socket
from pathlib import Path

import psutil

LOWEST = 10000  # free_port picks from here up to the kernel's ephemeral range
_rng = random.Random()  # seeded from the OS at import: a test's random.seed() does not make processes pick alike


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that nothing listens on right now, below the kernel's ephemeral range.

    A port the kernel picks (bind to port 0) is from its ephemeral range, which it also hands to every
    outgoing connection: between the pick and the bind of the server it is meant for, any connection of
    any process (an etcd or NATS client, an HTTP request) may take it as its local port. Seen in CI:
    `orchestrator up` refused its frontend port, "already in use". Below that range the kernel never
    hands a port out by itself. Falls back to the kernel's pick where the range leaves no room below it.
    """
    low = _ephemeral_low()
    for _ in range(100 if low > LOWEST + 1000 else 0):
        port = _rng.randrange(LOWEST, low)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _ephemeral_low(path: Path = Path("/proc/sys/net/ipv4/ip_local_port_range")) -> int:
    """The first port of the kernel's ephemeral range (Linux; 32768, its default, where it cannot be read)."""
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


class PortInUse(OSError):
    """A port that must be free is taken; the message says by what it was found."""


def ensure_free(host: str, port: int) -> None:
    """Raise PortInUse unless `port` on `host` can be bound by a plain socket (no SO_REUSEPORT).

    Run before starting processes that bind the port with SO_REUSEPORT: that option lets any
    process of the same user join the port, and so share its connections, without an error.
    SO_REUSEADDR is set, as every server here sets it, so connections of an earlier run still in
    TIME_WAIT do not count as a taker.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            raise PortInUse(f"port {port} on {host} is already in use ({e.strerror}): processes binding it with "
                            "SO_REUSEPORT would share it with whatever holds it") from None


def listens_on(pid: int, port: int) -> bool:
    """Whether process `pid` (or one of its children) listens on TCP `port`.

    A port picked by `free_port` is only free when picked: another process may bind it
    before the child meant for it does. Then a health check of the port reaches the wrong
    server; this tells the two apart.
    """
    try:
        root = psutil.Process(pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.Error:
        return False
    for proc in tree:
        try:
            conns = proc.net_connections(kind="tcp")
        except psutil.Error:
            continue
        if any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port for c in conns):
            return True
    return False
