"""Every query of every shipped Grafana panel returns data from a real Prometheus
scraping a real (mock-engine) cluster brought up by `orchestrator up`."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path

import msgspec
import openai
import pytest

from dynamo_lite.infra import free_port
from dynamo_lite.docs.dashboards import all_queries
from dynamo_lite.orchestrator.state import ClusterState
from tests.waiting import eventually

pytestmark = pytest.mark.integration


def query(prometheus: str, expr: str) -> list:
    url = f"{prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    body = json.loads(urllib.request.urlopen(url, timeout=10).read())
    assert body["status"] == "success", (expr, body)
    return body["data"]["result"]


def test_every_dashboard_query_returns_data(tmp_path: Path) -> None:
    port, prom_port = free_port(), free_port()
    spec = tmp_path / "cluster.yaml"
    spec.write_text(
        f"namespace: obs\nstate_dir: {tmp_path / 'state'}\n"
        "models: [{name: tiny, path: 'builtin:tiny', block_size: 16, max_model_len: 2048}]\n"
        f"frontend: {{port: {port}, disaggregation: {{max_local_prefill_tokens: 64}}}}\n"
        "pools:\n"
        "  - {name: prefill, role: prefill, engine: mock, mock: {speedup_ratio: 20}}\n"
        "  - {name: decode, role: decode, engine: mock, replicas: 2, mock: {speedup_ratio: 20}}\n"
        f"observability: {{prometheus: {{enabled: true, port: {prom_port}, scrape_interval_s: 1}}}}\n"
        "planner: {enabled: true, dry_run: true, interval_s: 1}\n"
    )
    up = subprocess.Popen([sys.executable, "-m", "dynamo_lite.orchestrator.cli", "up", "-f", str(spec)],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert up.stdout is not None
        printed = []
        for line in up.stdout:
            printed.append(line)
            if "is up" in line:
                break
        else:
            raise AssertionError(f"orchestrator up exited with {up.wait()}:\n{''.join(printed[-40:])}")
        state = msgspec.json.decode((tmp_path / "state" / "cluster.json").read_bytes(), type=ClusterState)
        assert any(p.name == "prometheus" for p in state.processes)
        prometheus = f"http://127.0.0.1:{prom_port}"

        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0, timeout=60)
        shared = "Every panel must show data from a real running cluster. " * 12
        for i in range(3):  # long prompts: remote prefill; the repeats find their prefix cached
            list(client.completions.create(model="tiny", prompt=shared + f"question {i}", max_tokens=8, stream=True))
        # short and streamed: prefilled where it is routed, so its first token is judged against the prediction
        list(client.completions.create(model="tiny", prompt="a short one", max_tokens=4, stream=True))
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=4)
        with pytest.raises(openai.NotFoundError):
            client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "hi"}], max_tokens=4)

        empty = all_queries()

        def every_panel_has_data() -> bool:
            empty[:] = [(uid, title, expr) for uid, title, expr in empty if not query(prometheus, expr)]
            assert not empty, "panels whose query returned nothing:\n" + "\n".join(
                f"{u} / {t}: {e}" for u, t, e in empty)
            return True

        eventually(every_panel_has_data, timeout=60, interval=2, what="data behind every dashboard query")
        targets = json.loads((tmp_path / "state" / "prometheus" / "targets.json").read_text())
        assert {g["labels"]["component"] for g in targets} == {"frontend", "planner", "supervisor", "engine", "worker"}
        assert len([g for g in targets if g["labels"]["component"] == "engine"]) == 3
    finally:
        up.send_signal(signal.SIGTERM)
        try:
            up.wait(timeout=90)
        except subprocess.TimeoutExpired:
            up.kill()
