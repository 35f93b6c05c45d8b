"""A mock fleet as real processes, for the integration tests: NATS and etcd, worker agents with
mock engines, and a frontend, all on loopback; `Fleet` to talk to it and read its metrics.

    f = start_fleet(tmp, tiny_model, agent_processes, {"a0": "agg"}, POOLS, FRONTEND, {"agg": {"aggregated": 1}})
    try: ... finally: stop_fleet(f, agent_processes)

`start_frontend` adds a frontend process over the same NATS and etcd (`wait_frontend`, `stop_frontend`).
The fixtures it takes (`tiny_model`, `agent_processes`) are in tests/integration/conftest.py.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import openai
import pytest

from dynamo_lite.discovery import WorkerWatcher, etcd_client
from dynamo_lite.infra import EmbeddedEtcd, EmbeddedNats, free_port
from dynamo_lite.protocol import WorkerRecord
from tests.waiting import eventually

NS = "fe"


def metric(url: str, name: str, **labels: str) -> float:
    """The sum of the samples of `name` on `url`/metrics whose labels include `labels`."""
    text = urllib.request.urlopen(f"{url}/metrics", timeout=10).read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith((name + "{", name + " ")) and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


@dataclass
class Fleet:
    url: str
    etcd_url: str
    agents: dict[str, object]
    frontend: subprocess.Popen
    log_dir: Path
    servers: list = field(default_factory=list)
    namespace: str = NS

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key="none", max_retries=0, timeout=60)

    def records(self) -> dict[str, WorkerRecord]:
        async def read() -> dict[str, WorkerRecord]:
            async with etcd_client(self.etcd_url) as c:
                w = WorkerWatcher(c, self.namespace)
                await w.start()
                await w.stop()
                return dict(w.workers)

        return asyncio.run(read())

    def health(self) -> dict:
        try:
            return json.loads(urllib.request.urlopen(f"{self.url}/health", timeout=2).read())
        except (urllib.error.URLError, ConnectionError, OSError):
            assert self.frontend.poll() is None, (self.log_dir / "frontend.log").read_text()[-3000:]
            return {}


def start_fleet(tmp: Path, model_dir: Path, procs: SimpleNamespace, workers: dict[str, str], pools: str,
                frontend: str, wait_for: dict[str, dict[str, int]], lease_ttl_s: int = 3) -> Fleet:
    """`workers` maps worker id to pool; returns once the frontend sees `wait_for` ({model: {role: n}})."""
    nats, etcd = EmbeddedNats(tmp / "nats"), EmbeddedEtcd(tmp / "etcd")
    asyncio.run(nats.start())
    asyncio.run(etcd.start())
    spec = tmp / "cluster.yaml"
    spec.write_text(
        f"namespace: {NS}\nstate_dir: {tmp / 'state'}\netcd: {{lease_ttl_s: {lease_ttl_s}}}\n"
        f"models:\n  - {{name: m, path: '{model_dir}', block_size: 16, max_model_len: 2048}}\n"
        f"  - {{name: agg, path: '{model_dir}', block_size: 16, max_model_len: 1024}}\n"
        f"  - {{name: empty, path: '{model_dir}', block_size: 16}}\n"
        f"frontend: {frontend}\npools:\n{pools}"
    )
    log_dir = tmp / "logs"
    log_dir.mkdir()
    agents = {wid: procs.spawn(log_dir, spec, pool, nats.url, etcd.url, wid) for wid, pool in workers.items()}
    url, fe = _spawn_frontend(log_dir / "frontend.log", spec, nats.url, etcd.url)
    fleet = Fleet(url, etcd.url, agents, fe, log_dir, [nats, etcd])

    respawned: set[str] = set()  # agents started again
    frontend_restarted = False
    seen: list[dict] = [{}]

    def ready() -> bool:
        # Ports come from free_port() and are bound seconds later (the frontend binds after it has
        # loaded its tokenizers and reached etcd and NATS), so a process starting meanwhile can take
        # one. An agent that exits while the fleet starts is started again once (its engine picks a
        # new port); so is a frontend whose port was taken, on a new port.
        nonlocal frontend_restarted
        for wid, agent in list(agents.items()):
            if agent.proc.poll() is not None and wid not in respawned:  # type: ignore[attr-defined]
                respawned.add(wid)
                (log_dir / "retry").mkdir(exist_ok=True)
                agents[wid] = procs.spawn(log_dir / "retry", spec, workers[wid], nats.url, etcd.url, wid)
        if fleet.frontend.poll() is not None:
            log = (log_dir / "frontend.log").read_text(errors="replace")
            if "address already in use" not in log or frontend_restarted:
                pytest.fail(f"the frontend exited ({fleet.frontend.returncode}):\n{log[-3000:]}")
            frontend_restarted = True
            (log_dir / "frontend.log").rename(log_dir / "frontend.port-taken.log")
            fleet.url, fleet.frontend = _spawn_frontend(log_dir / "frontend.log", spec, nats.url, etcd.url)
        seen[0] = fleet.health()
        models = seen[0].get("models", {})
        return all(models.get(m, {}).get(role) == n for m, roles in wait_for.items() for role, n in roles.items())

    try:
        eventually(ready, timeout=60, what=f"workers {wait_for} in the frontend's view")
    except AssertionError as e:
        tails = "".join(f"\n--- {p.relative_to(log_dir)} (while waiting):\n{p.read_text(errors='replace')[-1500:]}"
                        for p in sorted(log_dir.rglob("*.log")))
        stop_fleet(fleet, procs)
        raise AssertionError(f"{e}\nthe frontend's last /health: {seen[0]}{tails}") from e
    except BaseException:
        stop_fleet(fleet, procs)
        raise
    return fleet


def _spawn_frontend(log: Path, spec: Path, nats_url: str, etcd_url: str) -> tuple[str, subprocess.Popen]:
    port = free_port()
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "dynamo_lite.frontend", "-f", str(spec), "--nats-url", nats_url,
                                 "--etcd-url", etcd_url, "--port", str(port)], stdout=out, stderr=subprocess.STDOUT)
    return f"http://127.0.0.1:{port}", proc


def start_frontend(fleet: Fleet, name: str, spec: Path | None = None) -> tuple[str, subprocess.Popen]:
    """One more frontend process on the fleet's NATS and etcd, with the fleet's spec (or `spec`):
    its URL and process (logs in `<name>.log`); the caller stops it."""
    nats, etcd = fleet.servers
    return _spawn_frontend(fleet.log_dir / f"{name}.log", spec or fleet.log_dir.parent / "cluster.yaml",
                           nats.url, etcd.url)


def wait_frontend(url: str, proc: subprocess.Popen, log: Path, model: str, role: str, workers: int,
                  timeout: float) -> None:
    """Wait until a frontend started by `start_frontend` serves and sees `workers` of `role` for `model`."""
    def serving() -> bool:
        assert proc.poll() is None, log.read_text()[-3000:]
        try:
            urllib.request.urlopen(f"{url}/health", timeout=2)
        except OSError as e:
            raise AssertionError(f"not serving: {e}") from e
        return metric(url, "dynamo_lite_frontend_workers", model=model, role=role) == workers

    eventually(serving, timeout=timeout, what=f"the frontend at {url} serving with {workers} {role} workers")


def stop_frontend(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()


def stop_fleet(fleet: Fleet, procs: SimpleNamespace) -> None:
    fleet.frontend.terminate()
    try:
        fleet.frontend.wait(30)
    except subprocess.TimeoutExpired:
        fleet.frontend.kill()
    procs.stop(list(fleet.agents.values()))
    for server in fleet.servers:
        asyncio.run(server.stop())
