"""Fixtures of the integration tests: worker agents as real subprocesses, the tiny model's tokenizer
for mock fleets, and a mock cluster for the API tests (the fleet harness itself is
tests/integration/fleet.py)."""

from __future__ import annotations

import gc
import json
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import SimpleNamespace
from pathlib import Path

import pytest

from dynamo_lite.discovery import WorkerWatcher
from dynamo_lite.infra import free_port
from dynamo_lite.protocol import WorkerRecord
from tests.waiting import eventually, eventually_async


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


@pytest.fixture(scope="module")
def api_cluster(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Iterator[str]:
    """A mock cluster brought up by `orchestrator up`, one per test module: model `a` (2 workers, the hermes
    tool-call and qwen3 reasoning parsers, not thinking unless a request asks: `enable_thinking`), `p`
    (1 worker, the pythonic tool-call parser) and `emb` (1 worker, a pooling model: embeddings). Yields the
    frontend's base URL. Answers are scripted per request (`vllm_xargs.mock_output`)."""
    tmp = tmp_path_factory.mktemp("api")
    port = free_port()
    spec = tmp / "cluster.yaml"
    spec.write_text(
        f"namespace: api\nstate_dir: {tmp / 'state'}\nfrontend: {{port: {port}}}\nmodels:\n"
        f"  - {{name: a, path: '{tiny_model}', max_model_len: 2048, tool_call_parser: hermes, "
        f"reasoning_parser: qwen3, default_chat_template_kwargs: {{enable_thinking: false}}}}\n"
        f"  - {{name: p, path: '{tiny_model}', max_model_len: 2048, tool_call_parser: pythonic}}\n"
        f"  - {{name: emb, path: '{tiny_model}', max_model_len: 2048, runner: pooling}}\n"
        f"pools:\n  - {{name: a, role: aggregated, engine: mock, model: a, replicas: 2, mock: {{speedup_ratio: 100}}}}\n"
        f"  - {{name: p, role: aggregated, engine: mock, model: p, mock: {{speedup_ratio: 100}}}}\n"
        f"  - {{name: emb, role: aggregated, engine: mock, model: emb, mock: {{speedup_ratio: 100}}}}\n")
    log = open(tmp / "up.log", "wb")  # noqa: SIM115 - closed below
    up = subprocess.Popen([sys.executable, "-m", "dynamo_lite.orchestrator.cli", "up", "-f", str(spec)], stdout=log,
                          stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        assert up.poll() is None, (tmp / "up.log").read_text()[-3000:]
        try:
            models = json.loads(urllib.request.urlopen(f"{base}/health", timeout=2).read())["models"]
        except OSError:
            return False
        return [models.get(m, {}).get("aggregated") for m in ("a", "p", "emb")] == [2, 1, 1]

    try:
        eventually(ready, timeout=90, what="the mock cluster", interval=0.3)
        yield base
    finally:
        up.send_signal(signal.SIGTERM)
        try:
            up.wait(60)
        except subprocess.TimeoutExpired:
            up.kill()
        log.close()
