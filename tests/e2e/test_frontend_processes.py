"""`orchestrator up` with `frontend.processes: 2`: two frontend processes serve one port
(SO_REUSEPORT), each with its own /metrics; one killed with SIGKILL is restarted by the
supervisor while the port keeps answering; a port someone else holds is refused."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import httpx2
import openai
import pytest

from dynamo_lite.infra import free_port
from dynamo_lite.infra.process import ProcessInfo
from tests.e2e.running import Running, orchestrator_up
from tests.integration.fleet import metric
from tests.integration.traffic import Traffic
from tests.waiting import eventually

pytestmark = [pytest.mark.integration, pytest.mark.slow]
REQUESTS = "dynamo_lite_frontend_requests_total"


class Cluster(Running):
    def frontends(self) -> dict[int, ProcessInfo]:
        return {p.index: p for p in self.state().processes if p.name == "frontend" and p.index is not None}

    def served(self, index: int) -> float:
        """Requests process `index` finished, from its own /metrics."""
        url = self.frontends()[index].metrics_url
        assert url is not None
        return metric(url, REQUESTS)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("processes")
    port = free_port()
    with orchestrator_up(tmp, port, f"namespace: procs\nstate_dir: {tmp / 'state'}\n"
                         "models: [{name: m, path: 'builtin:tiny', block_size: 16, max_model_len: 2048}]\n"
                         f"frontend: {{port: {port}, processes: 2}}\n"
                         "pools: [{name: agg, role: aggregated, engine: mock, mock: {speedup_ratio: 4, seed: 1}}]\n"
                         "supervisor: {restart_backoff_s: 0.5}\n", Cluster) as c:
        yield c


def fresh_client(url: str) -> openai.OpenAI:
    """No keep-alive: each request a new connection, which the kernel places on one of the processes."""
    return openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=30,
                         http_client=openai.DefaultHttpxClient(limits=httpx2.Limits(max_keepalive_connections=0)))


def test_two_processes_share_the_port_and_both_serve(cluster: Cluster) -> None:
    frontends = cluster.frontends()
    assert sorted(frontends) == [0, 1], cluster.state().processes
    assert len({p.pid for p in frontends.values()}) == 2 and {p.url for p in frontends.values()} == {cluster.url}
    assert len({p.metrics_url for p in frontends.values()}) == 2
    log = Path(frontends[1].log or "").read_text()
    assert "(SO_REUSEPORT, shared with the other frontend processes)" in log and "[frontend 1]" in log
    assert "event loop: uvloop" in log

    status = subprocess.run([sys.executable, "-m", "dynamo_lite.orchestrator", "status", "-f", str(cluster.spec)],
                            capture_output=True, text=True, timeout=30)
    assert status.returncode == 0, status.stdout + status.stderr
    rows = [line.split() for line in status.stdout.splitlines()]
    for i, p in frontends.items():
        assert ["frontend", str(i), "healthy", cluster.url, "pid", f"{p.pid},"] in [r[:6] for r in rows], status.stdout

    targets = json.loads((cluster.state_dir / "prometheus" / "targets.json").read_text())
    scraped = {g["labels"]["process"]: g["targets"][0] for g in targets if g["labels"]["component"] == "frontend"}
    assert scraped == {str(i): p.metrics_url.removeprefix("http://") for i, p in frontends.items()}  # type: ignore[union-attr]

    before = {i: cluster.served(i) for i in frontends}
    client = fresh_client(cluster.url)
    for _ in range(40):
        done = client.completions.create(model="m", prompt=[5, 6, 7, 8], max_tokens=4)
        assert done.usage is not None and done.usage.completion_tokens == 4
        health = json.loads(urllib.request.urlopen(f"{cluster.url}/health", timeout=5).read())
        assert health["status"] == "ok" and health["models"]["m"]["aggregated"] == 1  # from either process
    served = {i: cluster.served(i) - before[i] for i in frontends}
    assert sum(served.values()) == 40 and all(n > 0 for n in served.values()), served


def test_a_killed_process_is_restarted_while_the_port_answers(cluster: Cluster) -> None:
    victim = cluster.frontends()[1]
    traffic = Traffic(cluster.url, rate=6.0, fresh_connections=True)
    traffic.start()
    try:
        time.sleep(2)
        os.kill(victim.pid, signal.SIGKILL)
        # Gone means reaped, not a zombie: the leader of a SIGKILLed process is a zombie while its other
        # threads still exit, and its sockets close only when the last one has (a connection the kernel
        # places meanwhile is reset). The supervisor reaps it once all of it is gone.
        eventually(lambda: not Path(f"/proc/{victim.pid}").exists(), timeout=5,
                   what="the killed frontend process gone and reaped")
        t_kill = time.monotonic()
        eventually(lambda: cluster.frontends()[1].pid != victim.pid, timeout=60, what="frontend 1 restarted")
        eventually(lambda: metric(cluster.frontends()[1].metrics_url or "", "dynamo_lite_frontend_workers") > 0,
                   timeout=30, what="the restarted process serving")
        back_s = time.monotonic() - t_kill
        time.sleep(2)  # and traffic on both again
    finally:
        traffic.stop()
    after = [o for o in traffic.outcomes if o.sent >= t_kill]
    before = [o for o in traffic.outcomes if o.sent < t_kill]
    assert after and all(o.status == "completed" for o in after), [o.status for o in after]
    # Streams the killed process held end with a connection error; none hangs or ends malformed.
    assert all(o.status in ("completed", "error:APIConnectionError") for o in before), [o.status for o in before]
    part = next(p for p in cluster.state().parts if p.part == "frontend 1")
    assert part.state == "running" and part.restarts == 1 and "exited with code -9" in part.reason
    admin = cluster.state().admin_url or ""
    assert metric(admin, "dynamo_lite_supervisor_restarts_total", part="frontend 1") == 1
    assert metric(admin, "dynamo_lite_supervisor_restarts_total", part="frontend 0") == 0
    print(f"\nfrontend 1 back {back_s:.1f} s after SIGKILL; {len(after)} requests sent meanwhile and after, all "
          f"completed; {sum(o.status != 'completed' for o in before)} of those sent before it ended in error")

    client = fresh_client(cluster.url)
    for _ in range(30):
        client.completions.create(model="m", prompt=[1, 2, 3], max_tokens=2)
    assert cluster.served(1) > 0, "the restarted process takes new connections again"


def test_up_refuses_a_port_another_process_holds(tmp_path: Path) -> None:
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)  # it would let the frontends join silently
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    spec = tmp_path / "cluster.yaml"
    spec.write_text(f"namespace: taken\nstate_dir: {tmp_path / 'state'}\n"
                    "models: [{name: m, path: 'builtin:tiny'}]\n"
                    f"frontend: {{port: {port}, processes: 2}}\n")
    try:
        up = subprocess.run([sys.executable, "-m", "dynamo_lite.orchestrator", "up", "-f", str(spec)],
                            capture_output=True, text=True, timeout=60)
    finally:
        holder.close()
    assert up.returncode == 1, up.stdout + up.stderr
    assert f"error: frontend.port: port {port} on 127.0.0.1 is already in use" in up.stderr
    assert not (tmp_path / "state" / "cluster.json").exists()  # nothing was started
