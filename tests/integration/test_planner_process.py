"""`python -m dynamo_lite.planning` as its own process: observes a cluster, logs decisions, stops on SIGTERM."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from dynamo_lite.infra import EmbeddedEtcd, EmbeddedNats, free_port
from tests.waiting import eventually_async

pytestmark = pytest.mark.integration


async def test_standalone_planner_observes_and_only_logs(tmp_path: Path, nats_server: EmbeddedNats,
                                                         etcd_server: EmbeddedEtcd) -> None:
    port = free_port()
    spec = tmp_path / "cluster.yaml"
    spec.write_text(
        "namespace: solo\nmodels: [{name: m, path: builtin:tiny}]\n"
        f"frontend: {{port: {free_port()}}}\n"
        "pools: [{name: p, role: prefill, engine: mock, replicas: 3}, {name: d, role: decode, engine: mock, replicas: 2}]\n"
        f"planner: {{enabled: true, interval_s: 0.5, cooldown_s: 0, scale_down_after: 1, metrics_port: {port}}}\n"
    )
    log = tmp_path / "planner.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "dynamo_lite.planning", "-f", str(spec), "--nats-url", nats_server.url,
                                 "--etcd-url", etcd_server.url, "--connector", "none"], stdout=out, stderr=out)
    try:
        async with aiohttp.ClientSession() as s:
            async def decided() -> str:
                try:
                    async with s.get(f"http://127.0.0.1:{port}/metrics") as r:
                        text = await r.text()
                except aiohttp.ClientError:
                    return ""
                assert 'dynamo_lite_planner_decisions_total{direction="down",pool="prefill"}' in text
                return text

            text = await eventually_async(decided, timeout=20, interval=0.2, what="the planner's first decision")
        assert 'dynamo_lite_planner_replicas{pool="prefill"} 3.0' in text, "replicas as the spec has them"
        assert "dynamo_lite_planner_dry_run 1.0" in text
    finally:
        proc.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(proc.wait, 30)
    output = log.read_text()
    assert code == 0, output
    assert "planner (dry run): prefill 3->2" in output and "no decode load reports" in output
