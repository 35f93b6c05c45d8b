"""Fixtures of the integration tests: worker agents as real subprocesses, and the tiny model's
tokenizer for mock fleets (the fleet harness itself is tests/integration/fleet.py)."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import SimpleNamespace
from pathlib import Path

import pytest

from dynamo_lite.discovery import WorkerWatcher
from dynamo_lite.protocol import WorkerRecord
from tests.waiting import eventually_async


@dataclass
class AgentProcess:
    proc: subprocess.Popen[bytes]
    worker_id: str
    log: Path

    def record(self, watcher: WorkerWatcher) -> WorkerRecord:
        return watcher.workers[self.worker_id]  # type: ignore[index]

    async def wait_registered(self, watcher: WorkerWatcher, timeout_s: float) -> WorkerRecord:
        def registered() -> bool:
            if self.proc.poll() is not None:
                pytest.fail(f"agent {self.worker_id} exited with {self.proc.returncode}:\n{self.tail()}")
            return self.worker_id in watcher.workers

        await eventually_async(registered, timeout=timeout_s, interval=0.2, what=f"worker {self.worker_id} in etcd")
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


@pytest.fixture
def steady_client_clock() -> Iterator[None]:
    """For a test that times requests from this process: the objects of every test before it are
    frozen out of the garbage collector meanwhile. Late in the suite a full collection over them takes
    half a second or more (0.36-0.58 s measured after tests/unit alone), and one that fell inside a
    timed burst added that to a first token's measured time."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@pytest.fixture(scope="session")
def agent_processes() -> SimpleNamespace:
    """`spawn(log_dir, spec, pool, nats_url, etcd_url, worker_id, *extra)` and `stop(agents)`,
    for fixtures with a wider scope than `start_agent`."""
    return SimpleNamespace(spawn=spawn_agent, stop=stop_agents)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """builtin:tiny's tokenizer and chat template (weights are not needed by mock engines)."""
    from dynamo_lite.engines.models.tiny import train_tokenizer

    out = tmp_path_factory.mktemp("tiny")
    train_tokenizer(out)
    (out / "config.json").write_text(json.dumps({"model_type": "llama"}))
    return out
