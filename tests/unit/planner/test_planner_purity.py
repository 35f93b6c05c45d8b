import subprocess
import sys

FORBIDDEN = ("aiohttp", "nats", "aetcd", "etcd3", "prometheus_client", "zmq", "vllm", "torch")
CORE = "planner, planner.core, planner.load_policy, planner.sla_policy, planner.profile, planner.trend"


def test_planner_core_imports_no_io_libraries():
    code = f"import sys, {CORE}; print(','.join(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
