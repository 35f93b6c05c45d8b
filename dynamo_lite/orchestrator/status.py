"""`orchestrator status`: what runs where, and whether it is healthy, from the state file and etcd."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import msgspec

from dynamo_lite.config import ClusterSpec
from dynamo_lite.credentials import EtcdCredentials, NatsCredentials
from dynamo_lite.discovery import ETCD_UNAVAILABLE, EtcdAuthError, etcd_client, refusal
from dynamo_lite.orchestrator.state import (
    ClusterState,
    PartRecord,
    pid_alive,
    read_state,
)
from dynamo_lite.protocol import WorkerRecord, workers_prefix


@dataclass(frozen=True)
class Check:
    name: str
    url: str
    healthy: bool
    detail: str


@dataclass(frozen=True)
class ClusterStatus:
    state: ClusterState | None
    checks: list[Check]
    workers: list[WorkerRecord]

    @property
    def healthy(self) -> bool:
        return all(c.healthy for c in self.checks)


def control_plane_credentials(spec: ClusterSpec,
                              state: ClusterState | None) -> tuple[NatsCredentials, EtcdCredentials]:
    """The embedded NATS server's token from the state file; an external server's credentials from
    the environment variables the spec names (ConfigError if one is unset). The embedded etcd has none."""
    if state is not None and state.nats_embedded:
        nats = NatsCredentials(token=state.nats_token)
    else:
        nats = spec.nats.credentials() if spec.nats.url else NatsCredentials()
    embedded_etcd = state.etcd_embedded if state is not None else spec.etcd.embedded
    return nats, EtcdCredentials() if embedded_etcd else spec.etcd.credentials()


async def cluster_status(spec: ClusterSpec, timeout_s: float = 3.0) -> ClusterStatus:
    """Raises ConfigError when the spec names a credentials variable that is not set."""
    state = read_state(spec.resolved_state_dir())
    nats_url = state.nats_url if state else spec.nats.url
    etcd_url = state.etcd_url if state else spec.etcd.url
    nats_creds, etcd_creds = control_plane_credentials(spec, state)
    checks: list[Check] = []
    workers: list[WorkerRecord] = []
    if nats_url:
        checks.append(await _check_nats(nats_url, nats_creds, timeout_s))
    if etcd_url:
        etcd_check, workers = await _check_etcd(etcd_url, etcd_creds, spec.namespace, timeout_s)
        checks.append(etcd_check)
    if state:
        for p in state.processes:
            if p.name not in ("nats-server", "etcd"):
                alive = pid_alive(p.pid)
                detail = f"pid {p.pid}" if alive else f"pid {p.pid} is gone"
                if p.metrics_url and p.metrics_url != p.url:
                    detail += f", its metrics {p.metrics_url}/metrics"
                name = p.name if p.index is None else f"{p.name} {p.index}"
                checks.append(Check(name, p.url or "", alive, detail))
        for part in state.parts:
            if part.state != "running":
                why = part.reason.splitlines()[0] if part.reason else ""
                checks.append(Check(part.part, "", False, f"{part.state.upper()} after {part.restarts} "
                                                          f"restart(s): {why}"))  # fmt: skip
    return ClusterStatus(state, checks, workers)


async def _check_nats(url: str, credentials: NatsCredentials, timeout_s: float) -> Check:
    try:
        nc = await asyncio.wait_for(_nats_connect_once(url, credentials, timeout_s), timeout_s)
    except Exception as e:  # noqa: BLE001 - any failure to connect is 'unhealthy', reported as it is
        if "authorization violation" in str(e).lower():
            given = "wrong credentials" if credentials else "no credentials given"
            return Check("nats", url, False, f"refused: authorization violation ({given})")
        return Check("nats", url, False, f"unreachable: {e or type(e).__name__}")
    try:
        info = await nc.jetstream().account_info()
        return Check("nats", url, True, f"JetStream on, {info.streams} stream(s)")
    except Exception as e:  # noqa: BLE001
        return Check("nats", url, False, f"JetStream not available: {e}")
    finally:
        await nc.close()


async def _nats_connect_once(url: str, credentials: NatsCredentials,
                             timeout_s: float):  # noqa: ANN202 - nats' Client
    import nats  # local: status must not keep reconnecting forever like the long-lived clients

    return await nats.connect(url, connect_timeout=timeout_s, max_reconnect_attempts=0, allow_reconnect=False,
                              **credentials.connect_options())


async def _check_etcd(url: str, credentials: EtcdCredentials, namespace: str,
                      timeout_s: float) -> tuple[Check, list[WorkerRecord]]:
    try:
        async with etcd_client(url, timeout_s=timeout_s, credentials=credentials) as client:
            status = await client.status()
            found = await client.get_prefix(workers_prefix(namespace).encode())
    except EtcdAuthError as e:
        return Check("etcd", url, False, f"refused: {e}"), []
    except ETCD_UNAVAILABLE as e:
        if (refused := refusal(e)) is not None:
            return Check("etcd", url, False, f"refused: {refused}"), []
        return Check("etcd", url, False, f"unreachable: {type(e).__name__}"), []
    workers = []
    for kv in found:
        try:
            workers.append(msgspec.json.decode(kv.value, type=WorkerRecord))
        except msgspec.ValidationError:
            continue
    return Check("etcd", url, status.leader is not None, f"version {status.version}, {'leader elected' if status.leader else 'NO LEADER'}"), workers


def render(spec: ClusterSpec, status: ClusterStatus) -> str:
    lines = []
    if status.state:
        lines.append(f"cluster {spec.namespace!r}: up (supervisor pid {status.state.supervisor_pid}, "
                     f"state {spec.resolved_state_dir()})")
    else:
        lines.append(f"cluster {spec.namespace!r}: no `orchestrator up` running for {spec.resolved_state_dir()}")
    for c in status.checks:
        lines.append(f"  {c.name:<16} {'healthy' if c.healthy else 'UNHEALTHY':<10} {c.url:<28} {c.detail}")
    if status.state and status.state.parts:
        lines.extend(_restarts(status.state.parts))
    if status.workers:
        lines.append(f"workers ({len(status.workers)}):")
        lines.append(f"  {'role':<11}{'worker':<26}{'model':<20}{'engine':<28}pool")
        for w in sorted(status.workers, key=lambda w: (w.role, w.worker_id)):
            lines.append(f"  {w.role.value:<11}{w.worker_id:<26}{w.model:<20}{w.engine_url:<28}{w.pool}")
    elif any(c.name == "etcd" and c.healthy for c in status.checks):
        lines.append("workers: none registered")
    return "\n".join(lines)


def _restarts(parts: list[PartRecord]) -> list[str]:
    """The parts `up` keeps running, their restarts, and the log tail of any it gave up on."""
    lines = ["restarts:", f"  {'part':<22}{'state':<12}{'restarts':<10}last restart"]
    for p in parts:
        last = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(p.last_restart)) if p.last_restart else "-"
        lines.append(f"  {p.part:<22}{p.state:<12}{p.restarts:<10}{last}")
        if p.state != "running" and p.reason:
            lines.extend(f"    {line}" for line in p.reason.splitlines())
    return lines
