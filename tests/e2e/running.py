"""`orchestrator up` as a real child process for the e2e tests: started from a spec, awaited until it
says it is up, stopped with SIGTERM. No test imports another test module; they share this.

    with orchestrator_up(tmp, port, spec_text, Cluster) as cluster: ...
"""

from __future__ import annotations

import json
import signal
import subprocess
import urllib.request
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import msgspec

from dynamo_lite.orchestrator.state import ClusterState
from tests.waiting import eventually


@dataclass
class Running:
    spec: Path
    state_dir: Path
    url: str  # the frontend's
    up: subprocess.Popen[bytes]
    log: Path  # what `up` printed

    def state(self) -> ClusterState:
        return msgspec.json.decode((self.state_dir / "cluster.json").read_bytes(), type=ClusterState)


R = TypeVar("R", bound=Running)


@contextmanager
def orchestrator_up(tmp: Path, port: int, spec_text: str, cls: type[R]) -> Iterator[R]:
    """`up -f tmp/cluster.yaml` (the spec keeps its state in tmp/state and serves on `port`)."""
    spec = tmp / "cluster.yaml"
    spec.write_text(spec_text)
    log = tmp / "up.log"
    with open(log, "wb") as out:
        up = subprocess.Popen([sys.executable, "-m", "dynamo_lite.orchestrator", "up", "-f", str(spec)],
                              stdout=out, stderr=subprocess.STDOUT)
    try:
        eventually(lambda: "is up" in log.read_text() or up.poll() is not None, timeout=180, what="`up` started")
        assert up.poll() is None, log.read_text()[-3000:]
        yield cls(spec, tmp / "state", f"http://127.0.0.1:{port}", up, log)
    finally:
        if up.poll() is None:
            up.send_signal(signal.SIGTERM)
            up.wait(120)


def await_aggregated(cluster: Running, model: str, timeout: float = 600) -> None:
    """Until the frontend sees one aggregated worker of `model` (a real engine takes minutes to load)."""

    def serving() -> bool:
        health = json.loads(urllib.request.urlopen(f"{cluster.url}/health", timeout=5).read())
        return health["models"].get(model, {}).get("aggregated") == 1

    eventually(serving, timeout=timeout, interval=1, what=f"the worker of {model} in the frontend's view")
