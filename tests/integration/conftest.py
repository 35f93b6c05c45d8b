"""Worker agents as real subprocesses, for the integration tests."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import SimpleNamespace
from pathlib import Path

import pytest

from dynamo_lite.discovery import WorkerWatcher
from dynamo_lite.protocol import WorkerRecord


@dataclass
class AgentProcess:
    proc: subprocess.Popen[bytes]
    worker_id: str
    log: Path

    def record(self, watcher: WorkerWatcher) -> WorkerRecord:
        return watcher.workers[self.worker_id]  # type: ignore[index]

    async def wait_registered(self, watcher: WorkerWatcher, timeout_s: float) -> WorkerRecord:
        async def registered() -> None:
            while self.worker_id not in watcher.workers:
                if self.proc.poll() is not None:
                    raise AssertionError(f"agent {self.worker_id} exited with {self.proc.returncode}:\n{self.tail()}")
                await asyncio.sleep(0.2)

        await asyncio.wait_for(registered(), timeout_s)
        return self.record(watcher)

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


StartAgent = Callable[..., AgentProcess]


def spawn_agent(log_dir: Path, spec: Path, pool: str, nats_url: str, etcd_url: str, worker_id: str,
                *extra: str) -> AgentProcess:
    log = log_dir / f"{worker_id}.agent.log"
    argv = [sys.executable, "-m", "dynamo_lite.worker", "-f", str(spec), "--pool", pool,
            "--nats-url", nats_url, "--etcd-url", etcd_url, "--worker-id", worker_id, *extra]
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    return AgentProcess(proc, worker_id, log)


def stop_agents(agents: list[AgentProcess]) -> None:
    for agent in agents:
        if agent.proc.poll() is None:
            agent.proc.terminate()
    for agent in agents:
        try:
            agent.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            agent.proc.kill()
            agent.proc.wait()


@pytest.fixture
def start_agent(tmp_path: Path) -> Iterator[StartAgent]:
    """start_agent(spec_path, pool, nats_url, etcd_url, worker_id, *extra_args) -> AgentProcess."""
    started: list[AgentProcess] = []

    def start(*args: str | Path) -> AgentProcess:
        agent = spawn_agent(tmp_path, *args)  # type: ignore[arg-type]
        started.append(agent)
        return agent

    yield start
    stop_agents(started)


@pytest.fixture(scope="session")
def agent_processes() -> SimpleNamespace:
    """`spawn(log_dir, spec, pool, nats_url, etcd_url, worker_id, *extra)` and `stop(agents)`,
    for fixtures with a wider scope than `start_agent`."""
    return SimpleNamespace(spawn=spawn_agent, stop=stop_agents)
