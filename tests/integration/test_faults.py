"""Faults under traffic: each real process killed, stopped or restarted while the official
`openai` client sends streaming requests at a steady rate.

One fleet for the module: NATS and etcd (owned by the test, so it can restart them), a
frontend process, 2 prefill and 2 decode mock workers (agent + engine each). Prompts are
long enough to be prefilled remotely, so every fault hits requests in every stage: queued,
prefilling, streaming. Every accepted request must end completed (finish_reason "length",
all tokens, usage) or with a clean error (an HTTP error status or an SSE error event from
the frontend, or a refused/reset connection while the frontend itself is down); none may
hang past its timeout or end malformed ("lost"). Each test prints its row; with
FAULTS_REPORT=path the rows are also written there as JSON (the README table comes from it).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import SimpleNamespace

import openai
import pytest

from dynamo_lite.discovery import WorkerWatcher, etcd_client
from dynamo_lite.infra import EmbeddedEtcd, EmbeddedNats, free_port
from dynamo_lite.protocol import WorkerRecord
from tests.integration.test_frontend import Fleet, metric, tiny_model, wait_until  # noqa: F401 - fixture

pytestmark = [pytest.mark.integration, pytest.mark.slow]
NS = "faults"
RATE = 6.0  # requests per second
MAX_TOKENS = 80
TIMEOUT_S = 30.0  # a request not finished by then is lost
MOCK = "mock: {speedup_ratio: 1, seed: 1}"
POOLS = (f"  - {{name: prefill, role: prefill, engine: mock, model: m, {MOCK}}}\n"
         f"  - {{name: decode, role: decode, engine: mock, model: m, {MOCK}}}\n")
FRONTEND = ("{upstream_timeout_s: 3, max_migrations: 3, "
            "disaggregation: {max_local_prefill_tokens: 64, prefill_timeout_s: 8}}")
LEASE_TTL_S = 3
ROWS: list[dict] = []


@dataclass
class Outcome:
    sent: float
    ended: float | None = None
    status: str = "pending"  # completed | error:<what> | lost:<why>


@dataclass
class Traffic:
    """Sends streaming completions at `rate` per second from a thread of its own until stopped."""

    url: str
    rate: float
    outcomes: list[Outcome] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(TIMEOUT_S + 15)
        assert not self._thread.is_alive(), "the traffic thread did not finish"

    async def _run(self) -> None:
        client = openai.AsyncOpenAI(base_url=f"{self.url}/v1", api_key="none", max_retries=0, timeout=TIMEOUT_S)
        rng = random.Random(7)
        tasks: list[asyncio.Task] = []
        start = time.monotonic()
        while not self._stop.is_set():
            prompt = [rng.randrange(1, 500) for _ in range(rng.randrange(120, 260))]
            outcome = Outcome(time.monotonic())
            self.outcomes.append(outcome)
            tasks.append(asyncio.create_task(self._one(client, prompt, outcome)))
            next_at = start + len(self.outcomes) / self.rate
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        await asyncio.gather(*tasks)
        await client.close()

    async def _one(self, client: openai.AsyncOpenAI, prompt: list[int], outcome: Outcome) -> None:
        try:
            async with asyncio.timeout(TIMEOUT_S + 5):
                stream = await client.completions.create(model="m", prompt=prompt, max_tokens=MAX_TOKENS, stream=True,
                                                         stream_options={"include_usage": True})
                finish, usage = None, None
                async for chunk in stream:
                    if chunk.choices and chunk.choices[0].finish_reason:
                        finish = chunk.choices[0].finish_reason
                    usage = chunk.usage or usage
            if finish == "length" and usage is not None and usage.completion_tokens == MAX_TOKENS:
                outcome.status = "completed"
            else:
                outcome.status = f"lost:malformed (finish {finish}, usage {usage})"
        except TimeoutError:
            outcome.status = "lost:timeout"
        except openai.APIStatusError as e:
            outcome.status = f"error:{e.status_code}"
        except openai.APIError as e:  # an SSE error event, or a refused/reset connection
            outcome.status = f"error:{type(e).__name__}"
        outcome.ended = time.monotonic()


@dataclass
class FaultFleet:
    fleet: Fleet
    spec: Path
    nats: EmbeddedNats
    etcd: EmbeddedEtcd
    procs: SimpleNamespace
    frontend_port: int

    def spawn(self, pool: str, worker_id: str) -> None:
        self.fleet.agents[worker_id] = self.procs.spawn(self.fleet.log_dir, self.spec, pool, self.nats.url,
                                                        self.etcd.url, worker_id)

    def start_frontend(self) -> None:
        with open(self.fleet.log_dir / "frontend.log", "ab") as out:
            self.fleet.frontend = subprocess.Popen(
                [sys.executable, "-m", "dynamo_lite.frontend", "-f", str(self.spec), "--nats-url", self.nats.url,
                 "--etcd-url", self.etcd.url, "--port", str(self.frontend_port)], stdout=out, stderr=subprocess.STDOUT)

    def records(self) -> dict[str, WorkerRecord]:
        async def read() -> dict[str, WorkerRecord]:
            async with etcd_client(self.etcd.url) as c:
                w = WorkerWatcher(c, NS)
                await w.start()
                await w.stop()
                return dict(w.workers)

        return asyncio.run(read())

    def workers(self) -> dict[str, int]:
        return self.fleet.health().get("models", {}).get("m", {})

    def wait_workers(self, prefill: int, decode: int, timeout_s: float = 60) -> None:
        wait_until(lambda: (self.workers().get("prefill"), self.workers().get("decode")) == (prefill, decode),
                   timeout_s, f"{prefill} prefill + {decode} decode workers in the frontend's view")

    def kill_worker(self, worker_id: str) -> None:
        """SIGKILL the agent and its engine (a machine gone), and forget it."""
        engine_pid = self.records()[worker_id].pid
        agent = self.fleet.agents.pop(worker_id)
        os.kill(agent.proc.pid, signal.SIGKILL)  # type: ignore[attr-defined]
        os.kill(engine_pid, signal.SIGKILL)
        agent.proc.wait()  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def ff(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path,
       agent_processes: SimpleNamespace) -> Iterator[FaultFleet]:  # noqa: F811 - tiny_model is a fixture
    tmp = tmp_path_factory.mktemp("faults")
    nats, etcd = EmbeddedNats(tmp / "nats"), EmbeddedEtcd(tmp / "etcd")
    asyncio.run(nats.start())
    asyncio.run(etcd.start())
    spec = tmp / "cluster.yaml"
    spec.write_text(f"namespace: {NS}\nstate_dir: {tmp / 'state'}\netcd: {{lease_ttl_s: {LEASE_TTL_S}}}\n"
                    f"models:\n  - {{name: m, path: '{tiny_model}', block_size: 16, max_model_len: 2048}}\n"
                    f"frontend: {FRONTEND}\npools:\n{POOLS}")
    log_dir = tmp / "logs"
    log_dir.mkdir()
    port = free_port()
    fleet = Fleet(f"http://127.0.0.1:{port}", etcd.url, {}, None, log_dir, [])  # type: ignore[arg-type]
    f = FaultFleet(fleet, spec, nats, etcd, agent_processes, port)
    try:
        f.start_frontend()
        for wid, pool in (("p0", "prefill"), ("p1", "prefill"), ("d0", "decode"), ("d1", "decode")):
            f.spawn(pool, wid)
        f.wait_workers(2, 2)
        yield f
    finally:
        report = os.environ.get("FAULTS_REPORT")
        if report and ROWS:
            Path(report).write_text(json.dumps(ROWS, indent=2))
        if fleet.frontend is not None:
            fleet.frontend.terminate()
            fleet.frontend.wait(30)
        agent_processes.stop(list(fleet.agents.values()))
        asyncio.run(nats.stop())
        asyncio.run(etcd.stop())


@dataclass
class Row:
    fault: str
    sent: int
    completed: int
    errored: int
    lost: int
    recovery_s: float
    migrated: int  # requests the frontend moved to another worker (it died or stopped answering)
    local_prefills: int  # remote prefills that failed or timed out and ran on the decode worker instead
    errors: dict[str, int]
    note: str = ""


def under_traffic(ff: FaultFleet, name: str, fault: Callable[[], str], after_s: float = 6.0) -> Row:
    """Traffic for 3 s, then `fault()` (returns a note), then traffic for `after_s`; the outcomes as a Row."""
    def counters() -> tuple[float, float]:
        url = ff.fleet.url
        return (metric(url, "dynamo_lite_frontend_migrations_total"),
                metric(url, "dynamo_lite_frontend_disaggregation_decisions_total", reason="prefill_failed"))

    traffic = Traffic(ff.fleet.url, RATE)
    traffic.start()
    try:
        time.sleep(3)
        before = counters()
        t_fault = time.monotonic()
        note = fault()
        time.sleep(after_s)
        after_counters = counters()  # the frontend's own (a restarted frontend starts from 0)
    finally:
        traffic.stop()
    migrated, local = (int(a - b) if a >= b else int(a) for a, b in zip(after_counters, before, strict=True))
    outcomes = traffic.outcomes
    errors: dict[str, int] = {}
    for o in outcomes:
        if o.status != "completed":
            errors[o.status] = errors.get(o.status, 0) + 1
    # Recovered from the first request sent after the fault from which on every request completed.
    after = [o for o in outcomes if o.sent >= t_fault]
    recovered_at = next((o.sent for i, o in enumerate(after) if all(x.status == "completed" for x in after[i:])),
                        None)
    row = Row(name, len(outcomes), sum(o.status == "completed" for o in outcomes),
              sum(o.status.startswith("error") for o in outcomes), sum(o.status.startswith("lost") for o in outcomes),
              round(recovered_at - t_fault, 2) if recovered_at is not None else float("inf"), migrated, local, errors,
              note)
    ROWS.append(asdict(row))
    print(f"\n{row}")
    return row


def test_decode_worker_killed_mid_stream(ff: FaultFleet) -> None:
    row = under_traffic(ff, "decode worker SIGKILL", lambda: ff.kill_worker("d0") or "")
    assert row.lost == 0 and row.errored == 0, row  # streams on d0 migrate to d1
    assert row.migrated >= 1, row
    ff.spawn("decode", "d2")
    ff.wait_workers(2, 2)


def test_prefill_worker_killed_mid_job(ff: FaultFleet) -> None:
    row = under_traffic(ff, "prefill worker SIGKILL", lambda: ff.kill_worker("p0") or "")
    assert row.lost == 0 and row.errored == 0, row  # its jobs are redelivered to p1 (or prefilled locally)
    ff.spawn("prefill", "p2")
    ff.wait_workers(2, 2)


def test_nats_restarted(ff: FaultFleet) -> None:
    def restart() -> str:
        ff.nats.process.kill()
        time.sleep(1)
        asyncio.run(ff.nats.start())
        return "SIGKILL, 1 s down, same port and JetStream store"

    row = under_traffic(ff, "NATS restart", restart, after_s=10)
    assert row.lost == 0, row
    assert row.recovery_s < 10, row
    ff.wait_workers(2, 2)


def test_etcd_restarted(ff: FaultFleet) -> None:
    def restart() -> str:
        ff.etcd.process.kill()
        time.sleep(1)
        asyncio.run(ff.etcd.start())
        return "SIGKILL, 1 s down, same data dir"

    row = under_traffic(ff, "etcd restart", restart, after_s=8)
    assert row.lost == 0 and row.errored == 0, row  # routing continues from the frontend's last view
    ff.wait_workers(2, 2)


def test_worker_frozen_with_sigstop_leaves_routing_and_rejoins(ff: FaultFleet) -> None:
    records = ff.records()
    victim = next(w for w in records if records[w].role.value == "decode")
    pids = [ff.fleet.agents[victim].proc.pid, records[victim].pid]  # type: ignore[attr-defined]
    times: dict[str, float] = {}

    def freeze() -> str:
        started = time.monotonic()
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        wait_until(lambda: ff.workers().get("decode") == 1, 3 * LEASE_TTL_S, "the frozen worker out of discovery")
        times["out"] = time.monotonic() - started
        return ""

    row = under_traffic(ff, "decode worker SIGSTOP", freeze, after_s=5)
    resumed = time.monotonic()
    for pid in pids:
        os.kill(pid, signal.SIGCONT)
    ff.wait_workers(2, 2, timeout_s=30)
    times["back"] = time.monotonic() - resumed
    ROWS[-1]["note"] = f"out of routing after {times['out']:.1f} s (lease TTL {LEASE_TTL_S} s); " \
                       f"back {times['back']:.1f} s after SIGCONT"
    print(ROWS[-1]["note"])
    assert row.lost == 0 and row.errored == 0, row  # requests stuck on it time out upstream and migrate
    assert times["out"] <= 2 * LEASE_TTL_S + 1


def test_frontend_restarted(ff: FaultFleet) -> None:
    def restart() -> str:
        ff.fleet.frontend.send_signal(signal.SIGKILL)
        ff.fleet.frontend.wait()
        ff.start_frontend()
        wait_until(lambda: ff.workers() == {"prefill": 2, "decode": 2, "aggregated": 0}, 60, "the new frontend")
        return ""

    before = {w: r.pid for w, r in ff.records().items()}
    row = under_traffic(ff, "frontend SIGKILL + restart", restart)
    # Requests on the killed frontend and those sent while it was down fail on the client's side
    # (connection reset or refused: nothing to retry on our side); none may hang.
    assert row.lost == 0, row
    assert set(row.errors) <= {"error:APIConnectionError"}, row
    assert {w: r.pid for w, r in ff.records().items()} == before  # workers unaffected
