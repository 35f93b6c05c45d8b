"""Run a worker pool as local processes: one `python -m dynamo_lite.worker` per replica.

This is how `orchestrator up` starts the pools of a spec on one machine. A pool
is up when each replica's agent has registered in etcd; stopping sends SIGTERM,
and each agent revokes its lease, drains and stops its engine before exiting.
`scale_to(n)` is the planner's local scaling connector: it grows or shrinks a
running pool the same way. A worker that dies on its own is reported by
`failure()` and replaced, under a new worker id, by `recover()` (the supervisor's
reconciler calls both); scaling and replacing take turns on one lock, so they do
not race, and workers retired by a scale-down are never reported as failed.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Iterator
from itertools import count
from pathlib import Path

from dynamo_lite.config import ClusterSpec, PoolSpec
from dynamo_lite.discovery import WorkerWatcher, etcd_client
from dynamo_lite.infra import ManagedProcess, ProcessFailed
from dynamo_lite.infra.process import ProcessInfo

log = logging.getLogger(__name__)


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
        self.part = f"pool {pool.name}"
        self.target = pool.replicas
        """Replicas the pool should have: the spec's, then the last `scale_to`."""
        self._lock = asyncio.Lock()
        self.start_timeout_s = 900.0 if pool.engine == "vllm" else 60.0
        self.replicas: dict[str, ManagedProcess] = {}
        """Workers in service or starting, oldest first."""
        self.draining: dict[str, ManagedProcess] = {}
        """Workers being scaled away: lease revoked, finishing their requests."""
        self.stop_grace_s = 90.0  # covers the agent's drain timeout plus its engine's stop
        self._next_index = 0

    @property
    def size(self) -> int:
        """Replicas in service or starting (what the planner counts)."""
        return len(self.replicas)

    def processes(self) -> list[ProcessInfo]:
        return [ProcessInfo(name=f"worker {wid}", pid=p.pid, log=str(p.log_path))
                for wid, p in {**self.replicas, **self.draining}.items() if p.pid is not None]

    async def start(self) -> None:
        await self.scale_to(self.pool.replicas)

    def failure(self) -> str | None:
        """Why a worker in service died (its exit code and log tail), or None while all of them run."""
        reasons = [p.exit_reason() for p in self.replicas.values()]
        dead = [r for r in reasons if r is not None]
        return "\n".join(dead) if dead else None

    async def recover(self) -> None:
        """Replace the workers that died with new ones (new ids), back to `target`; raises ProcessFailed
        if a replacement fails to start."""
        async with self._lock:
            for worker_id, process in list(self.replicas.items()):
                if process.exit_reason() is not None:
                    del self.replicas[worker_id]
                    log.warning("%s: worker %s died; replacing it", self.pool.name, worker_id)
            await self._scale(self.target)

    async def stop(self) -> None:
        everything = {**self.replicas, **self.draining}
        await asyncio.gather(*(p.stop(grace_s=self.stop_grace_s) for p in everything.values()))
        self.replicas.clear()
        self.draining.clear()

    async def scale_to(self, n: int) -> None:
        """Grow or shrink the pool to `n` replicas; returns when that is done.

        It waits for a replacement in progress to end; then `size` reflects `n` at once. Growing spawns workers and
        waits until they register (a worker that fails to start is removed and
        ProcessFailed raised). Shrinking takes the newest workers out: SIGTERM
        makes each agent revoke its lease (routers drop it at once), hand back
        queued prefill jobs, let its engine finish its requests (bounded by the
        agent's drain timeout) and stop it; SIGKILL only after `stop_grace_s`.
        """
        if n < 0:
            raise ValueError("a pool cannot have fewer than 0 replicas")
        async with self._lock:
            self.target = n
            await self._scale(n)

    async def _scale(self, n: int) -> None:
        if n > self.size:
            new = [self._spawn(self._next_index + i) for i in range(n - self.size)]
            try:
                await self._wait_registered(new)
            except BaseException:
                await asyncio.gather(*(self.replicas.pop(w).stop(grace_s=10.0) for w in new if w in self.replicas))
                raise
        elif n < self.size:
            leaving = list(self.replicas)[n:]
            for wid in leaving:
                self.draining[wid] = self.replicas.pop(wid)
            await asyncio.gather(*(self._retire(wid) for wid in leaving))

    async def _retire(self, worker_id: str) -> None:
        code = await self.draining[worker_id].stop(grace_s=self.stop_grace_s)
        del self.draining[worker_id]
        log.info("%s: worker %s stopped (exit code %s)", self.pool.name, worker_id, code)

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
        self._next_index = max(self._next_index, index + 1)
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
    """Every pool of the spec, also those with `replicas: 0` (the admin API and the planner may grow
    them); prefill pools first, so decode workers find them; aggregated and decode after."""
    order = {"prefill": 0, "aggregated": 1, "decode": 2}
    pools = sorted(spec.pools, key=lambda p: order[p.role.value])
    cores = count()
    return [LocalPool(spec, spec_path, p, nats_url, etcd_url, cores) for p in pools]


class ModelPreparation:
    """Component: make every model of the spec ready before workers and frontend start: vLLM
    engines load it, the frontend takes its tokenizer (SmolLM2 is converted once from its GGUF
    file; this shows that step on its own instead of inside several processes)."""

    def __init__(self, spec: ClusterSpec) -> None:
        self.spec = spec
        self.paths = sorted({m.path for m in spec.models})
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
