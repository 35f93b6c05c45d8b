"""The reconciler against real child processes: a killed child comes back, a crash loop is given up
without spinning, and nothing is restarted once the reconciler is stopped."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from dynamo_lite.infra.process import ManagedProcess, RestartableChild
from dynamo_lite.orchestrator.reconciler import Reconciler, SupervisorMetrics
from dynamo_lite.orchestrator.restarts import PartState, RestartPolicy
from tests.waiting import eventually_async

pytestmark = pytest.mark.integration

# Serves (writes its pid to argv[2]) until killed, unless the file argv[1] exists: then it fails at
# start, as a child whose configuration an operator broke would.
CHILD = """
import os, sys, time
if os.path.exists(sys.argv[1]):
    print("refusing to start: bad configuration in", sys.argv[1], flush=True)
    sys.exit(3)
with open(sys.argv[2], "w") as f:
    f.write(str(os.getpid()))
time.sleep(600)
"""


class Child(RestartableChild):
    def __init__(self, tmp: Path) -> None:
        self.part = "child"
        self.broken = tmp / "broken"
        self.serving = tmp / "serving"  # the pid of the child that serves
        self.process = ManagedProcess("child", [sys.executable, "-c", CHILD, str(self.broken), str(self.serving)],
                                      tmp / "child.log")

    async def start(self) -> None:
        self.process.start()
        await self.process.wait_healthy(self._serving, timeout_s=20)

    async def _serving(self) -> bool:
        return self.serving.exists() and self.serving.read_text() == str(self.process.pid)


def reconciler(child: Child, limit: int = 5) -> tuple[Reconciler, SupervisorMetrics]:
    metrics = SupervisorMetrics(CollectorRegistry())
    policy = RestartPolicy(backoff_s=0.2, max_backoff_s=0.4, limit=limit, window_s=60)
    return Reconciler([child], policy, metrics, interval_s=0.1), metrics


def restarts(metrics: SupervisorMetrics) -> float:
    return metrics.registry.get_sample_value("dynamo_lite_supervisor_restarts_total", {"part": "child"}) or 0.0


async def test_a_killed_child_is_restarted(tmp_path: Path) -> None:
    child = Child(tmp_path)
    await child.start()
    first = child.process.pid
    r, metrics = reconciler(child)
    r.start()
    try:
        assert first is not None
        os.kill(first, signal.SIGKILL)
        await eventually_async(lambda: restarts(metrics) == 1, timeout=20, what="one restart")
        assert child.process.running() and child.process.pid != first
        (health,) = r.health()
        assert (health.state, health.restarts) == (PartState.RUNNING, 1)
        assert "exited with code -9" in health.reason
    finally:
        await r.stop()
        await child.process.stop()


async def test_a_crash_loop_is_given_up_without_spinning(tmp_path: Path) -> None:
    child = Child(tmp_path)
    await child.start()
    r, metrics = reconciler(child, limit=3)
    r.start()
    try:
        child.broken.write_text("x")  # every start from now on fails
        cpu = time.process_time()
        child.process.kill()
        await eventually_async(lambda: r.health()[0].state is PartState.FAILED, timeout=30, what="given up")
        (health,) = r.health()
        assert health.restarts == 0
        assert "refusing to start: bad configuration" in health.reason  # the child's own last words
        assert metrics.registry.get_sample_value("dynamo_lite_supervisor_given_up_total", {"part": "child"}) == 1
        await asyncio.sleep(1.0)  # given up: no more attempts, and the loop idles
        assert not child.process.running()
        assert time.process_time() - cpu < 1.0, "the reconciler should sleep between checks, not spin"
    finally:
        await r.stop()
        await child.process.stop()


async def test_nothing_is_restarted_after_stop(tmp_path: Path) -> None:
    child = Child(tmp_path)
    await child.start()
    r, metrics = reconciler(child)
    r.start()
    await r.stop()  # as at shutdown: the operator's stop comes after this
    await child.process.stop()
    await asyncio.sleep(1.0)
    assert not child.process.running()
    assert restarts(metrics) == 0
