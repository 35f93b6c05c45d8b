"""`orchestrator up` of a cluster.yaml for a benchmark: start it, wait until every worker serves, stop it.

    with orchestrator_up(Path("deploy/examples/mock-fleet.yaml"), Path("up.log")) as url:
        ...  # the frontend's base URL, once every pool's workers are in its /health
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from dynamo_lite.config import load_cluster_spec


def expected_workers(spec_path: Path) -> dict[str, dict[str, int]]:
    """model -> role -> workers, from the pools' replicas."""
    spec = load_cluster_spec(spec_path)
    out: dict[str, dict[str, int]] = {}
    for pool in spec.pools:
        roles = out.setdefault(spec.model_of(pool).name, {})
        roles[pool.role.value] = roles.get(pool.role.value, 0) + pool.replicas
    return out


@contextlib.contextmanager
def orchestrator_up(spec_path: Path, log_path: Path, timeout_s: float = 300.0) -> Iterator[str]:
    spec = load_cluster_spec(spec_path)
    url = f"http://{spec.frontend.host}:{spec.frontend.port}"
    want = expected_workers(spec_path)
    with open(log_path, "wb") as out:
        up = subprocess.Popen([sys.executable, "-m", "dynamo_lite.cli", "up", "-f", str(spec_path)], stdout=out,
                              stderr=subprocess.STDOUT)

    def ready() -> bool:
        try:
            models = json.loads(urllib.request.urlopen(f"{url}/health", timeout=2).read())["models"]
        except (OSError, ValueError, KeyError):
            return False
        return all(models.get(m, {}).get(role) == n for m, roles in want.items() for role, n in roles.items())

    try:
        deadline = time.monotonic() + timeout_s
        while not ready():
            if up.poll() is not None or time.monotonic() > deadline:
                tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-15:])
                raise RuntimeError(f"orchestrator up -f {spec_path}: "
                                   f"{'exited with ' + str(up.returncode) if up.poll() is not None else 'not ready'}"
                                   f"\n{tail}")  # fmt: skip
            time.sleep(0.5)
        yield url
    finally:
        if up.poll() is None:
            up.send_signal(signal.SIGTERM)
        try:
            up.wait(60)
        except subprocess.TimeoutExpired:
            up.kill()
            up.wait()
