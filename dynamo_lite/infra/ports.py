"""Free loopback ports for embedded servers and tests, and who listens on one."""

from __future__ import annotations

import socket

import psutil


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


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
