"""`orchestrator up / status / down` as a user runs them, as real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import psutil
import pytest

from dynamo_lite.orchestrator.state import ClusterState, pid_alive
from tests.waiting import eventually

pytestmark = pytest.mark.integration


def orchestrator(*args: str) -> list[str]:
    return [sys.executable, "-m", "dynamo_lite.orchestrator.cli", *args]


def write_spec(tmp_path: Path) -> Path:
    spec = tmp_path / "cluster.yaml"
    spec.write_text(f"namespace: e2e\nstate_dir: {tmp_path / 'state'}\n")
    return spec


def start_up(spec: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(orchestrator("up", "-f", str(spec)), stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    for line in proc.stdout:
        if "is up" in line:
            return proc
        assert time.monotonic() < deadline, "orchestrator up did not come up in 60 s"
    raise AssertionError(f"orchestrator up exited with {proc.wait()} before coming up")


def child_pids(tmp_path: Path) -> list[int]:
    state = msgspec.json.decode((tmp_path / "state" / "cluster.json").read_bytes(), type=ClusterState)
    assert {p.name for p in state.processes} == {"etcd", "nats-server", "supervisor"}
    return [p.pid for p in state.processes if p.name != "supervisor"]  # the supervisor is `up` itself


def wait_gone(pids: list[int], timeout_s: float, what: str = "the processes to exit") -> None:
    def gone() -> bool:
        alive = [p for p in pids if pid_alive(p)]
        assert not alive, f"still running: {alive}"
        return True

    eventually(gone, timeout=timeout_s, what=what)


def test_up_status_sigterm_leaves_no_process(tmp_path: Path) -> None:
    spec = write_spec(tmp_path)
    up = start_up(spec)
    try:
        pids = child_pids(tmp_path)
        status = subprocess.run(orchestrator("status", "-f", str(spec)), capture_output=True, text=True, timeout=30)
        assert status.returncode == 0, status.stdout + status.stderr
        lines = status.stdout.splitlines()
        assert lines[0].startswith(f"cluster 'e2e': up (supervisor pid {up.pid}")
        assert any(line.split()[:2] == ["nats", "healthy"] and "JetStream on" in line for line in lines)
        assert any(line.split()[:2] == ["etcd", "healthy"] for line in lines)
        assert "workers: none registered" in lines

        up.send_signal(signal.SIGTERM)
        assert up.wait(timeout=30) == 0
        wait_gone(pids, 5, "SIGTERM to stop every process `up` started")
        assert not (tmp_path / "state" / "cluster.json").exists()
    finally:
        up.kill()


def test_down_stops_the_cluster(tmp_path: Path) -> None:
    spec = write_spec(tmp_path)
    up = start_up(spec)
    try:
        pids = child_pids(tmp_path)
        again = subprocess.run(orchestrator("up", "-f", str(spec)), capture_output=True, text=True, timeout=30)
        assert again.returncode == 1 and "is already up" in again.stderr
        down = subprocess.run(orchestrator("down", "-f", str(spec)), capture_output=True, text=True, timeout=90)
        assert down.returncode == 0 and down.stdout.strip().endswith("stopped.")
        assert up.wait(timeout=10) == 0
        wait_gone(pids, 5)
        after = subprocess.run(orchestrator("status", "-f", str(spec)), capture_output=True, text=True, timeout=30)
        assert after.returncode == 1 and "no `orchestrator up` running" in after.stdout
    finally:
        up.kill()


def test_killed_supervisor_takes_its_children_along(tmp_path: Path) -> None:
    up = start_up(write_spec(tmp_path))
    pids = child_pids(tmp_path)
    os.kill(up.pid, signal.SIGKILL)
    up.wait()
    wait_gone(pids, 10, "the children to get SIGTERM from the kernel when the supervisor dies")


def test_up_runs_worker_pools_and_stops_them_all(tmp_path: Path) -> None:
    spec = tmp_path / "cluster.yaml"
    spec.write_text(
        f"namespace: pools\nstate_dir: {tmp_path / 'state'}\n"
        "models: [{name: m, path: 'builtin:tiny', block_size: 16}]\n"
        "frontend: {port: 0}\n"
        "pools:\n"
        "  - {name: prefill, role: prefill, engine: mock, replicas: 2}\n"
        "  - {name: decode, role: decode, engine: mock}\n"
    )
    up = start_up(spec)
    try:
        state = msgspec.json.decode((tmp_path / "state" / "cluster.json").read_bytes(), type=ClusterState)
        agents = [p.pid for p in state.processes if p.name.startswith("worker ")]
        assert len(agents) == 3
        status = subprocess.run(orchestrator("status", "-f", str(spec)), capture_output=True, text=True, timeout=30)
        assert status.returncode == 0, status.stdout
        assert "workers (3):" in status.stdout
        rows = [line.split() for line in status.stdout.splitlines() if line.strip().startswith(("prefill ", "decode "))]
        assert sorted(r[0] for r in rows) == ["decode", "prefill", "prefill"]
        family = [c.pid for pid in agents for c in psutil.Process(pid).children(recursive=True)] + agents
        up.send_signal(signal.SIGTERM)
        assert up.wait(timeout=90) == 0
        wait_gone(family + [p.pid for p in state.processes], 10, "agents and engines all to stop")
    finally:
        up.kill()
