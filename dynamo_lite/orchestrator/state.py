"""The running cluster's state file: what `orchestrator up` started, for `status` and `down`.

Written by `up` to `<state_dir>/cluster.json` once everything it starts is up,
rewritten when that set changes, removed on a clean shutdown. It holds the embedded
NATS server's token, so only its owner may read it (mode 0600).
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from dynamo_lite.infra.process import ProcessInfo


class PartRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A part `up` keeps running, and its restarts (dynamo_lite.orchestrator.restarts.PartHealth)."""

    part: str  # "nats-server", "etcd", "frontend", "prometheus", "pool decode" ...
    state: str  # running / restarting / failed
    restarts: int = 0
    last_restart: float | None = None  # unix time
    reason: str = ""  # why it last died: exit code and log tail


class ClusterState(msgspec.Struct, frozen=True, kw_only=True):
    namespace: str
    spec_path: str
    supervisor_pid: int  # the `orchestrator up` process
    nats_url: str
    etcd_url: str
    nats_embedded: bool
    etcd_embedded: bool
    processes: list[ProcessInfo] = []
    nats_token: str | None = None  # the embedded NATS server's token (external servers: see the spec)
    admin_url: str | None = None  # the admin API of `up`, if enabled
    parts: list[PartRecord] = []  # what `up` restarts when it dies, with its restarts


def state_file(state_dir: Path) -> Path:
    return state_dir / "cluster.json"


def write_state(state_dir: Path, state: ClusterState) -> None:
    path = state_file(state_dir)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        os.fchmod(f.fileno(), 0o600)  # a leftover .tmp may have had other permissions
        f.write(msgspec.json.format(msgspec.json.encode(state)))
    tmp.replace(path)  # atomic: readers never see half a file


def read_state(state_dir: Path) -> ClusterState | None:
    """The state of a cluster whose `up` process is still alive, else None."""
    try:
        state = msgspec.json.decode(state_file(state_dir).read_bytes(), type=ClusterState)
    except (FileNotFoundError, msgspec.DecodeError):
        return None
    return state if pid_alive(state.supervisor_pid) else None


def remove_state(state_dir: Path) -> None:
    state_file(state_dir).unlink(missing_ok=True)


def pid_alive(pid: int) -> bool:
    """True while `pid` runs; an exited process its parent has not reaped yet (a zombie) counts as gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no procfs: trust kill(0)
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
