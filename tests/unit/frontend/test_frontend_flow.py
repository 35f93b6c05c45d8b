"""The request flow on fake workers: responses, streaming, disaggregation branches, migration, disconnects."""

from __future__ import annotations

import asyncio
import json

from dynamo_lite.frontend.app import STATE
from dynamo_lite.frontend.request import Piece
from dynamo_lite.protocol import Role
from tests.unit.frontend.conftest import Script, pieces
from tests.waiting import eventually_async

CHAT = "/v1/chat/completions"
HELLO = [{"role": "user", "content": "hello"}]


async def sse_events(resp) -> list:  # noqa: ANN001
    assert resp.headers["Content-Type"].startswith("text/event-stream")
    raw = (await resp.read()).decode()
    assert raw.endswith("data: [DONE]\n\n")
    frames = [f for f in raw.split("\n\n") if f]
    assert all(f.startswith("data: ") for f in frames)
    return [json.loads(f[6:]) for f in frames[:-1]]


async def test_chat_non_streaming(harness) -> None:
    h = await harness()
    h.add_worker("d0", script=Script(pieces(4, "stop"), cached_tokens=3))
    resp = await h.client.post(CHAT, json={"model": "m", "messages": HELLO, "max_tokens": 4, "seed": 7,
                                           "temperature": 0.5, "stop": ["zz"]})
    assert resp.status == 200
    body = await resp.json()
    assert body["object"] == "chat.completion" and body["id"].startswith("chatcmpl-")
    assert body["choices"][0]["message"] == {"role": "assistant", "content": " w0 w1 w2 w3", "refusal": None}
    assert body["choices"][0]["finish_reason"] == "stop"
    call = h.engines.calls[0]
    assert call["max_tokens"] == 4 and call["kv"] is None
    assert body["usage"]["prompt_tokens"] == len(call["prompt"])
    assert body["usage"]["completion_tokens"] == 4
    assert body["usage"]["prompt_tokens_details"] == {"cached_tokens": 3}
    assert await h.metric("dynamo_lite_frontend_slo_requests_total", model="m", met="true") == 1
    assert await h.metric("dynamo_lite_frontend_router_decision_seconds_count", model="m") == 1
    assert await h.metric("dynamo_lite_frontend_routed_overlap_ratio_count", model="m") == 1
    assert await h.metric("dynamo_lite_frontend_cached_tokens_total", model="m") == 3


async def test_completion_streaming_with_usage(harness) -> None:
    h = await harness()
    h.add_worker("d0", script=Script(pieces(3)))
    resp = await h.client.post("/v1/completions", json={"model": "m", "prompt": [5, 6, 7], "max_tokens": 3,
                                                        "stream": True, "stream_options": {"include_usage": True}})
    events = await sse_events(resp)
    assert [e["choices"][0]["text"] for e in events[:-1]] == [" w0", " w1", " w2"]
    assert all(e["usage"] is None for e in events[:-1])
    assert events[-2]["choices"][0]["finish_reason"] == "length"
    assert events[-1]["choices"] == [] and events[-1]["usage"]["completion_tokens"] == 3
    assert events[-1]["usage"]["prompt_tokens"] == 3
    assert h.engines.calls[0]["prompt"] == [5, 6, 7]


async def test_chat_stream_starts_with_the_role(harness) -> None:
    h = await harness()
    h.add_worker("d0", script=Script(pieces(2)))
    events = await sse_events(await h.client.post(CHAT, json={"model": "m", "messages": HELLO, "stream": True}))
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert "".join(e["choices"][0]["delta"].get("content", "") for e in events) == " w0 w1"
    assert all(e["object"] == "chat.completion.chunk" for e in events)
    # max_tokens defaults to what the context leaves
    assert h.engines.calls[0]["max_tokens"] == 256 - len(h.engines.calls[0]["prompt"])


async def test_chat_stream_chunks_are_vllm_s(harness) -> None:
    """As vLLM streams a chat: the finish rides on the last token's chunk, a token that ends no character
    yet gets an empty chunk, echo comes as its own chunk after the role, and without a generation prompt the
    answer takes the last message's role (with return_token_ids, the prompt's ids in the first chunk)."""
    h = await harness()
    h.add_worker("d0", script=Script([Piece(" a", [7], None), Piece("", [8], None), Piece("é", [9], "length")]))
    events = await sse_events(await h.client.post(CHAT, json={"model": "m", "messages": HELLO, "stream": True}))
    assert [e["choices"][0]["delta"] for e in events] == [{"role": "assistant", "content": ""}, {"content": " a"},
                                                          {"content": ""}, {"content": "é"}]  # fmt: skip
    assert [e["choices"][0]["finish_reason"] for e in events] == [None, None, None, "length"]
    messages = [*HELLO, {"role": "narrator", "content": "Once"}]
    events = await sse_events(await h.client.post(CHAT, json={
        "model": "m", "messages": messages, "stream": True, "echo": True, "add_generation_prompt": False,
        "return_token_ids": True}))  # fmt: skip
    assert [e["choices"][0]["delta"] for e in events[:3]] == [{"role": "narrator", "content": ""},
                                                              {"content": "Once"}, {"content": " a"}]  # fmt: skip
    assert events[0]["prompt_token_ids"] == h.engines.calls[-1]["prompt"] and "prompt_token_ids" not in events[1]
    whole = await (await h.client.post(CHAT, json={"model": "m", "messages": messages, "echo": True,
                                                   "add_generation_prompt": False})).json()  # fmt: skip
    assert whole["choices"][0]["message"]["role"] == "narrator"
    assert whole["choices"][0]["message"]["content"] == "Once aé"


async def test_disaggregation_takes_each_branch(harness) -> None:
    h = await harness(disaggregation={"max_local_prefill_tokens": 8, "max_prefill_queue": 2})
    h.add_worker("d0", script=Script(pieces(2)))

    def long_prompt(i: int) -> list[int]:  # a new one each time: a prompt just sent counts as cached on d0
        return list(range(100 * i, 100 * i + 40))

    async def send(prompt: list[int]) -> None:
        resp = await h.client.post("/v1/completions", json={"model": "m", "prompt": prompt, "max_tokens": 2})
        assert resp.status == 200, await resp.text()

    await send(long_prompt(0))  # no prefill workers yet
    h.add_worker("p0", Role.PREFILL)
    await send([1, 2, 3])  # short
    await send(long_prompt(1))  # remote
    assert h.submitter.jobs == [long_prompt(1)]
    assert h.engines.calls[-1]["kv"] == {"do_remote_prefill": True}
    h.submitter.pending = 2
    await send(long_prompt(2))  # queue backed up
    assert await h.metric("dynamo_lite_frontend_prefill_queue_depth", model="m") == 2
    h.submitter.pending, h.submitter.fail = 0, True
    await send(long_prompt(3))  # prefill fails: local
    assert h.engines.calls[-1]["kv"] is None
    reasons = {r: await h.metric("dynamo_lite_frontend_disaggregation_decisions_total", reason=r)
               for r in ("no_prefill_workers", "short_prompt", "remote", "queue_full", "prefill_failed")}
    assert reasons == dict.fromkeys(reasons, 1.0)


async def test_aggregated_pool_is_routed_directly(harness) -> None:
    h = await harness(disaggregation={"max_local_prefill_tokens": 0})
    h.add_worker("a0", Role.AGGREGATED, model="agg", script=Script(pieces(1)))
    h.add_worker("p0", Role.PREFILL, model="agg")
    resp = await h.client.post("/v1/completions", json={"model": "agg", "prompt": list(range(50)), "max_tokens": 1})
    assert resp.status == 200
    assert h.submitter.jobs == []
    assert await h.metric("dynamo_lite_frontend_disaggregation_decisions_total", reason="aggregated_worker") == 1
    assert await h.metric("dynamo_lite_frontend_routing_decisions_total", model="agg", worker="a0", mode="ttft") == 1


async def test_blocks_a_prompt_just_sent_claims_are_counted_apart_from_those_kv_events_confirm(harness) -> None:
    """A prompt sent twice in a row: the second finds its blocks promised by the first (no KV event from the
    fake worker), and they are counted as promised, not as expected by the index, which an operator compares
    with the engines' cached tokens."""
    h = await harness()
    h.add_worker("a0", Role.AGGREGATED, model="agg", script=Script(pieces(1)))
    for _ in range(2):
        resp = await h.client.post("/v1/completions", json={"model": "agg", "prompt": list(range(40)), "max_tokens": 1})
        assert resp.status == 200
    assert await h.metric("dynamo_lite_frontend_routed_promised_tokens_total", model="agg") == 32  # 2 blocks of 16
    assert await h.metric("dynamo_lite_frontend_routed_overlap_tokens_total", model="agg") == 0
    assert await h.metric("dynamo_lite_frontend_routed_overlap_ratio_sum", model="agg") == 0


async def test_worker_failing_mid_stream_migrates_with_the_tokens_so_far(harness) -> None:
    h = await harness()
    h.add_worker("d0", script=Script(pieces(6), fail_after=2))
    h.add_worker("d1", script=Script(pieces(6), fail_after=2))
    resp = await h.client.post("/v1/completions", json={"model": "m", "prompt": [9, 9, 9], "max_tokens": 6,
                                                        "stream": True})
    events = await sse_events(resp)
    first, second = h.engines.calls
    assert first["worker"] != second["worker"]
    assert second["prompt"] == [9, 9, 9, 100, 101]  # the tokens generated so far appended
    assert second["max_tokens"] == 4
    assert "error" in events[-1]  # the second worker failed too, and no third exists
    assert events[-1]["error"]["type"] == "service_unavailable"
    assert [e["choices"][0]["text"] for e in events[:-1]] == [" w0", " w1", " w0", " w1"]
    assert await h.metric("dynamo_lite_frontend_migrations_total", reason="mid_stream") == 1


async def test_migration_completes_the_stream(harness) -> None:
    h = await harness(router={"mode": "round_robin"})  # d0 first
    h.add_worker("d0", script=Script(pieces(6), fail_after=2))
    h.add_worker("d1", script=Script(pieces(4)))
    resp = await h.client.post("/v1/completions", json={"model": "m", "prompt": [9, 9, 9], "max_tokens": 6,
                                                        "stream": True, "stream_options": {"include_usage": True}})
    events = await sse_events(resp)
    assert resp.status == 200
    assert [e["choices"][0]["finish_reason"] for e in events if e["choices"]][-1] == "length"
    assert events[-1]["usage"]["completion_tokens"] == 6


async def test_a_whole_answer_is_resent_whole_to_another_worker(harness) -> None:
    """A client that wants one JSON answer gets one engine answer; a worker that fails before it is done is
    replaced by the whole request again (nothing of it was passed on), not continued from its tokens."""
    h = await harness(router={"mode": "round_robin"})  # d0 first
    h.add_worker("d0", script=Script(pieces(6), fail_after=2))
    h.add_worker("d1", script=Script(pieces(6)))
    resp = await h.client.post("/v1/completions", json={"model": "m", "prompt": [9, 9, 9], "max_tokens": 6})
    body = await resp.json()
    assert resp.status == 200
    assert body["choices"][0]["text"] == " w0 w1 w2 w3 w4 w5"
    assert body["usage"]["completion_tokens"] == 6
    assert [(c["worker"], c["prompt"], c["max_tokens"], c["whole"]) for c in h.engines.calls] == [
        ("d0", [9, 9, 9], 6, True), ("d1", [9, 9, 9], 6, True)]
    assert await h.metric("dynamo_lite_frontend_migrations_total", reason="whole_request") == 1


async def test_migration_limit(harness) -> None:
    h = await harness(max_migrations=0)
    h.add_worker("d0", script=Script(pieces(4), fail_after=0))
    h.add_worker("d1", script=Script(pieces(4), fail_after=0))
    resp = await h.client.post("/v1/completions", json={"model": "m", "prompt": [1], "max_tokens": 4})
    assert resp.status == 502
    assert "moved 0 time(s)" in (await resp.json())["error"]["message"]


async def test_client_disconnect_closes_the_engine_request(harness) -> None:
    h = await harness()
    endless = pieces(10_000)
    h.add_worker("d0", script=Script(endless))

    async def slow_stream(*args, **kwargs):  # noqa: ANN002, ANN003
        async for piece in original(*args, **kwargs):
            await asyncio.sleep(0.01)
            yield piece

    original = h.engines.stream
    h.engines.stream = slow_stream  # type: ignore[method-assign]
    resp = await h.client.post("/v1/completions", json={"model": "m", "prompt": [1], "max_tokens": 200,
                                                        "stream": True})
    await resp.content.readline()
    resp.close()
    await eventually_async(lambda: h.engines.closed, timeout=2, interval=0.01, what="the engine request closed")
    assert h.engines.closed == ["d0"]

    async def none_in_flight() -> bool:
        return await h.metric("dynamo_lite_frontend_requests_in_flight", model="m") == 0

    await eventually_async(none_in_flight, timeout=2, interval=0.01, what="no request in flight")


async def test_a_failed_worker_is_avoided_until_it_reregisters(harness) -> None:
    h = await harness()
    h.add_worker("d0", script=Script(pieces(2), fail_after=0))  # refuses every request
    h.add_worker("d1", script=Script(pieces(2)))
    for _ in range(6):
        resp = await h.client.post("/v1/completions", json={"model": "m", "prompt": [1, 2], "max_tokens": 2})
        assert resp.status == 200
    assert [c["worker"] for c in h.engines.calls].count("d0") <= 1
    h.add_worker("d0", script=Script(pieces(2)))  # registers again (a new record): tried again
    assert "d0" in h.app[STATE].fleet.get("m").candidates()
    assert h.app[STATE].fleet.get("m").suspects == {}


async def test_the_ttft_prediction_is_judged_at_the_first_token(harness) -> None:
    """A streamed request prefilled where it was routed: how late its first token came against the ttft
    router's prediction is observed once, as measured / predicted. A whole answer has no first token."""
    h = await harness()
    gate = asyncio.Event()
    h.add_worker("d0", script=Script(pieces(3), gate=gate))
    fleet = h.app[STATE].fleet.get("m")
    predicted = fleet.router.route([5, 6, 7], fleet.candidates()).predicted_ttft_s
    assert predicted is not None and 0 < predicted < 0.3
    body = {"model": "m", "prompt": [5, 6, 7], "max_tokens": 3, "stream": True}
    sent = asyncio.create_task(h.client.post("/v1/completions", json=body))
    await asyncio.sleep(0.3)  # the worker holds its first token this long
    gate.set()
    await sse_events(await sent)
    name = "dynamo_lite_frontend_ttft_prediction_ratio"
    assert await h.metric(f"{name}_count", model="m") == 1
    assert 0.25 / predicted <= await h.metric(f"{name}_sum", model="m") <= 2.3 / predicted  # sent after the sleep began
    assert await h.metric(f"{name}_bucket", model="m", le="1.0") == 0  # later than predicted
    resp = await h.client.post("/v1/completions", json={**body, "stream": False})
    assert resp.status == 200
    assert await h.metric(f"{name}_count", model="m") == 1


async def test_the_session_id_goes_to_the_engine_as_vllm_takes_it(harness) -> None:
    """vLLM's session id (the body's, else the X-Session-ID header) goes with the engine request, whose KV events
    then carry it; on chat, completions and the Responses API."""
    h = await harness()
    h.add_worker("d0", script=Script(pieces(1, "stop")))
    sent = [(CHAT, {"messages": HELLO, "session_id": "body"}, {}),
            (CHAT, {"messages": HELLO}, {"X-Session-ID": "header"}),
            (CHAT, {"messages": HELLO, "session_id": "body"}, {"X-Session-ID": "header"}),
            ("/v1/completions", {"prompt": "hi"}, {"X-Session-ID": "header"}),
            ("/v1/responses", {"input": "hi", "session_id": "body"}, {}),
            (CHAT, {"messages": HELLO}, {})]  # fmt: skip
    for path, body, headers in sent:
        resp = await h.client.post(path, json={"model": "m", "max_tokens": 1, **body}, headers=headers)
        assert resp.status == 200, await resp.text()
    got = [call["sampling"].session_id for call in h.engines.calls]
    assert got == ["body", "header", "body", "header", "body", None]
    assert h.engines.calls[0]["sampling"].fields()["session_id"] == "body"
