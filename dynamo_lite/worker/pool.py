"""Run a worker pool as local processes: one `python -m dynamo_lite.worker` per replica.

This is how `orchestrator up` starts the pools of a spec on one machine. A pool
is up when each replica's agent has registered in etcd; stopping sends SIGTERM,
and each agent revokes its lease, drains and stops its engine before exiting.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Iterator
from itertools import count
from pathlib import Path

from dynamo_lite.config import ClusterSpec, PoolSpec
from dynamo_lite.discovery import WorkerWatcher, etcd_client
from dynamo_lite.infra import ManagedProcess, ProcessFailed
from dynamo_lite.state import ProcessInfo

class LocalPool:
    """Component: the replicas of one pool, as agent processes."""

    def __init__(self, spec: ClusterSpec, spec_path: Path, pool: PoolSpec, nats_url: str, etcd_url: str,
                 cores: Iterator[int] | None = None) -> None:
        self.spec = spec
        self.cores = cores if cores is not None else count()
        """CPU cores handed out round-robin to CPU engines (shared by the pools of one supervisor)."""
        self.spec_path = spec_path
        self.pool = pool
        self.nats_url = nats_url
        self.etcd_url = etcd_url
        self.name = f"pool {pool.name} ({pool.replicas} x {pool.role.value}, {pool.engine})"
        self.start_timeout_s = 900.0 if pool.engine == "vllm" else 60.0
        self.replicas: dict[str, ManagedProcess] = {}

    def processes(self) -> list[ProcessInfo]:
        return [ProcessInfo(name=f"worker {wid}", pid=p.pid, log=str(p.log_path))
                for wid, p in self.replicas.items() if p.pid is not None]

    async def start(self) -> None:
        for index in range(self.pool.replicas):
            self._spawn(index)
        await self._wait_registered(list(self.replicas))

    async def stop(self) -> None:
        await asyncio.gather(*(p.stop(grace_s=90.0) for p in self.replicas.values()))
        self.replicas.clear()

    def _spawn(self, index: int) -> str:
        worker_id = f"{self.pool.name}-{index}-{os.urandom(3).hex()}"
        argv = [sys.executable, "-m", "dynamo_lite.worker", "-f", str(self.spec_path), "--pool", self.pool.name,
                "--replica", str(index), "--worker-id", worker_id,
                "--nats-url", self.nats_url, "--etcd-url", self.etcd_url]
        if self.pool.engine == "vllm":
            argv += ["--cpu-core", str(next(self.cores) % (os.cpu_count() or 1))]
        log = self.spec.resolved_state_dir() / "logs" / f"{worker_id}.agent.log"
        process = ManagedProcess(f"worker {worker_id}", argv, log)
        process.start()
        self.replicas[worker_id] = process
        return worker_id

    async def _wait_registered(self, worker_ids: list[str]) -> None:
        async with etcd_client(self.etcd_url) as client:
            watcher = WorkerWatcher(client, self.spec.namespace)
            await watcher.start()
            try:
                async with asyncio.timeout(self.start_timeout_s):
                    while not set(worker_ids) <= set(watcher.workers):
                        for wid in worker_ids:
                            if not self.replicas[wid].running():
                                raise ProcessFailed(f"worker {wid} exited while starting:\n"
                                                    f"{self.replicas[wid].log_tail()}")
                        await asyncio.sleep(0.2)
            except TimeoutError:
                raise ProcessFailed(f"{self.name}: not all workers registered within {self.start_timeout_s:.0f} s") from None
            finally:
                await watcher.stop()


def local_pools(spec: ClusterSpec, spec_path: Path, nats_url: str, etcd_url: str) -> list[LocalPool]:
    """Prefill pools first, so decode workers find them; aggregated and decode after."""
    order = {"prefill": 0, "aggregated": 1, "decode": 2}
    pools = sorted(spec.pools, key=lambda p: order[p.role.value])
    cores = count()
    return [LocalPool(spec, spec_path, p, nats_url, etcd_url, cores) for p in pools if p.replicas > 0]


class ModelPreparation:
    """Component: make every model the vLLM pools serve ready before their workers start
    (SmolLM2 is converted once from its GGUF file; this shows that step on its own)."""

    def __init__(self, spec: ClusterSpec) -> None:
        self.spec = spec
        self.paths = sorted({spec.model_of(p).path for p in spec.pools if p.engine == "vllm" and p.replicas > 0})
        self.name = f"model preparation ({', '.join(self.paths)})"

    def processes(self) -> list[ProcessInfo]:
        return []

    async def start(self) -> None:
        from dynamo_lite.engines.models import resolve_model

        cache = self.spec.resolved_state_dir() / "models"
        for path in self.paths:
            await asyncio.to_thread(resolve_model, path, cache)

    async def stop(self) -> None:
        return None
