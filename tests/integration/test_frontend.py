"""The frontend against a mock fleet (worker agents + mock engines as processes, real NATS and etcd),
called with the official `openai` client: streaming and not, disaggregation both ways, KV-aware
routing, multiple models, every client error, a second frontend on a taken port, and migration off a
worker killed mid-stream.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import openai
import pytest

from dynamo_lite.protocol import WorkerRecord
from tests.integration.fleet import Fleet, metric, start_fleet, stop_fleet
from tests.waiting import eventually

pytestmark = pytest.mark.integration
MOCK = "mock: {speedup_ratio: 50}"
POOLS = (f"  - {{name: prefill, role: prefill, engine: mock, model: m, {MOCK}}}\n"
         f"  - {{name: decode, role: decode, engine: mock, model: m, {MOCK}}}\n"
         f"  - {{name: agg, role: aggregated, engine: mock, model: agg, {MOCK}}}\n")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path, agent_processes: SimpleNamespace) -> Iterator[Fleet]:
    """2 prefill + 2 decode workers of model m, 1 aggregated of model agg, none of model empty."""
    workers = {"p0": "prefill", "p1": "prefill", "d0": "decode", "d1": "decode", "a0": "agg"}
    f = start_fleet(tmp_path_factory.mktemp("fleet"), tiny_model, agent_processes, workers, POOLS,
                    "{max_body_bytes: 65536, disaggregation: {max_local_prefill_tokens: 64}}",
                    {"m": {"prefill": 2, "decode": 2}, "agg": {"aggregated": 1}})
    yield f
    stop_fleet(f, agent_processes)


def engine_counter(record: WorkerRecord, source: str) -> float:
    return metric(record.engine_url, "vllm:prompt_tokens_by_source_total", source=source)


def decode_batches_relayed(records: dict[str, WorkerRecord]) -> float:
    """KV event batches the decode agents of model m relayed to NATS (their own counter)."""
    return sum(metric(r.agent_url, "dynamo_lite_worker_kv_event_batches_total") for r in records.values()
               if r.model == "m" and r.role.value == "decode")


# --- the happy paths ------------------------------------------------------------------------
def test_chat_and_completions_streaming_and_not(fleet: Fleet) -> None:
    client = fleet.client()
    hello = [{"role": "user", "content": "Say hello."}]
    full = client.chat.completions.create(model="m", messages=hello, max_tokens=8, temperature=0.7, seed=3)
    assert full.object == "chat.completion" and full.choices[0].message.role == "assistant"
    assert full.choices[0].message.content and full.choices[0].finish_reason == "length"
    assert full.usage.completion_tokens == 8 and full.usage.prompt_tokens > 5
    assert full.usage.prompt_tokens_details.cached_tokens is not None

    chunks = list(client.chat.completions.create(model="m", messages=hello, max_completion_tokens=8, stream=True,
                                                 stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 8

    comp = client.completions.create(model="m", prompt="Once upon a time", max_tokens=5)
    assert comp.object == "text_completion" and comp.usage.completion_tokens == 5 and comp.choices[0].text
    streamed = list(client.completions.create(model="m", prompt=[1, 2, 3, 4], max_tokens=5, stream=True))
    assert "".join(c.choices[0].text for c in streamed) and streamed[-1].choices[0].finish_reason == "length"
    assert [m.id for m in client.models.list().data] == ["m", "agg", "empty"]


def test_models_select_their_pools(fleet: Fleet) -> None:
    before = metric(fleet.url, "dynamo_lite_frontend_routing_decisions_total", model="agg", worker="a0")
    out = fleet.client().completions.create(model="agg", prompt="x " * 300, max_tokens=3)
    assert out.usage.completion_tokens == 3
    assert metric(fleet.url, "dynamo_lite_frontend_routing_decisions_total", model="agg", worker="a0") == before + 1
    assert metric(fleet.url, "dynamo_lite_frontend_disaggregation_decisions_total", model="agg",
                  reason="aggregated_worker") >= 1


def test_disaggregation_both_ways_and_kv_routing(fleet: Fleet) -> None:
    """A long new prompt is prefilled remotely; the follow-up turn goes to the decode worker that now
    holds its prefix, prefills locally there and reports the prefix as cached."""
    client, records = fleet.client(), fleet.records()
    prefill = [r for r in records.values() if r.role.value == "prefill"]
    computed_before = sum(engine_counter(r, "local_compute") for r in prefill)
    remote_before = metric(fleet.url, "dynamo_lite_frontend_disaggregation_decisions_total", reason="remote")
    local_before = metric(fleet.url, "dynamo_lite_frontend_disaggregation_decisions_total", reason="short_prompt")
    events_before = metric(fleet.url, "dynamo_lite_frontend_kv_event_batches_total", model="m", status="applied")
    relayed_before = decode_batches_relayed(records)
    story = " ".join(f"fact {i} is that the number {i} follows {i - 1}." for i in range(60))
    turn1 = [{"role": "system", "content": "You remember facts."}, {"role": "user", "content": story}]
    first = client.chat.completions.create(model="m", messages=turn1, max_tokens=4)
    assert first.usage.prompt_tokens > 300
    assert metric(fleet.url, "dynamo_lite_frontend_disaggregation_decisions_total", reason="remote") == remote_before + 1
    assert sum(engine_counter(r, "local_compute") for r in prefill) >= computed_before + 300  # prefill workers did it
    routed = {wid: metric(fleet.url, "dynamo_lite_frontend_routing_decisions_total", worker=wid) for wid in ("d0", "d1")}
    decode_with_kv = [wid for wid in ("d0", "d1") if engine_counter(records[wid], "external_kv_transfer") > 0]
    assert len(decode_with_kv) >= 1

    # the decode worker's KV events reach the frontend's router: every batch the decode agents relayed
    # since the first turn is applied there (the prefill workers' batches are not: they are not routed to)
    def kv_events_applied() -> bool:
        relayed = decode_batches_relayed(records) - relayed_before
        applied = metric(fleet.url, "dynamo_lite_frontend_kv_event_batches_total", model="m",
                         status="applied") - events_before
        assert relayed >= 1 and applied >= relayed, f"{applied} of {relayed} relayed KV event batches applied"
        return True

    eventually(kv_events_applied, timeout=10, what="the decode workers' KV events in the router")
    turn2 = turn1 + [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "What is fact 7?"}]
    second = client.chat.completions.create(model="m", messages=turn2, max_tokens=4)
    after = {wid: metric(fleet.url, "dynamo_lite_frontend_routing_decisions_total", worker=wid) for wid in ("d0", "d1")}
    (chosen,) = [wid for wid in after if after[wid] > routed[wid]]
    assert chosen in decode_with_kv, "the follow-up lands where the prefix lives"
    assert second.usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens - 16
    assert metric(fleet.url, "dynamo_lite_frontend_disaggregation_decisions_total", reason="short_prompt") == local_before + 1
    assert metric(fleet.url, "dynamo_lite_frontend_cached_tokens_total", model="m") >= second.usage.prompt_tokens_details.cached_tokens


# --- errors -------------------------------------------------------------------------------
def raw_post(url: str, body: bytes) -> tuple[int, dict]:
    req = urllib.request.Request(f"{url}/v1/chat/completions", data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (b'{"model": "m", "messages": [', 400, "could not parse the JSON body"),
        (b'{"model": "m"}', 400, "Missing required parameter: 'messages'"),
        (b'{"model": "m", "messages": [{"role": "user", "content": ["x"]}]}', 400, "messages[0].content"),
        (b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": "9"}', 400, "max_tokens"),
        (b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 0}', 400,
         "greater than or equal to 1"),
        (b'{"model": "nope", "messages": [{"role": "user", "content": "x"}]}', 404, "The model `nope` does not exist"),
        (b'{"model": "m", "messages": [{"role": "user", "content": "' + b"y" * 70000 + b'"}]}', 413,
         "limit is 65536 bytes"),
        (b'{"model": "empty", "messages": [{"role": "user", "content": "x"}]}', 503, "No worker is available"),
    ],
)
def test_errors_raw(fleet: Fleet, body: bytes, status: int, message: str) -> None:
    got, payload = raw_post(fleet.url, body)
    assert got == status
    assert set(payload["error"]) == {"message", "type", "param", "code"}
    assert message in payload["error"]["message"]


def test_errors_through_the_openai_client(fleet: Fleet) -> None:
    client = fleet.client()
    hello = [{"role": "user", "content": "hi"}]
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        client.chat.completions.create(model="missing", messages=hello)
    with pytest.raises(openai.BadRequestError, match="maximum context length is 1024 tokens") as e:
        client.chat.completions.create(model="agg", messages=[{"role": "user", "content": "word " * 1500}])
    assert e.value.status_code == 400 and e.value.code == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError, match="greater than or equal to 1"):
        client.chat.completions.create(model="m", messages=hello, max_tokens=-1)
    with pytest.raises(openai.BadRequestError, match="Missing required parameter: 'messages'"):
        client.post("/chat/completions", body={"model": "m"}, cast_to=object)
    with pytest.raises(openai.BadRequestError, match="Invalid value for 'temperature'"):
        client.chat.completions.create(model="m", messages=hello, temperature="warm")  # type: ignore[arg-type]
    with pytest.raises(openai.InternalServerError, match="No worker is available") as e:
        client.chat.completions.create(model="empty", messages=hello, stream=True)
    assert e.value.status_code == 503
    with pytest.raises(openai.APIStatusError, match="Request body too large") as e:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "z" * 70000}])
    assert e.value.status_code == 413


# --- migration ----------------------------------------------------------------------------
SLOW_POOLS = ("  - {name: decode, role: decode, engine: mock, model: m, mock: {speedup_ratio: 1}}\n"
              "  - {name: agg, role: aggregated, engine: mock, model: agg, replicas: 0}\n")


def test_a_second_frontend_on_a_taken_port_says_so_in_one_line(fleet: Fleet) -> None:
    nats, etcd = fleet.servers
    port = fleet.url.rsplit(":", 1)[1]  # the first frontend's
    spec = fleet.log_dir.parent / "cluster.yaml"
    done = subprocess.run([sys.executable, "-m", "dynamo_lite.frontend", "-f", str(spec),
                           "--nats-url", nats.url, "--etcd-url", etcd.url, "--port", port],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert f"error: cannot listen on 127.0.0.1:{port}: " in done.stderr and "address already in use" in done.stderr
    assert "Traceback" not in done.stderr
    assert fleet.health()["models"]  # the first one serves on


def aborted(records: dict[str, WorkerRecord]) -> float:
    return sum(metric(r.engine_url, "vllm:request_success_total", finished_reason="abort") for r in records.values())


def test_disconnect_aborts_and_killed_worker_migrates(tmp_path: Path, tiny_model: Path,
                                                      agent_processes: SimpleNamespace) -> None:
    f = start_fleet(tmp_path, tiny_model, agent_processes, {"d0": "decode", "d1": "decode"}, SLOW_POOLS,
                    "{max_migrations: 2}", {"m": {"decode": 2}})
    try:
        records = f.records()
        hello = [{"role": "user", "content": "Tell a long story."}]
        # a client that goes away mid-stream aborts its engine request (300 tokens take ~3 s here)
        stream = f.client().chat.completions.create(model="m", messages=hello, max_tokens=300, stream=True)
        for i, _ in enumerate(stream):
            if i == 5:
                break
        stream.close()
        eventually(lambda: aborted(records) == 1, timeout=2, what="the engine to abort the request")
        eventually(lambda: metric(f.url, "dynamo_lite_frontend_requests_in_flight") == 0, timeout=2,
                   what="no request in flight at the frontend")
        assert metric(f.url, "dynamo_lite_frontend_requests_total", status="client_closed") == 1

        # a decode worker (agent and engine) killed mid-stream: the stream continues on the other
        routed_before = {w: metric(f.url, "dynamo_lite_frontend_routing_decisions_total", worker=w) for w in records}
        stream = f.client().chat.completions.create(
            model="m", messages=hello, max_tokens=300, stream=True,
            stream_options={"include_usage": True})
        chunks, victim = [], None
        for chunk in stream:
            chunks.append(chunk)
            if victim is None and len(chunks) == 20:
                routed = {w: metric(f.url, "dynamo_lite_frontend_routing_decisions_total", worker=w) for w in records}
                (victim,) = [w for w, n in routed.items() if n == routed_before[w] + 1]
                os.kill(f.agents[victim].proc.pid, signal.SIGKILL)  # type: ignore[attr-defined]
                os.kill(records[victim].pid, signal.SIGKILL)  # its engine
        assert victim is not None
        text_chunks = [c for c in chunks if c.choices]
        assert text_chunks[-1].choices[0].finish_reason == "length"
        assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 300
        assert metric(f.url, "dynamo_lite_frontend_migrations_total", reason="mid_stream") == 1
        survivor = next(w for w in records if w != victim)
        assert metric(f.url, "dynamo_lite_frontend_routing_decisions_total", worker=survivor) == \
            routed_before[survivor] + 1
    finally:
        stop_fleet(f, agent_processes)


@pytest.mark.parametrize("engine_signal", [signal.SIGKILL, signal.SIGTERM], ids=["killed", "aborting"])
def test_a_beam_search_moves_whole_off_a_failed_worker(tmp_path: Path, tiny_model: Path,
                                                       agent_processes: SimpleNamespace,
                                                       engine_signal: signal.Signals) -> None:  # fmt: skip
    """A beam search is one engine request answered whole: its worker failing while it runs (the engine killed;
    or stopped, answering every beam cut short with `abort`), the request is sent again whole to the other worker,
    never resumed from the failed beams' tokens, and every beam comes back in full."""
    f = start_fleet(tmp_path, tiny_model, agent_processes, {"d0": "decode", "d1": "decode"}, SLOW_POOLS,
                    "{max_migrations: 2}", {"m": {"decode": 2}})
    try:
        records = f.records()
        before = {w: metric(f.url, "dynamo_lite_frontend_routing_decisions_total", worker=w) for w in records}
        with ThreadPoolExecutor(1) as pool:  # 300 tokens take ~3 s here
            answer = pool.submit(f.client().completions.create, model="m", prompt="Tell a long story.", n=2,
                                 max_tokens=300, extra_body={"use_beam_search": True, "ignore_eos": True})
            routed: dict[str, float] = {}

            def routed_once() -> bool:
                routed.update({w: metric(f.url, "dynamo_lite_frontend_routing_decisions_total", worker=w)
                               for w in records})  # fmt: skip
                return sum(routed.values()) == sum(before.values()) + 1

            eventually(routed_once, timeout=10, what="the beam search to be routed")
            (victim,) = [w for w, n in routed.items() if n == before[w] + 1]
            time.sleep(0.5)
            assert not answer.done()
            os.kill(records[victim].pid, engine_signal)  # its engine
            os.kill(f.agents[victim].proc.pid, signal.SIGKILL)  # type: ignore[attr-defined]
            out = answer.result(timeout=60)
        assert [c.index for c in out.choices] == [0, 1] and out.usage.completion_tokens == 600
        assert [c.finish_reason for c in out.choices] == ["length", "length"]
        assert metric(f.url, "dynamo_lite_frontend_migrations_total", reason="whole_request") == 1
    finally:
        stop_fleet(f, agent_processes)


def test_responses_and_messages_streams_survive_a_killed_worker(tmp_path: Path, tiny_model: Path,
                                                               agent_processes: SimpleNamespace) -> None:  # fmt: skip
    """The Responses API and Anthropic's Messages API are chat requests underneath: a decode worker (agent and
    engine) killed mid-stream moves the request, and each stream ends as its API ends one, with every token."""
    workers = {"d0": "decode", "d1": "decode", "d2": "decode"}
    f = start_fleet(tmp_path, tiny_model, agent_processes, workers, SLOW_POOLS, "{max_migrations: 2}",
                    {"m": {"decode": 3}})
    try:
        records = f.records()
        killed: list[str] = []

        def kill_the_serving_worker() -> None:
            routed = {w: metric(f.url, "dynamo_lite_frontend_routing_decisions_total", worker=w) for w in records}
            (victim,) = [w for w, n in routed.items() if n > before[w]]
            os.kill(f.agents[victim].proc.pid, signal.SIGKILL)  # type: ignore[attr-defined]
            os.kill(records[victim].pid, signal.SIGKILL)  # its engine
            killed.append(victim)

        before = {w: metric(f.url, "dynamo_lite_frontend_routing_decisions_total", worker=w) for w in records}
        events = []
        for event in f.client().responses.create(model="m", input="Tell a long story.", max_output_tokens=300,
                                                 stream=True):
            events.append(event)
            if len(events) == 20:
                kill_the_serving_worker()
        done = events[-1]
        assert done.type == "response.completed" and done.response.usage.output_tokens == 300
        assert done.response.status == "incomplete" and [e.sequence_number for e in events] == list(range(len(events)))
        text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        assert done.response.output[0].content[0].text == text

        before = {w: metric(f.url, "dynamo_lite_frontend_routing_decisions_total", worker=w) for w in records}
        lines = []
        ask = {"model": "m", "max_tokens": 300, "stream": True, "messages": [{"role": "user", "content": "Go on."}]}
        request = urllib.request.Request(f"{f.url}/v1/messages", data=json.dumps(ask).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as stream:
            for line in stream:
                if line.startswith(b"data: "):
                    lines.append(json.loads(line[6:]))
                    if len(lines) == 20:
                        kill_the_serving_worker()
        kinds = [e["type"] for e in lines]
        assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
        assert lines[-2]["delta"]["stop_reason"] == "max_tokens" and lines[-2]["usage"]["output_tokens"] == 300
        assert len(set(killed)) == 2
        assert metric(f.url, "dynamo_lite_frontend_migrations_total", reason="mid_stream") == 2
    finally:
        stop_fleet(f, agent_processes)
