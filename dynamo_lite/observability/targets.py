"""Prometheus file-based service discovery for a running cluster.

`orchestrator up` keeps `<state_dir>/prometheus/targets.json` current: the frontend
(and other static components) plus, for every worker registered in etcd, its agent
and its engine. Each target carries the labels `namespace`, `component` and, for
workers, `role`, `model`, `pool` and `worker_id`, so every series of every component
can be filtered the same way whatever the component exports itself. The frontend's
processes (several may share its port) are each scraped at their own metrics port,
with a `process` label (0, 1, ...).
Prometheus re-reads the file when it changes (`file_sd_configs`).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from dynamo_lite.config import ClusterSpec
from dynamo_lite.discovery import WorkerChange, WorkerWatcher, etcd_client
from dynamo_lite.infra.process import ProcessInfo
from dynamo_lite.protocol import WorkerRecord

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Target:
    address: str  # host:port
    labels: dict[str, str] = field(default_factory=dict)

    def group(self) -> dict[str, object]:
        return {"targets": [self.address], "labels": self.labels}


def address_of(url: str) -> str:
    parsed = urlparse(url)
    return f"{parsed.hostname}:{parsed.port}"


def worker_targets(namespace: str, record: WorkerRecord) -> list[Target]:
    labels = {"namespace": namespace, "role": record.role.value, "model": record.model, "pool": record.pool,
              "worker_id": record.worker_id}
    targets = [Target(address_of(record.engine_url), {**labels, "component": "engine"})]
    if record.agent_url:
        targets.append(Target(address_of(record.agent_url), {**labels, "component": "worker"}))
    return targets


SCRAPED_COMPONENTS = ("frontend", "planner", "supervisor")
"""Processes of `orchestrator up` (by their name in the state file) that serve /metrics at their URL."""


def component_targets(namespace: str, processes: list[ProcessInfo]) -> list[Target]:
    """A process whose port is shared by several (the frontend's) is scraped at its own metrics port,
    labelled `process` with its index; the dashboards sum over processes."""
    targets = []
    for p in processes:
        url = p.metrics_url or p.url
        if p.name in SCRAPED_COMPONENTS and url:
            labels = {"namespace": namespace, "component": p.name}
            if p.name == "frontend":
                labels["process"] = str(p.index or 0)
            targets.append(Target(address_of(url), labels))
    return targets


def targets_file(spec: ClusterSpec) -> Path:
    return spec.resolved_state_dir() / "prometheus" / "targets.json"


def write_targets(path: Path, targets: list[Target]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps([t.group() for t in targets], indent=2))
    tmp.replace(path)  # atomic: Prometheus never reads half a file


class TargetsWriter:
    """Component: rewrites the targets file whenever the worker set changes."""

    name = "prometheus targets"

    def __init__(self, spec: ClusterSpec, etcd_url: str) -> None:
        self.spec = spec
        self.path = targets_file(spec)
        self.static: list[Target] = []
        self.client = etcd_client(etcd_url)
        self.watcher = WorkerWatcher(self.client, spec.namespace)

    def processes(self) -> list[ProcessInfo]:
        return []

    async def start(self) -> None:
        await self.client.connect()
        self.watcher.add_listener(self._on_change)
        await self.watcher.start()
        self._write()

    async def stop(self) -> None:
        await self.watcher.stop()
        await self.client.close()

    def _on_change(self, _: WorkerChange) -> None:
        self._write()

    def on_processes(self, processes: list[ProcessInfo]) -> None:
        """The supervisor's processes changed: scrape those that serve metrics (frontend, planner)."""
        self.static = component_targets(self.spec.namespace, processes)
        if self.watcher.revision:  # started: the worker view is there to write with
            self._write()

    def _write(self) -> None:
        targets = list(self.static)
        for record in sorted(self.watcher.workers.values(), key=lambda r: r.worker_id):
            targets.extend(worker_targets(self.spec.namespace, record))
        write_targets(self.path, targets)
        log.debug("prometheus targets: %d in %s", len(targets), self.path)
