"""Kubernetes connector: scale one Deployment per pool through its `scale` subresource.

Built on `dynamo_lite.k8s.scaler.KubernetesScaler`. Every tick starts with
`refresh()`, which reads each Deployment's desired replicas, so a manual
`kubectl scale` is honoured: the planner decides from what is there now. A
change is patched with the resourceVersion that was read; if someone scaled the
Deployment in between, the patch is refused (`ScaleConflict`), counted in
`failures`, and the next tick decides again from the new value.
Scale-down safety comes from the pods, not from here: Kubernetes sends SIGTERM,
on which the worker agent revokes its lease, hands back queued prefill jobs and
drains its engine; terminationGracePeriodSeconds covers that drain.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from dynamo_lite.k8s.scaler import KubernetesScaler, ScaleError
from dynamo_lite.tasks import cancel_and_wait
from planner.types import Decision, Pool, Replicas

log = logging.getLogger(__name__)

ScalerFactory = Callable[[str], Awaitable[KubernetesScaler]]


class KubernetesConnector:
    def __init__(self, namespace: str, deployments: dict[Pool, str],
                 connect: ScalerFactory = KubernetesScaler.connect, stop_timeout_s: float = 30.0) -> None:
        self.namespace = namespace  # Kubernetes namespace of the Deployments
        self.deployments = deployments  # pool -> Deployment whose replicas are its workers
        self.failures = 0
        self.stop_timeout_s = stop_timeout_s
        self._connect = connect
        self._scaler: KubernetesScaler | None = None
        self._replicas: dict[Pool, int] = {}
        self._tasks: dict[Pool, asyncio.Task[None]] = {}

    async def refresh(self) -> None:
        if self._scaler is None:
            self._scaler = await self._connect(self.namespace)
        for pool, deployment in self.deployments.items():
            try:
                self._replicas[pool] = await self._scaler.get_replicas(deployment)
            except ScaleError as e:
                self.failures += 1
                log.warning("planner: cannot read the scale of %s: %s", deployment, e)

    def current(self) -> Replicas:
        return Replicas(self._replicas.get(Pool.PREFILL, 0), self._replicas.get(Pool.DECODE, 0))

    def busy(self) -> dict[str, bool]:
        return {p.value: self._busy(p) for p in self.deployments}

    def apply(self, decision: Decision) -> None:
        for pool, deployment in self.deployments.items():
            d = decision.of(pool)
            if d.delta == 0 or self._busy(pool):
                continue
            log.info("planner: scaling Deployment %s %d -> %d (%s)", deployment, d.current, d.target, d.reason)
            self._tasks[pool] = asyncio.create_task(self._scale(pool, deployment, d.target),
                                                    name=f"planner-k8s-scale-{pool.value}")

    async def _scale(self, pool: Pool, deployment: str, n: int) -> None:
        assert self._scaler is not None
        try:
            await self._scaler.set_replicas(deployment, n)
            self._replicas[pool] = n
        except ScaleError as e:
            self.failures += 1
            log.warning("planner: scaling %s to %d refused: %s (decided again next tick)", deployment, n, e)

    def _busy(self, pool: Pool) -> bool:
        task = self._tasks.get(pool)
        return task is not None and not task.done()

    async def wait_idle(self) -> None:
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)

    async def stop(self) -> None:
        pending = [t for t in self._tasks.values() if not t.done()]
        if pending:
            _, late = await asyncio.wait(pending, timeout=self.stop_timeout_s)
            await cancel_and_wait(*late)
        self._tasks.clear()
        if self._scaler is not None:
            await self._scaler.close()
            self._scaler = None
