"""`orchestrator up` with mock pools serves the OpenAI API: it says how to call it, answers the
official client, and takes the frontend down with everything else."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import msgspec
import openai
import pytest

from dynamo_lite.infra import free_port
from dynamo_lite.orchestrator.state import ClusterState, pid_alive

pytestmark = pytest.mark.integration


def test_up_serves_the_openai_api(tmp_path: Path) -> None:
    port = free_port()
    spec = tmp_path / "cluster.yaml"
    spec.write_text(
        f"namespace: feup\nstate_dir: {tmp_path / 'state'}\n"
        "models: [{name: tiny, path: 'builtin:tiny', block_size: 16, max_model_len: 1024}]\n"
        f"frontend: {{port: {port}, disaggregation: {{max_local_prefill_tokens: 32}}}}\n"
        "pools:\n"
        "  - {name: prefill, role: prefill, engine: mock, mock: {speedup_ratio: 50}}\n"
        "  - {name: decode, role: decode, engine: mock, mock: {speedup_ratio: 50}}\n"
    )
    up = subprocess.Popen([sys.executable, "-m", "dynamo_lite.orchestrator.cli", "up", "-f", str(spec)], stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True)
    try:
        assert up.stdout is not None
        printed = []
        deadline = time.monotonic() + 120
        for line in up.stdout:
            printed.append(line)
            if "is up" in line:
                break
            assert time.monotonic() < deadline, "orchestrator up did not come up in 120 s"
        out = "".join(printed)
        base = f"http://127.0.0.1:{port}"
        assert f"OpenAI-compatible API: {base}/v1" in out, out
        assert f"curl {base}/v1/chat/completions" in out and "openai.OpenAI(base_url=" in out

        client = openai.OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0, timeout=30)
        short = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "Hello!"}],
                                               max_tokens=6)
        assert short.choices[0].message.content and short.usage.completion_tokens == 6
        long_prompt = "A long prompt that a prefill worker computes. " * 20
        streamed = list(client.completions.create(model="tiny", prompt=long_prompt, max_tokens=6, stream=True))
        assert streamed[-1].choices[0].finish_reason == "length"
        metrics = urllib.request.urlopen(f"{base}/metrics", timeout=10).read().decode()
        for reason in ("remote", "short_prompt"):
            assert f'dynamo_lite_frontend_disaggregation_decisions_total{{model="tiny",reason="{reason}"}} 1.0' in metrics

        state = msgspec.json.decode((tmp_path / "state" / "cluster.json").read_bytes(), type=ClusterState)
        (frontend,) = [p for p in state.processes if p.name == "frontend"]
        assert frontend.url == base
        up.send_signal(signal.SIGTERM)
        assert up.wait(timeout=90) == 0
        assert not pid_alive(frontend.pid)
    finally:
        up.kill()
