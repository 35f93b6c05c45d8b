"""The frontend processes of `orchestrator up`: their ports, command lines, parts and Prometheus
targets (the processes themselves run in tests/e2e/test_frontend_processes.py)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from dynamo_lite.config import parse_cluster_spec
from dynamo_lite.frontend.component import FrontendProcess, frontend_stage, slots
from dynamo_lite.infra import free_port
from dynamo_lite.infra.ports import PortInUse
from dynamo_lite.infra.process import ProcessInfo
from dynamo_lite.observability.targets import component_targets

MODEL = "models: [{name: m, path: 'builtin:tiny'}]\n"


def stage(frontend: str, tmp: Path) -> list[FrontendProcess]:
    spec = parse_cluster_spec(f"state_dir: {tmp}\n{MODEL}frontend: {frontend}\n")
    return frontend_stage(spec, tmp / "cluster.yaml", "nats://127.0.0.1:1", "http://127.0.0.1:2")


def test_several_processes_share_the_port_each_with_its_own_metrics_port(tmp_path: Path) -> None:
    port = free_port()
    procs = stage(f"{{port: {port}, processes: 3}}", tmp_path)
    assert [p.part for p in procs] == ["frontend 0", "frontend 1", "frontend 2"]
    assert {p.url for p in procs} == {f"http://127.0.0.1:{port}"}
    own = [p.slot.metrics_port for p in procs]
    assert len(set(own)) == 3 and port not in own
    for i, p in enumerate(procs):
        argv = p.process.argv
        assert argv[argv.index("--port") + 1] == str(port) and "--reuse-port" in argv
        assert argv[argv.index("--process-index") + 1] == str(i)
        assert argv[argv.index("--metrics-port") + 1] == str(own[i])
        assert p.process.log_path.name == f"frontend-{i}.log"
    fixed = stage(f"{{port: {port}, processes: 2, metrics_port: 9500}}", tmp_path)
    assert [p.slot.metrics_port for p in fixed] == [9500, 9501]


def test_one_process_binds_its_port_alone(tmp_path: Path) -> None:
    (only,) = stage("{port: 0, processes: 1}", tmp_path)
    assert only.part == "frontend" and only.process.log_path.name == "frontend.log"
    assert "--reuse-port" not in only.process.argv and "--process-index" not in only.process.argv
    assert "--metrics-port" in only.process.argv  # scraped there too, like several


def test_a_taken_port_is_refused_before_any_process_starts(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        spec = parse_cluster_spec(f"state_dir: {tmp_path}\n{MODEL}frontend: {{port: {port}, processes: 2}}\n")
        with pytest.raises(PortInUse, match=f"port {port} on 127.0.0.1 is already in use"):
            slots(spec)


def test_each_process_is_scraped_at_its_own_port_with_its_index() -> None:
    infos = [ProcessInfo(name="frontend", pid=4000 + i, url="http://127.0.0.1:8123", index=i,
                         metrics_url=f"http://127.0.0.1:{9600 + i}") for i in range(2)]
    infos.append(ProcessInfo(name="planner", pid=5000, url="http://127.0.0.1:9700"))
    targets = component_targets("ns", infos)
    assert [(t.address, t.labels) for t in targets] == [
        ("127.0.0.1:9600", {"namespace": "ns", "component": "frontend", "process": "0"}),
        ("127.0.0.1:9601", {"namespace": "ns", "component": "frontend", "process": "1"}),
        ("127.0.0.1:9700", {"namespace": "ns", "component": "planner"})]
    single = ProcessInfo(name="frontend", pid=1, url="http://127.0.0.1:8000")  # no own port: at its url
    assert [(t.address, t.labels["process"]) for t in component_targets("ns", [single])] == [("127.0.0.1:8000", "0")]
