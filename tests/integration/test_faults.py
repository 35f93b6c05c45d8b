"""Faults under traffic: each real process killed, stopped or restarted while the official
`openai` client sends streaming requests at a steady rate.

One fleet for the module: NATS and etcd (owned by the test, so it can restart them), a
frontend process, 2 prefill and 2 decode mock workers (agent + engine each). Prompts are
long enough to be prefilled remotely, so every fault hits requests in every stage: queued,
prefilling, streaming. Every accepted request must end completed (finish_reason "length",
all tokens, usage) or with a clean error (an HTTP error status or an SSE error event from
the frontend, or a refused/reset connection while the frontend itself is down); none may
hang past its timeout or end malformed ("lost"). Each test prints its row; with
FAULTS_REPORT=path the rows are also written there as JSON (docs/operations/faults.md shows them).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest

from dynamo_lite.infra import EmbeddedEtcd, EmbeddedNats, free_port
from dynamo_lite.protocol import WorkerRecord
from dynamo_lite.queue import QueueSettings
from tests.integration.fleet import Fleet, metric
from tests.integration.queue_probe import redeliveries, unacked_jobs
from tests.integration.traffic import Traffic, summarize, write_report
from tests.waiting import eventually

pytestmark = [pytest.mark.integration, pytest.mark.slow]
NS = "faults"
RATE = 6.0  # requests per second
MOCK = "mock: {speedup_ratio: 1, seed: 1}"
POOLS = (f"  - {{name: prefill, role: prefill, engine: mock, model: m, {MOCK}}}\n"
         f"  - {{name: decode, role: decode, engine: mock, model: m, {MOCK}}}\n")
FRONTEND = ("{upstream_timeout_s: 3, max_migrations: 3, "
            "disaggregation: {max_local_prefill_tokens: 64, prefill_timeout_s: 8}}")
LEASE_TTL_S = 3
ROWS: list[dict] = []


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

    def start_frontend(self, index: int | None = None, metrics_port: int | None = None) -> subprocess.Popen:
        """The frontend on the fleet's port; with `index`, one of several there (SO_REUSEPORT), serving its
        own /metrics and /health on `metrics_port`. Without, it becomes `fleet.frontend`."""
        argv = [sys.executable, "-m", "dynamo_lite.frontend", "-f", str(self.spec), "--nats-url", self.nats.url,
                "--etcd-url", self.etcd.url, "--port", str(self.frontend_port)]
        if index is not None:
            argv += ["--reuse-port", "--process-index", str(index), "--metrics-port", str(metrics_port)]
        name = "frontend.log" if index is None else f"frontend-{index}.log"
        with open(self.fleet.log_dir / name, "ab") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        if index is None:
            self.fleet.frontend = proc
        return proc

    def records(self) -> dict[str, WorkerRecord]:
        return self.fleet.records()

    def workers(self) -> dict[str, int]:
        return self.fleet.health().get("models", {}).get("m", {})

    def wait_workers(self, prefill: int, decode: int, timeout_s: float = 60) -> None:
        eventually(lambda: (self.workers().get("prefill"), self.workers().get("decode")) == (prefill, decode),
                   timeout=timeout_s, what=f"{prefill} prefill + {decode} decode workers in the frontend's view")

    def kill_worker(self, worker_id: str, engine_pid: int | None = None) -> None:
        """SIGKILL the agent and its engine (a machine gone), and forget it."""
        engine_pid = engine_pid or self.records()[worker_id].pid
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
    fleet = Fleet(f"http://127.0.0.1:{port}", etcd.url, {}, None, log_dir, [], NS)  # type: ignore[arg-type]
    f = FaultFleet(fleet, spec, nats, etcd, agent_processes, port)
    try:
        f.start_frontend()
        for wid, pool in (("p0", "prefill"), ("p1", "prefill"), ("d0", "decode"), ("d1", "decode")):
            f.spawn(pool, wid)
        f.wait_workers(2, 2)
        yield f
    finally:
        write_report(ROWS)
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


def under_traffic(ff: FaultFleet, name: str, fault: Callable[[], str | tuple[str, float]], after_s: float = 6.0,
                  frontends: list[str] | None = None, traffic: Traffic | None = None) -> Row:
    """Traffic for 3 s, then `fault()`, then traffic for `after_s`; the outcomes as a Row. `fault` returns a
    note, or a note and the moment the fault took effect (default: when `fault` was called). The frontend's
    counters are read from `frontends` (each process's own /metrics; default: the fleet's URL)."""
    def counters() -> list[float]:
        return [value for url in frontends or [ff.fleet.url] for value in (
            metric(url, "dynamo_lite_frontend_migrations_total"),
            metric(url, "dynamo_lite_frontend_disaggregation_decisions_total", reason="prefill_failed"))]

    traffic = traffic or Traffic(ff.fleet.url, RATE)
    traffic.start()
    try:
        time.sleep(3)  # the traffic's pace: requests in every stage when the fault hits
        before = counters()
        t_fault = time.monotonic()
        struck = fault()
        note, t_fault = struck if isinstance(struck, tuple) else (struck, t_fault)
        time.sleep(after_s)  # likewise: traffic through the fault's aftermath
    finally:
        traffic.stop()
    # The frontend's own counters (a restarted frontend starts from 0), once every request has ended:
    # a remote prefill held by a dead worker falls back only after prefill_timeout_s.
    deltas = [int(a - b) if a >= b else int(a) for a, b in zip(counters(), before, strict=True)]
    migrated, local = sum(deltas[0::2]), sum(deltas[1::2])
    t = summarize(traffic.outcomes, t_fault)
    row = Row(name, t.sent, t.completed, t.errored, t.lost, t.recovery_s, migrated, local, t.errors, note)
    ROWS.append(asdict(row))
    print(f"\n{row}")
    return row


def test_decode_worker_killed_mid_stream(ff: FaultFleet) -> None:
    """d0 is killed while its engine runs at least 2 requests: at 6 requests/s over 2 decode workers, each
    stream lasting ~0.5 s, it holds none at a given instant often enough that killing it blindly is a coin
    toss (a CI run on a loaded machine found it holding none)."""
    def kill_while_streaming() -> str:
        engine_url = ff.records()["d0"].engine_url

        def running() -> int:
            n = int(metric(engine_url, "vllm:num_requests_running"))
            return n if n >= 2 else 0

        held = eventually(running, timeout=10, interval=0.02, what="d0's engine running 2 requests or more")
        ff.kill_worker("d0")
        return f"killed with {held} requests running on its engine"

    row = under_traffic(ff, "decode worker SIGKILL", kill_while_streaming)
    ff.spawn("decode", "d2")  # first: the fleet is whole again for the tests after this one, whatever this finds
    ff.wait_workers(2, 2)
    assert row.lost == 0 and row.errored == 0, row  # streams on d0 migrate to d1
    assert row.migrated >= 1, row


def queued_jobs(ff: FaultFleet, older_than_s: float = 0.0) -> list[int]:
    return unacked_jobs(ff.nats.url, NS, older_than_s)


def test_prefill_worker_killed_mid_job(ff: FaultFleet) -> None:
    """p0 dies holding prefill jobs: its engine is stopped (SIGSTOP) first, so the jobs p0 takes stay in
    its hands, and p0 (agent and engine) is SIGKILLed once the queue holds a job unacked for over 1 s
    (p1 does one in ~30 ms). The frontend gives up on such a job after prefill_timeout_s (8 s) and
    prefills locally; JetStream redelivers it to p1 (or p2, started after the kill) after ack_wait (10 s),
    past its deadline, so that worker drops it. Both are checked: the frontend's prefill_failed
    fallbacks, and the consumer's deliveries."""
    stale: list[int] = []  # jobs p0 held for over 1 s
    unacked: list[int] = []  # every job not acked at the kill: p0's, and any p1 was just doing
    redelivered_before = redeliveries(ff.nats.url, NS, "m")

    def kill_holding_jobs() -> str:
        engine_pid = ff.records()["p0"].pid
        assert engine_pid
        os.kill(engine_pid, signal.SIGSTOP)
        stale.extend(eventually(lambda: queued_jobs(ff, older_than_s=1.0), timeout=10,
                                what="a prefill job held by p0 (its engine stopped) for over 1 s"))
        ff.kill_worker("p0", engine_pid)
        unacked.extend(queued_jobs(ff))
        return ""

    row = under_traffic(ff, "prefill worker SIGKILL", kill_holding_jobs)
    ff.spawn("prefill", "p2")  # the fleet whole again for the tests after this one, whatever this finds
    assert row.lost == 0 and row.errored == 0, row  # its jobs are redelivered to p1 or p2 (or prefilled locally)
    eventually(lambda: not set(unacked) & set(queued_jobs(ff)), timeout=QueueSettings().ack_wait_s + 5,
               what=f"the jobs unacked at the kill ({unacked}) redelivered and done with")
    redelivered = redeliveries(ff.nats.url, NS, "m") - redelivered_before
    ROWS[-1]["note"] = (f"its engine SIGSTOPped until p0 held a job; {redelivered} job(s) it held redelivered "
                        f"to p1 or p2, {row.local_prefills} prefilled locally")
    print(ROWS[-1]["note"])
    assert set(stale) <= set(unacked) and stale, (stale, unacked)
    assert redelivered >= len(stale), "every job p0 held was handed to the surviving prefill worker"
    assert row.local_prefills >= len(stale), "and the frontend prefilled each on the decode worker meanwhile"
    ff.wait_workers(2, 2)


def test_nats_restarted(ff: FaultFleet) -> None:
    def restart() -> str:
        ff.nats.process.kill()
        time.sleep(1)  # the downtime is the fault
        asyncio.run(ff.nats.start())
        return "SIGKILL, 1 s down, same port and JetStream store"

    row = under_traffic(ff, "NATS restart", restart, after_s=10)
    assert row.lost == 0, row
    assert row.recovery_s < 10, row
    ff.wait_workers(2, 2)


def test_etcd_restarted(ff: FaultFleet) -> None:
    def restart() -> str:
        ff.etcd.process.kill()
        time.sleep(1)  # the downtime is the fault
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
        eventually(lambda: ff.workers().get("decode") == 1, timeout=3 * LEASE_TTL_S,
                   what="the frozen worker out of discovery")
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
        eventually(lambda: ff.workers() == {"prefill": 2, "decode": 2, "aggregated": 0}, timeout=60,
                   what="all 4 workers in the new frontend's view")
        return ""

    before = {w: r.pid for w, r in ff.records().items()}
    row = under_traffic(ff, "frontend SIGKILL + restart", restart)
    # Requests on the killed frontend and those sent while it was down fail on the client's side
    # (connection reset or refused: nothing to retry on our side); none may hang.
    assert row.lost == 0, row
    assert set(row.errors) <= {"error:APIConnectionError"}, row
    assert {w: r.pid for w, r in ff.records().items()} == before  # workers unaffected


def test_one_of_two_frontend_processes_killed(ff: FaultFleet) -> None:
    """Two frontend processes on the fleet's port (SO_REUSEPORT, as `frontend.processes: 2` runs them); the
    traffic opens a new connection per request, so the kernel places each on a live process. Process 1 is
    SIGKILLed while it holds streams, and restarted at once (orchestrator up does the same after its
    backoff: tests/e2e/test_frontend_processes.py). Requests sent after it is gone must all complete; the
    streams it held are cut, and counted: each ends in a connection error, none hangs."""
    own = [free_port(), free_port()]
    urls = [f"http://127.0.0.1:{p}" for p in own]
    ff.fleet.frontend.terminate()  # the fixture's single frontend makes way for the two
    ff.fleet.frontend.wait(30)
    procs = [ff.start_frontend(i, own[i]) for i in range(2)]
    held: dict[str, float] = {}

    def ready(i: int) -> bool:
        try:
            body = json.loads(urllib.request.urlopen(f"{urls[i]}/health", timeout=2).read())
        except (OSError, ValueError):
            assert procs[i].poll() is None, (ff.fleet.log_dir / f"frontend-{i}.log").read_text()[-3000:]
            return False
        return (body["models"]["m"]["prefill"], body["models"]["m"]["decode"]) == (2, 2)

    def kill_one() -> tuple[str, float]:
        held["in_flight"] = eventually(
            lambda: metric(urls[1], "dynamo_lite_frontend_requests_in_flight") or None, timeout=10,
            what="process 1 holding streams")
        procs[1].kill()
        procs[1].wait()  # gone: its listening socket has left the port's group
        gone = held["gone"] = time.monotonic()
        procs[1] = ff.start_frontend(1, own[1])
        eventually(lambda: ready(1), timeout=60, what="process 1 back, with every worker in its view")
        held["back_s"] = time.monotonic() - gone
        return "", gone

    try:
        for i in range(2):
            eventually(lambda i=i: ready(i), timeout=60, what=f"frontend process {i} serving")
        traffic = Traffic(ff.fleet.url, RATE, fresh_connections=True)
        row = under_traffic(ff, "one of 2 frontend processes SIGKILL", kill_one, frontends=urls, traffic=traffic)
        t_kill = held["gone"]
        after = [o for o in traffic.outcomes if o.sent >= t_kill]
        cut = [o for o in traffic.outcomes if o.sent < t_kill and o.status != "completed"]
        ROWS[-1]["note"] = (
            f"2 processes on one port (SO_REUSEPORT), a new connection per request: {len(cut)} stream(s) held by "
            f"the killed process cut (its in-flight gauge read {held['in_flight']:.0f} just before the kill), "
            f"0 errors among the {len(after)} sent after it; restarted at once, it served again "
            f"{held['back_s']:.1f} s later")
        print(ROWS[-1]["note"])
        assert after and all(o.status == "completed" for o in after), [o.status for o in after]
        assert row.lost == 0 and row.errored == len(cut) >= 1, row
        assert set(row.errors) == {"error:APIConnectionError"}, row
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(30)
        ff.start_frontend()
        ff.wait_workers(2, 2)
