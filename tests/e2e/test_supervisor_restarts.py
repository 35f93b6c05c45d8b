"""`orchestrator up` keeps the cluster as declared, under the fault suite's traffic.

One `up` for the module (embedded NATS and etcd, a frontend, 2 prefill + 2 decode mock workers).
Each test kills a part with SIGKILL and does nothing else: the supervisor must bring it back by
itself, with no request lost. Then: a scale-up after an etcd restart registers and serves, a
scale-down and `down` restart nothing, and a worker that cannot start is given up after the
crash-loop limit, named in `status` with its log tail, without a busy loop. With
FAULTS_REPORT=path the rows go there as JSON (beside the fault suite's).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass

import psutil
import pytest

from dynamo_lite.credentials import NatsCredentials
from dynamo_lite.infra import free_port
from dynamo_lite.orchestrator.state import PartRecord
from dynamo_lite.queue import QueueSettings
from tests.e2e.running import Running, orchestrator_up
from tests.integration.fleet import metric
from tests.integration.queue_probe import redeliveries, unacked_jobs
from tests.integration.traffic import Traffic, summarize, write_report
from tests.waiting import eventually

pytestmark = [pytest.mark.integration, pytest.mark.slow]
RATE = 6.0
MOCK = "mock: {speedup_ratio: 1, seed: 1}"
ROWS: list[dict] = []


class Cluster(Running):
    def admin(self, path: str, body: dict | None = None) -> dict:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"{self.state().admin_url}{path}", data=data,
                                         headers={"Content-Type": "application/json"})
        return json.loads(urllib.request.urlopen(request, timeout=120).read())

    def workers(self, role: str) -> list[dict]:
        """Registered workers of a role (etcd, through the admin API)."""
        return [w for w in self.admin("/status")["workers"] if w["role"] == role]

    def routable(self) -> dict[str, int]:
        """Workers per role in the frontend's own view."""
        body = json.loads(urllib.request.urlopen(f"{self.url}/health", timeout=5).read())
        return body.get("models", {}).get("m", {})

    def part(self, name: str) -> PartRecord:
        return next(p for p in self.state().parts if p.part == name)

    def pid(self, process: str) -> int:
        return next(p.pid for p in self.state().processes if p.name == process)

    def restarts(self, part: str) -> float:
        return metric(self.state().admin_url or "", "dynamo_lite_supervisor_restarts_total", part=part)

    def kill_worker(self, role: str, victim: dict | None = None) -> str:
        """SIGKILL a worker's agent and engine (a machine gone); its id."""
        victim = victim or self.workers(role)[0]
        os.kill(self.pid(f"worker {victim['worker_id']}"), signal.SIGKILL)
        os.kill(victim["pid"], signal.SIGKILL)
        return victim["worker_id"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("supervisor")
    port = free_port()
    spec = (
        f"namespace: sup\nstate_dir: {tmp / 'state'}\netcd: {{lease_ttl_s: 3}}\n"
        "models: [{name: m, path: 'builtin:tiny', block_size: 16, max_model_len: 2048}]\n"
        f"frontend: {{port: {port}, upstream_timeout_s: 3, max_migrations: 3, "
        "disaggregation: {max_local_prefill_tokens: 64, prefill_timeout_s: 8}}\n"
        "pools:\n"
        f"  - {{name: prefill, role: prefill, engine: mock, replicas: 2, {MOCK}}}\n"
        f"  - {{name: decode, role: decode, engine: mock, replicas: 2, {MOCK}}}\n"
        "supervisor: {restart_backoff_s: 0.5, restart_backoff_max_s: 2, restart_limit: 3, restart_window_s: 120}\n"
    )
    try:
        with orchestrator_up(tmp, port, spec, Cluster) as c:
            eventually(lambda: c.routable() == {"prefill": 2, "decode": 2, "aggregated": 0}, timeout=30,
                       what="2 + 2 workers routable")
            yield c
    finally:
        write_report(ROWS, suffix="_supervisor")


@dataclass
class Row:
    fault: str
    sent: int
    completed: int
    errored: int
    lost: int
    restored_s: float  # from the kill until the part is back as declared (see each test)
    errors: dict[str, int]
    note: str = ""


def under_traffic(c: Cluster, name: str, fault: Callable[[], None], restored: Callable[[], bool],
                  note: str = "") -> Row:
    """Traffic for 3 s, `fault()`, traffic until `restored()` holds (at most 60 s), then 4 s more."""
    traffic = Traffic(c.url, RATE)
    traffic.start()
    try:
        time.sleep(3)  # the traffic's pace: requests in every stage when the fault hits
        t_fault = time.monotonic()
        fault()
        eventually(restored, timeout=60, interval=0.2, what=f"{name}: restored by the supervisor")
        restored_s = time.monotonic() - t_fault
        time.sleep(4)  # traffic through the aftermath, on the restored cluster
    finally:
        traffic.stop()
    s = summarize(traffic.outcomes, t_fault)
    row = Row(name, s.sent, s.completed, s.errored, s.lost, round(restored_s, 2), s.errors, note)
    ROWS.append(asdict(row))
    print(f"\n{row}")
    return row


def test_a_killed_decode_worker_is_replaced(cluster: Cluster) -> None:
    before = {w["worker_id"] for w in cluster.workers("decode")}
    killed: list[str] = []

    def replaced() -> bool:
        now = {w["worker_id"] for w in cluster.workers("decode")}
        return len(now) == 2 and not now & set(killed) and cluster.routable().get("decode") == 2

    row = under_traffic(cluster, "decode worker SIGKILL (not restarted by the test)",
                        lambda: killed.append(cluster.kill_worker("decode")), replaced)
    assert row.lost == 0 and row.errored == 0, row  # its streams migrate to the other decode worker
    new = {w["worker_id"] for w in cluster.workers("decode")} - before
    assert len(new) == 1, "the replacement registers under a new worker id"
    assert cluster.restarts("pool decode") == 1
    assert cluster.part("pool decode").state == "running"
    # No stale routing: the dead worker gets nothing more, its replacement gets its share.
    routed = lambda w: metric(cluster.url, "dynamo_lite_frontend_routing_decisions_total", worker=w)  # noqa: E731
    dead_before = routed(killed[0])
    traffic = Traffic(cluster.url, RATE, seed=10)
    traffic.start()
    time.sleep(3)
    traffic.stop()
    assert routed(killed[0]) == dead_before
    assert routed(new.pop()) > 0


def test_a_killed_prefill_worker_is_replaced_and_its_jobs_redelivered(cluster: Cluster) -> None:
    """The victim's engine is stopped (SIGSTOP) first, so the jobs it takes stay in its hands; it is
    killed once the queue holds a job unacked for over 1 s (a live worker does one in ~30 ms)."""
    creds = NatsCredentials(token=cluster.state().nats_token)
    nats = cluster.state().nats_url
    redelivered_before = redeliveries(nats, "sup", "m", creds)
    killed: list[str] = []
    held: list[int] = []  # jobs the victim held for over 1 s
    unacked: list[int] = []  # every job not acked at the kill

    def kill_holding_jobs() -> None:
        victim = cluster.workers("prefill")[0]
        os.kill(victim["pid"], signal.SIGSTOP)
        held.extend(eventually(lambda: unacked_jobs(nats, "sup", 1.0, creds), timeout=10,
                               what="a prefill job held by the stopped worker for over 1 s"))
        killed.append(cluster.kill_worker("prefill", victim))
        unacked.extend(unacked_jobs(nats, "sup", 0.0, creds))

    def replaced() -> bool:
        now = {w["worker_id"] for w in cluster.workers("prefill")}
        return len(now) == 2 and not now & set(killed) and cluster.routable().get("prefill") == 2

    row = under_traffic(cluster, "prefill worker SIGKILL (not restarted by the test)", kill_holding_jobs, replaced)
    assert row.lost == 0 and row.errored == 0, row  # the frontend prefills a held job locally meanwhile
    assert cluster.restarts("pool prefill") == 1
    eventually(lambda: not set(unacked) & set(unacked_jobs(nats, "sup", 0.0, creds)),
               timeout=QueueSettings().ack_wait_s + 5, what=f"the jobs unacked at the kill ({unacked}) redelivered")
    redelivered = redeliveries(nats, "sup", "m", creds) - redelivered_before
    ROWS[-1]["note"] = f"engine SIGSTOPped until it held a job; {redelivered} job(s) redelivered"
    assert held and redelivered >= len(held), (held, redelivered)


def test_a_killed_nats_server_comes_back_and_remote_prefill_resumes(cluster: Cluster) -> None:
    old = cluster.pid("nats-server")

    def back() -> bool:
        return cluster.restarts("nats-server") == 1 and cluster.pid("nats-server") != old

    remote = lambda: metric(cluster.url, "dynamo_lite_frontend_disaggregation_decisions_total",  # noqa: E731
                            reason="remote")
    batches = lambda: metric(cluster.url, "dynamo_lite_frontend_kv_event_batches_total")  # noqa: E731
    row = under_traffic(cluster, "nats-server SIGKILL (not restarted by the test)",
                        lambda: os.kill(old, signal.SIGKILL), back, note="same port and JetStream store")
    assert row.lost == 0, row
    # After it: jobs go through the queue again and KV events reach the frontend again
    # (new prompts: the ones sent before are cached, so they would be prefilled locally).
    remote_before, batches_before = remote(), batches()
    traffic = Traffic(cluster.url, RATE, seed=8)
    traffic.start()
    time.sleep(4)
    traffic.stop()
    assert summarize(traffic.outcomes, 0.0).completed == len(traffic.outcomes)
    reasons = {r: metric(cluster.url, "dynamo_lite_frontend_disaggregation_decisions_total", reason=r)
               for r in ("remote", "short_prompt", "queue_full", "no_prefill_workers", "prefill_failed")}
    assert remote() > remote_before, f"remote prefill resumed (decisions so far: {reasons})"
    assert batches() > batches_before, "KV events flow again"


def test_a_killed_etcd_comes_back_and_a_new_worker_registers_and_serves(cluster: Cluster) -> None:
    old = cluster.pid("etcd")

    def back() -> bool:
        return cluster.restarts("etcd") == 1 and cluster.pid("etcd") != old

    row = under_traffic(cluster, "etcd SIGKILL (not restarted by the test)", lambda: os.kill(old, signal.SIGKILL),
                        back, note="same data dir; routing goes on from the frontend's last view")
    assert row.lost == 0 and row.errored == 0, row
    before = {w["worker_id"] for w in cluster.workers("decode")}
    reply = cluster.admin("/pools/decode/scale", {"replicas": 3})
    assert reply["pool"]["replicas"] == 3
    (new,) = {w["worker_id"] for w in cluster.workers("decode")} - before
    eventually(lambda: cluster.routable().get("decode") == 3, timeout=15, what="the new worker routable")
    traffic = Traffic(cluster.url, RATE, seed=9)
    traffic.start()
    time.sleep(4)
    traffic.stop()
    assert metric(cluster.url, "dynamo_lite_frontend_routing_decisions_total", worker=new) > 0


def test_a_scale_down_restarts_nothing(cluster: Cluster) -> None:
    restarts = cluster.restarts("pool decode")
    cluster.admin("/pools/decode/scale", {"replicas": 2})
    time.sleep(3)  # the reconciler checks every 0.5 s: a retired worker taken for dead would be back by now
    assert len(cluster.workers("decode")) == 2
    assert cluster.restarts("pool decode") == restarts


def test_a_worker_that_cannot_start_is_given_up_without_a_busy_loop(cluster: Cluster) -> None:
    # An operator breaks cluster.yaml while the cluster runs: every new worker reads it and exits at start.
    good = cluster.spec.read_text()
    cluster.spec.write_text(good + "bogus_key: 1\n")
    try:
        cluster.kill_worker("decode")
        eventually(lambda: cluster.part("pool decode").state == "failed", timeout=60, what="the pool given up")
        supervisor = psutil.Process(cluster.up.pid)
        cpu = sum(supervisor.cpu_times()[:2])
        time.sleep(3)
        assert sum(supervisor.cpu_times()[:2]) - cpu < 0.6, "no busy loop once a part is given up"
    finally:
        cluster.spec.write_text(good)  # `status` reads it too
    status = subprocess.run([sys.executable, "-m", "dynamo_lite.orchestrator", "status", "-f", str(cluster.spec)],
                            capture_output=True, text=True, timeout=60)
    assert status.returncode != 0  # a failed part is unhealthy
    assert "pool decode" in status.stdout and "FAILED" in status.stdout, status.stdout
    assert "bogus_key: unknown key" in status.stdout, "the log tail says why"  # the worker's own error
    assert cluster.routable().get("decode") == 1  # the survivor still serves


def test_down_restarts_nothing(cluster: Cluster) -> None:
    pids = [p.pid for p in cluster.state().processes if p.name != "supervisor"]
    done = subprocess.run([sys.executable, "-m", "dynamo_lite.orchestrator", "down", "-f", str(cluster.spec)],
                          capture_output=True, text=True, timeout=150)
    assert done.returncode == 0, done.stdout + done.stderr
    assert cluster.up.wait(30) == 0
    assert not [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"]
    log = cluster.log.read_text()
    after = log[log.index("shutting down"):]
    assert "restarting it" not in after, after
