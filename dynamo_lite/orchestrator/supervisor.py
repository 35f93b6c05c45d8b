"""`orchestrator up`: bring a cluster up from its spec, hold it, take it down in order.

Start order: embedded etcd and NATS (when the spec names no external ones), then
each stage of components in the order given (the components of a stage together). Stop order is the reverse: components first
(last started, first stopped, so workers can still revoke leases and drain over
NATS), then NATS, then etcd. Every child process is started with a parent-death
signal, so even a killed supervisor leaves no orphans.

Credentials: the embedded NATS server gets a new random token at each start; an
external server's credentials come from the variables the spec names. They reach
the children (and this process's own clients) as environment variables
(credentials.py), set here before any component starts and removed at shutdown.
The admin API, when given, starts right after NATS and etcd and stops first.

Once everything is up, a `Reconciler` restarts what dies on its own (reconciler.py):
NATS and etcd on their ports with their data, the frontend, Prometheus, and workers
(replaced under new ids). Shutdown stops it before anything else, so nothing the
operator stops comes back.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TextIO

from prometheus_client import CollectorRegistry

from dynamo_lite import credentials
from dynamo_lite.config import ClusterSpec
from dynamo_lite.credentials import EtcdCredentials, NatsCredentials
from dynamo_lite.infra import EmbeddedEtcd, EmbeddedNats
from dynamo_lite.orchestrator.reconciler import (
    Reconciler,
    Recoverable,
    SupervisorMetrics,
)
from dynamo_lite.orchestrator.restarts import RestartPolicy
from dynamo_lite.orchestrator.state import (
    ClusterState,
    PartRecord,
    ProcessInfo,
    read_state,
    remove_state,
    write_state,
)

log = logging.getLogger(__name__)


class Component(Protocol):
    """Something `up` runs: a frontend, a worker pool, the planner."""

    name: str

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def processes(self) -> list[ProcessInfo]: ...


ComponentFactory = Callable[[ClusterSpec, Path, "Endpoints"], list[Component]]
"""Makes the components of one stage (all worker pools, say) from the spec, its path and the endpoints."""


@dataclass(frozen=True)
class Endpoints:
    nats_url: str
    etcd_url: str


class AlreadyRunning(RuntimeError):
    pass


class AdminEndpoint(Protocol):
    """The admin API (dynamo_lite.orchestrator.admin.AdminServer): `url` is set once `start()` returns."""

    url: str | None

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


@dataclass
class Supervisor:
    spec: ClusterSpec
    spec_path: Path
    component_factories: list[ComponentFactory] = field(default_factory=list)
    out: TextIO = sys.stdout
    nats: EmbeddedNats | None = None
    etcd: EmbeddedEtcd | None = None
    components: list[Component] = field(default_factory=list)
    endpoints: Endpoints | None = None
    state_listeners: list[Callable[[ClusterState], None]] = field(default_factory=list)
    """Called with the cluster's state each time it is written (processes started or stopped)."""
    admin: AdminEndpoint | None = None
    metrics: SupervisorMetrics = field(default_factory=lambda: SupervisorMetrics(CollectorRegistry()))
    """The supervisor's own metrics (restarts), served on the admin API's /metrics."""
    reconciler: Reconciler | None = None
    _saved_environ: dict[str, str | None] = field(default_factory=dict, init=False, repr=False)
    """Values the credential variables had before `start()`, put back at shutdown."""

    @property
    def state_dir(self) -> Path:
        return self.spec.resolved_state_dir()

    async def run(self, stop: asyncio.Event) -> None:
        """Start everything, wait for `stop`, then stop everything (also on failure)."""
        self._refuse_if_running()
        try:
            await self.start()
            self._say(f"cluster {self.spec.namespace!r} is up. Ctrl-C or `orchestrator down` stops it.")
            await stop.wait()
            self._say("shutting down ...")
        finally:
            await self.shutdown()
        self._say("stopped.")

    def _refuse_if_running(self) -> None:
        running = read_state(self.state_dir)
        if running is not None and running.supervisor_pid != os.getpid():
            raise AlreadyRunning(
                f"cluster {self.spec.namespace!r} is already up (pid {running.supervisor_pid}, state {self.state_dir}); "
                "stop it with `orchestrator down` first"
            )

    async def start(self) -> None:
        """Raises ConfigError (before starting anything) if the spec names a credentials variable that is unset."""
        nats_creds = NatsCredentials() if self.spec.nats.embedded else self.spec.nats.credentials()
        etcd_creds = EtcdCredentials() if self.spec.etcd.embedded else self.spec.etcd.credentials()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        endpoints = await self._start_infra()
        self.endpoints = endpoints
        if self.nats is not None:
            nats_creds = NatsCredentials(token=self.nats.token)
        self._export(nats_creds.environ() | etcd_creds.environ())
        if self.admin is not None:
            await self._step("starting admin API", self.admin.start())
            self._say(f"admin API: {self.admin.url} (`orchestrator scale -f SPEC POOL N`)")
        self._write_state(endpoints)
        for factory in self.component_factories:
            stage = factory(self.spec, self.spec_path, endpoints)
            # A stage's components start together (pools load their engines in parallel); a
            # component is stopped at shutdown if it was asked to start, even if it failed to.
            self.components.extend(stage)
            try:
                await asyncio.gather(*(self._step(f"starting {c.name}", c.start()) for c in stage))
            finally:
                self._write_state(endpoints)
        if self.spec.supervisor.restart:
            self._start_reconciler()

    def _start_reconciler(self) -> None:
        s = self.spec.supervisor
        parts = [p for p in (self.etcd, self.nats, *self.components) if isinstance(p, Recoverable)]
        policy = RestartPolicy(s.restart_backoff_s, s.restart_backoff_max_s, s.restart_limit, s.restart_window_s)
        self.reconciler = Reconciler(parts, policy, self.metrics, on_change=self.refresh_state,
                                     interval_s=s.check_interval_s)
        self.reconciler.start()
        self.refresh_state()

    async def shutdown(self) -> None:
        """Stop in reverse order; each step is bounded by the component's own timeouts."""
        if self.reconciler is not None:  # first: what is stopped from here on stays stopped
            await self._quietly("stopping restarts", self.reconciler.stop())
        if self.admin is not None:
            await self._quietly("stopping admin API", self.admin.stop())
        while self.components:
            component = self.components.pop()
            await self._quietly(f"stopping {component.name}", component.stop())
        if self.nats is not None:
            await self._quietly("stopping nats-server", self.nats.stop())
        if self.etcd is not None:
            await self._quietly("stopping etcd", self.etcd.stop())
        remove_state(self.state_dir)
        self._restore_environ()

    def _export(self, values: dict[str, str]) -> None:
        """Credentials for every child started from now on (and this process's own clients)."""
        for name in credentials.VARIABLES:
            self._saved_environ.setdefault(name, os.environ.get(name))
            if name in values:
                os.environ[name] = values[name]
            else:
                os.environ.pop(name, None)  # e.g. a token in the caller's shell for some other server

    def _restore_environ(self) -> None:
        for name, value in self._saved_environ.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self._saved_environ.clear()

    async def _start_infra(self) -> Endpoints:
        steps = []
        if self.spec.etcd.embedded:
            self.etcd = EmbeddedEtcd(self.state_dir, self.spec.etcd.host, self.spec.etcd.port)
            steps.append(self._step("starting etcd", self.etcd.start()))
        if self.spec.nats.embedded:
            self.nats = EmbeddedNats(self.state_dir, self.spec.nats.host, self.spec.nats.port,
                                     token=credentials.new_token())
            steps.append(self._step("starting nats-server (JetStream)", self.nats.start()))
        await asyncio.gather(*steps)
        return Endpoints(
            nats_url=self.nats.url if self.nats else str(self.spec.nats.url),
            etcd_url=self.etcd.url if self.etcd else str(self.spec.etcd.url),
        )

    def refresh_state(self) -> None:
        """Rewrite the state file (a component started or stopped processes, e.g. the planner scaled)."""
        if self.endpoints is not None:
            self._write_state(self.endpoints)

    def _write_state(self, endpoints: Endpoints) -> None:
        processes = []
        for name, server in (("etcd", self.etcd), ("nats-server", self.nats)):
            if server is not None and server.process.pid is not None:
                processes.append(ProcessInfo(name=name, pid=server.process.pid, url=server.url,
                                             log=str(server.process.log_path)))
        for component in self.components:
            processes.extend(component.processes())
        if self.admin is not None and self.admin.url is not None:  # its /metrics: restarts
            processes.append(ProcessInfo(name="supervisor", pid=os.getpid(), url=self.admin.url))
        parts = [] if self.reconciler is None else [
            PartRecord(part=h.part, state=h.state.value, restarts=h.restarts, last_restart=h.last_restart,
                       reason=h.reason) for h in self.reconciler.health()
        ]  # fmt: skip
        state = ClusterState(
            namespace=self.spec.namespace,
            spec_path=str(self.spec_path),
            supervisor_pid=os.getpid(),
            nats_url=endpoints.nats_url,
            etcd_url=endpoints.etcd_url,
            nats_embedded=self.nats is not None,
            etcd_embedded=self.etcd is not None,
            processes=processes,
            nats_token=self.nats.token if self.nats else None,
            admin_url=self.admin.url if self.admin else None,
            parts=parts,
        )
        write_state(self.state_dir, state)
        for listener in self.state_listeners:
            listener(state)

    async def _step(self, what: str, step: Awaitable[None]) -> None:
        started = time.monotonic()
        self._say(f"{what} ...")
        await step
        self._say(f"{what}: ok ({time.monotonic() - started:.1f} s)")

    async def _quietly(self, what: str, step: Awaitable[None]) -> None:
        try:
            await step
            log.info("%s: done", what)
        except Exception:  # noqa: BLE001 - shutdown goes on with the next step whatever fails
            log.exception("%s failed; going on with shutdown", what)

    def _say(self, line: str) -> None:
        print(line, file=self.out, flush=True)
