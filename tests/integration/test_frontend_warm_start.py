"""A frontend process started after the engines cached blocks routes to them from its first
request: it loads each worker agent's KV snapshot before serving. Mock fleets as processes
over real NATS and etcd; agents stopped (SIGSTOP) and killed to show that a worker whose
agent does not answer does not keep the frontend from serving."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import openai
import pytest

from tests.integration.fleet import (
    metric,
    start_fleet,
    start_frontend,
    stop_fleet,
    stop_frontend,
    wait_frontend,
)
from tests.waiting import eventually

pytestmark = pytest.mark.integration
POOLS = "  - {name: agg, role: aggregated, engine: mock, model: m, mock: {speedup_ratio: 50}}\n"
ROUTED = "dynamo_lite_frontend_routing_decisions_total"
PROMPT = " ".join(f"fact {i} is that the number {i} follows {i - 1}." for i in range(40))


def routed(url: str, workers: Iterator[str] | list[str]) -> dict[str, float]:
    return {w: metric(url, ROUTED, worker=w) for w in workers}


def complete(url: str, prompt: str = PROMPT) -> openai.types.Completion:
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=60)
    return client.completions.create(model="m", prompt=prompt, max_tokens=2)


@pytest.mark.parametrize("timeout_s", [2.0, 0.0], ids=["snapshot", "no-snapshot"])
def test_a_frontend_started_after_blocks_were_cached_routes_to_them_from_its_first_request(
        tmp_path: Path, tiny_model: Path, agent_processes: SimpleNamespace, timeout_s: float) -> None:
    f = start_fleet(tmp_path, tiny_model, agent_processes, {"a0": "agg", "a1": "agg"}, POOLS,
                    f"{{kv_snapshot_timeout_s: {timeout_s}}}", {"m": {"aggregated": 2}})
    new = None
    try:
        records = f.records()
        first = complete(f.url)
        assert first.usage.prompt_tokens > 300
        (holder,) = [w for w, n in routed(f.url, records).items() if n == 1]
        eventually(lambda: metric(records[holder].agent_url, "dynamo_lite_worker_kv_event_batches_total") >= 1,
                   timeout=10, what="the holder's agent to relay its KV events")
        url, new = start_frontend(f, "frontend2")
        wait_frontend(url, new, f.log_dir / "frontend2.log", "m", "aggregated", 2, timeout=60)
        complete(url)  # its very first request
        overlap = metric(url, "dynamo_lite_frontend_routed_overlap_tokens_total", model="m")
        if timeout_s:
            assert metric(url, "dynamo_lite_frontend_kv_snapshots_total", outcome="loaded") == 2
            assert metric(url, "dynamo_lite_frontend_kv_snapshot_blocks_total") >= first.usage.prompt_tokens // 16
            assert overlap >= first.usage.prompt_tokens - 16
            assert routed(url, records)[holder] == 1, "the first request goes where its prefix is cached"
            assert sum(metric(r.agent_url, "dynamo_lite_worker_kv_snapshots_total") for r in records.values()) >= 4
        else:  # the control: without the snapshot, the new frontend starts cold
            assert metric(url, "dynamo_lite_frontend_kv_snapshots_total") == 0
            assert overlap == 0
    finally:
        if new is not None:
            stop_frontend(new)
        stop_fleet(f, agent_processes)


def test_workers_whose_agents_do_not_answer_do_not_keep_a_new_frontend_from_serving(
        tmp_path: Path, tiny_model: Path, agent_processes: SimpleNamespace) -> None:
    """One agent stopped (SIGSTOP: connected, never answers: the fetch times out), one killed
    (SIGKILL: nobody listens, NATS says so at once); both stay registered while their leases
    last (30 s here), and their engines serve. The new frontend serves after at most the
    timeout, with the third worker's snapshot loaded."""
    f = start_fleet(tmp_path, tiny_model, agent_processes, {"a0": "agg", "a1": "agg", "a2": "agg"}, POOLS,
                    "{kv_snapshot_timeout_s: 2}", {"m": {"aggregated": 3}}, lease_ttl_s=30)
    records = f.records()
    stopped, killed = f.agents["a1"].proc, f.agents["a2"].proc  # type: ignore[attr-defined]
    new = None
    try:
        for _ in range(3):
            complete(f.url)
        os.kill(stopped.pid, signal.SIGSTOP)
        os.kill(killed.pid, signal.SIGKILL)
        url, new = start_frontend(f, "frontend2")
        wait_frontend(url, new, f.log_dir / "frontend2.log", "m", "aggregated", 3, timeout=60)
        assert metric(url, "dynamo_lite_frontend_kv_snapshots_total", outcome="loaded") == 1
        assert metric(url, "dynamo_lite_frontend_kv_snapshots_total", outcome="timeout") == 1
        assert metric(url, "dynamo_lite_frontend_kv_snapshots_total", outcome="no_responders") == 1
        for i in range(6):  # requests go through, on whichever worker
            assert complete(url, f"question {i}: " + PROMPT[: 200]).usage.completion_tokens == 2
        log = (f.log_dir / "frontend2.log").read_text()
        assert "worker a1: no KV snapshot (timeout" in log and "worker a2: no KV snapshot (no_responders" in log
    finally:
        os.kill(stopped.pid, signal.SIGCONT)
        if new is not None:
            stop_frontend(new)
        stop_fleet(f, agent_processes)
        if records["a2"].pid:
            try:
                os.kill(records["a2"].pid, signal.SIGKILL)  # the killed agent's engine, orphaned
            except ProcessLookupError:
                pass
