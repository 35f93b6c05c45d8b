"""Processes for benchmarks: wait for one to serve, stop some, and `orchestrator up` of a cluster.yaml.

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
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from dynamo_lite.config import load_cluster_spec
from dynamo_lite.infra.process import ProcessInfo
from dynamo_lite.orchestrator.state import read_state


def wait_for(check: Callable[[], bool], timeout_s: float, what: str, proc: subprocess.Popen | None = None,
             log_path: Path | None = None) -> None:  # fmt: skip
    """Until `check()` is true (its OSError/ValueError/KeyError count as not yet); RuntimeError with the
    log's tail if `proc` exits first, TimeoutError after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-15:]) if log_path else ""
            raise RuntimeError(f"{what}: the process exited with {proc.returncode}\n{tail}")
        with contextlib.suppress(OSError, ValueError, KeyError):
            if check():
                return
        time.sleep(0.2)
    raise TimeoutError(f"{what}: not ready within {timeout_s:.0f} s")


def stop(procs: Sequence[subprocess.Popen], grace_s: float = 30.0) -> None:
    """SIGTERM them all, wait up to `grace_s` in all, SIGKILL what is left."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for p in procs:
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


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
        up = subprocess.Popen([sys.executable, "-m", "dynamo_lite.orchestrator.cli", "up", "-f", str(spec_path)], stdout=out,
                              stderr=subprocess.STDOUT)

    def ready() -> bool:
        models = json.loads(urllib.request.urlopen(f"{url}/health", timeout=2).read())["models"]
        return all(models.get(m, {}).get(role) == n for m, roles in want.items() for role, n in roles.items())

    try:
        wait_for(ready, timeout_s, f"orchestrator up -f {spec_path}", up, log_path)
        yield url
    finally:
        stop([up], grace_s=60)


def frontend_processes(state_dir: Path) -> list[ProcessInfo]:
    """The frontend processes of the cluster `orchestrator up` runs with `state_dir`, by index (from its state
    file: pid, the shared URL and each one's own metrics URL); [] when no `up` is alive there."""
    state = read_state(state_dir)
    found = [p for p in state.processes if p.name == "frontend"] if state else []
    return sorted(found, key=lambda p: p.index or 0)


def counter_by_label(metrics_urls: Sequence[str], name: str, label: str) -> dict[str, float]:
    """A Prometheus counter's samples (`name` without _total) summed by `label` over every URL's /metrics:
    e.g. routing decisions per worker over all frontend processes."""
    out: dict[str, float] = {}
    for s in _samples(metrics_urls, name):
        if s.name == f"{name}_total":
            out[s.labels[label]] = out.get(s.labels[label], 0.0) + s.value
    return out


def histogram_above(metrics_urls: Sequence[str], name: str, bound: float) -> float:
    """How many observations of the Prometheus histogram `name` exceeded `bound` (one of its buckets), over
    every URL's /metrics: e.g. the frontend's event-loop stalls of more than 0.25 s."""
    total = 0.0
    for s in _samples(metrics_urls, name):
        if s.name == f"{name}_count":
            total += s.value
        elif s.name == f"{name}_bucket" and float(s.labels["le"]) == bound:
            total -= s.value
    return total


def histogram_quantiles(metrics_urls: Sequence[str], name: str, qs: Sequence[float]) -> list[float] | None:
    """Quantiles `qs` of the Prometheus histogram `name`, its buckets summed over every URL's /metrics, read
    as Prometheus's histogram_quantile reads them (linear within a bucket; the highest finite bound past
    the last). None when nothing was observed."""
    cumulative: dict[float, float] = {}
    for s in _samples(metrics_urls, name):
        if s.name == f"{name}_bucket":
            le = float(s.labels["le"])
            cumulative[le] = cumulative.get(le, 0.0) + s.value
    bounds = sorted(cumulative)
    total = cumulative.get(float("inf"), 0.0)
    if not total:
        return None
    out = []
    for q in qs:
        rank, lower, below = q * total, 0.0, 0.0
        for le in bounds:
            if cumulative[le] >= rank:
                if le == float("inf"):
                    out.append(lower)
                else:
                    inside = cumulative[le] - below
                    out.append(lower + (le - lower) * ((rank - below) / inside if inside else 1.0))
                break
            lower, below = le, cumulative[le]
    return out


def _samples(metrics_urls: Sequence[str], name: str) -> Iterator[Sample]:
    """The samples of the metric family `name` on every URL's /metrics."""
    for url in metrics_urls:
        text = urllib.request.urlopen(f"{url}/metrics", timeout=5).read().decode()
        for family in text_string_to_metric_families(text):
            if family.name == name:
                yield from family.samples
