import subprocess
import sys

FORBIDDEN = ("aiohttp", "nats", "aetcd", "etcd3", "prometheus_client", "zmq", "vllm", "torch")


def test_router_imports_no_io_libraries():
    code = "import sys, router; print(','.join(m for m in sys.modules if m.split('.')[0] in %r))" % (FORBIDDEN,)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
