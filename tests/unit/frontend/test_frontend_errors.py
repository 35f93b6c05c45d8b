"""Every client error comes back OpenAI-shaped with the right status and a message that says what is wrong."""

from __future__ import annotations

import asyncio
import json

import pytest

from dynamo_lite.frontend.app import STATE
from dynamo_lite.protocol import Role
from tests.unit.frontend.conftest import Script, pieces
from tests.waiting import eventually_async

CHAT = "/v1/chat/completions"
HELLO = [{"role": "user", "content": "hello"}]


def assert_error(body: dict, status_type: str, *, param: str | None = None, contains: str = "") -> None:
    assert set(body) == {"error"}
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["type"] == status_type
    assert err["param"] == param
    assert contains in err["message"], err["message"]


@pytest.mark.parametrize(
    ("body", "param", "contains"),
    [
        (b"{not json", None, "could not parse the JSON body"),
        (b"[1, 2]", None, "must be a JSON object"),
        (json.dumps({"model": "m"}).encode(), "messages", "Missing required parameter: 'messages'"),
        (json.dumps({"model": "m", "messages": []}).encode(), "messages", "at least 1 item"),
        (json.dumps({"model": "m", "messages": "hi"}).encode(), "messages", "valid list"),
        (json.dumps({"model": "m", "messages": [{"role": "user", "content": 5}]}).encode(), "messages[0].content",
         "valid string"),
        (json.dumps({"model": "m", "messages": [{"role": 5, "content": "x"}]}).encode(), "messages[0].role",
         "valid string"),
        (json.dumps({"model": "m", "messages": HELLO, "top_logprobs": 2}).encode(), "top_logprobs",
         "`logprobs` must be set to true"),
        (json.dumps({"model": "m", "messages": HELLO, "stream_options": {"include_usage": True}}).encode(),
         "stream_options", "only be defined when `stream=True`"),
        (json.dumps({"model": "m", "messages": HELLO, "max_tokens": 0}).encode(), "max_tokens", "greater than or equal to 1"),
        (json.dumps({"model": "m", "messages": HELLO, "max_completion_tokens": -3}).encode(), "max_completion_tokens",
         "greater than or equal to 1"),
        (json.dumps({"model": "m", "messages": HELLO, "temperature": "hot"}).encode(), "temperature", "valid number"),
        (json.dumps({"model": "m", "messages": HELLO, "temperature": 3}).encode(), "temperature", "less than or equal to 2"),
        (json.dumps({"model": "m", "messages": HELLO, "n": 0}).encode(), "n", "greater than or equal to 1"),
        (json.dumps({"model": "m", "messages": HELLO, "stream": "yes"}).encode(), "stream", "valid boolean"),
    ],
)
async def test_bad_chat_bodies_are_400(harness, body: bytes, param: str | None, contains: str) -> None:
    h = await harness()
    resp = await h.client.post(CHAT, data=body, headers={"Content-Type": "application/json"})
    assert resp.status == 400
    assert_error(await resp.json(), "invalid_request_error", param=param, contains=contains)


async def test_what_vllm_accepts_is_served(harness) -> None:
    """vLLM's defaults where a body leaves something out: the first model served, any role (the chat template's
    to render), top_logprobs 0 without logprobs, empty stream options without a stream."""
    h = await harness()
    h.add_worker("d0", script=Script(pieces(2)))
    for body in ({"messages": HELLO}, {"model": "m", "messages": [{"role": "wizard", "content": "x"}]},
                 {"model": "m", "messages": HELLO, "top_logprobs": 0}, {"model": "m", "messages": HELLO,
                                                                        "stream_options": {}}):  # fmt: skip
        resp = await h.client.post(CHAT, json=body)
        assert resp.status == 200, (body, await resp.text())
        assert (await resp.json())["model"] == "m"
    resp = await h.client.post("/v1/completions", json={"prompt": "hello"})
    assert resp.status == 200 and (await resp.json())["model"] == "m"
    resp = await h.client.post("/v1/completions", json={"model": "m", "prompt": "x", "stream_options": {
        "include_usage": True}})  # fmt: skip
    assert resp.status == 400
    assert_error(await resp.json(), "invalid_request_error", param="stream_options", contains="stream=True")


async def test_bad_completion_prompts_are_400(harness) -> None:
    h = await harness()
    for prompt, contains in [([], "expected a non-empty string"), (5, "expected a non-empty string"),
                             ([-1, 2], "token ids must be >= 0")]:
        resp = await h.client.post("/v1/completions", json={"model": "m", "prompt": prompt})
        assert resp.status == 400, prompt
        assert_error(await resp.json(), "invalid_request_error", param="prompt", contains=contains)


async def test_unknown_model_is_404(harness) -> None:
    h = await harness()
    resp = await h.client.post(CHAT, json={"model": "nope", "messages": HELLO})
    assert resp.status == 404
    assert_error(await resp.json(), "not_found_error", param="model", contains="The model `nope` does not exist")


async def test_prompt_longer_than_the_context_is_400(harness) -> None:
    h = await harness()
    long = [{"role": "user", "content": "hello world " * 300}]
    resp = await h.client.post(CHAT, json={"model": "m", "messages": long})
    assert resp.status == 400
    body = await resp.json()
    assert_error(body, "invalid_request_error", param="messages", contains="maximum context length is 256 tokens")
    assert body["error"]["code"] == "context_length_exceeded"
    # a long text is tokenized off the event loop, with the same outcome
    resp = await h.client.post("/v1/completions", json={"model": "m", "prompt": "word " * 4000})
    assert resp.status == 400 and "maximum context length" in (await resp.json())["error"]["message"]
    # more output than the context holds at all
    resp = await h.client.post("/v1/completions", json={"model": "m", "prompt": [1] * 20, "max_tokens": 257})
    assert resp.status == 400
    assert_error(await resp.json(), "invalid_request_error", param="max_tokens",
                 contains="max_tokens=257 cannot be greater than max_model_len=256")


async def test_max_tokens_past_what_the_context_leaves_is_cut_to_it(harness) -> None:
    """As vLLM 0.32: the prompt fits, prompt + max_tokens does not, and the answer is as long as the context
    allows."""
    h = await harness()
    h.add_worker("d0", script=Script(pieces(3)))
    resp = await h.client.post("/v1/completions", json={"model": "m", "prompt": [1] * 200, "max_tokens": 100})
    assert resp.status == 200
    assert h.engines.calls[-1]["max_tokens"] == 56


async def test_body_over_the_limit_is_413(harness) -> None:
    h = await harness(max_body_bytes=2048)  # (the harness default is 64 KiB)
    resp = await h.client.post(CHAT, json={"model": "m", "messages": [{"role": "user", "content": "x" * 5000}]})
    assert resp.status == 413
    assert_error(await resp.json(), "invalid_request_error", contains="limit is 2048 bytes")


async def test_admission_queues_then_refuses_with_429_and_retry_after(harness) -> None:
    h = await harness(max_concurrent_requests=2, max_queued_requests=1, queue_timeout_s=30)
    gate = asyncio.Event()
    h.add_worker("d0", script=Script(pieces(3), gate=gate))
    admission = h.app[STATE].admission
    held = [asyncio.create_task(h.client.post(CHAT, json={"model": "m", "messages": HELLO})) for _ in range(3)]
    await eventually_async(lambda: admission.running >= 2 and admission.waiting >= 1, timeout=5, interval=0.01,
                           what="two requests served (held at the gate), one queued")
    assert await h.metric("dynamo_lite_frontend_requests_queued") == 1
    resp = await h.client.post(CHAT, json={"model": "m", "messages": HELLO})
    assert resp.status == 429
    assert resp.headers["Retry-After"] == "1"
    assert_error(await resp.json(), "rate_limit_exceeded", contains="2 running and 1 queued")
    gate.set()  # the queued request gets a slot as soon as one is free: all three complete
    assert [r.status for r in await asyncio.gather(*held)] == [200, 200, 200]
    assert await h.metric("dynamo_lite_frontend_admission_rejections_total") == 1


async def test_a_request_queued_past_the_timeout_is_429(harness) -> None:
    h = await harness(max_concurrent_requests=1, max_queued_requests=4, queue_timeout_s=0.2)
    gate = asyncio.Event()
    h.add_worker("d0", script=Script(pieces(3), gate=gate))
    first = asyncio.create_task(h.client.post(CHAT, json={"model": "m", "messages": HELLO}))
    await eventually_async(lambda: h.app[STATE].admission.running >= 1, timeout=5, interval=0.01,
                           what="the first request served (held at the gate)")
    resp = await h.client.post(CHAT, json={"model": "m", "messages": HELLO})
    assert resp.status == 429
    assert_error(await resp.json(), "rate_limit_exceeded", contains="no slot free within 0.2 s")
    gate.set()
    assert (await first).status == 200


async def test_max_tokens_above_the_service_limit_is_400(harness) -> None:
    h = await harness(max_tokens_limit=8)
    h.add_worker("d0", script=Script(pieces(3)))
    resp = await h.client.post(CHAT, json={"model": "m", "messages": HELLO, "max_tokens": 9})
    assert resp.status == 400
    assert_error(await resp.json(), "invalid_request_error", param="max_tokens", contains="at most 8")
    assert (await h.client.post(CHAT, json={"model": "m", "messages": HELLO})).status == 200
    assert h.engines.calls[-1]["max_tokens"] == 8  # no max_tokens: the service limit, not the context


@pytest.mark.parametrize(("header", "message"), [
    (None, "You didn't provide an API key"),
    ("Bearer wrong", "Incorrect API key provided"),
    ("Basic c2VjcmV0", "You didn't provide an API key"),
    ("Bearer ", "You didn't provide an API key"),
])
async def test_api_keys_401_without_the_right_key(harness, header: str | None, message: str) -> None:
    h = await harness(api_keys=frozenset({"secret-1", "secret-2"}))
    h.add_worker("d0", script=Script(pieces(3)))
    headers = {} if header is None else {"Authorization": header}
    for path, body in ((CHAT, {"model": "m", "messages": HELLO}), ("/v1/completions", {"model": "m", "prompt": "x"})):
        resp = await h.client.post(path, json=body, headers=headers)
        assert resp.status == 401
        assert_error(await resp.json(), "invalid_request_error", contains=message)
    assert (await h.client.get("/v1/models", headers=headers)).status == 401
    assert (await h.client.get("/health")).status == 200  # probes and scrapes stay open, as with vLLM's --api-key
    assert (await h.client.get("/metrics")).status == 200


async def test_api_keys_any_configured_key_is_accepted(harness) -> None:
    h = await harness(api_keys=frozenset({"secret-1", "secret-2"}))
    h.add_worker("d0", script=Script(pieces(3)))
    for key in ("secret-1", "secret-2"):
        resp = await h.client.post(CHAT, json={"model": "m", "messages": HELLO},
                                   headers={"Authorization": f"Bearer {key}"})
        assert resp.status == 200, await resp.text()
    resp = await h.client.get("/v1/models", headers={"Authorization": "Bearer secret-2"})
    assert resp.status == 200


async def test_no_worker_is_503(harness) -> None:
    h = await harness()
    h.add_worker("p0", Role.PREFILL)  # prefill workers alone cannot serve
    for stream in (False, True):
        resp = await h.client.post(CHAT, json={"model": "m", "messages": HELLO, "stream": stream})
        assert resp.status == 503
        assert_error(await resp.json(), "service_unavailable", contains="No worker is available for model `m`")


async def test_a_worker_that_times_out_is_left_for_another(harness) -> None:
    h = await harness()
    h.add_worker("d0", script=Script(pieces(3), timeout=True))
    h.add_worker("d1", script=Script(pieces(3)))
    for _ in range(2):  # whichever the router picks first, the request ends on d1
        resp = await h.client.post(CHAT, json={"model": "m", "messages": HELLO})
        assert resp.status == 200, await resp.text()
    assert h.engines.calls[-1]["worker"] == "d1"


async def test_upstream_timeout_is_504(harness) -> None:
    h = await harness()
    h.add_worker("d0", script=Script(pieces(3), timeout=True))
    resp = await h.client.post(CHAT, json={"model": "m", "messages": HELLO})
    assert resp.status == 504
    assert_error(await resp.json(), "timeout_error", contains="did not answer in time")


async def test_unknown_route_and_method_are_openai_shaped(harness) -> None:
    h = await harness()
    resp = await h.client.get("/v1/nothing")
    assert resp.status == 404
    assert_error(await resp.json(), "not_found_error", contains="Not Found")
    resp = await h.client.get(CHAT)
    assert resp.status == 405
    assert_error(await resp.json(), "invalid_request_error", contains="Method Not Allowed")


async def test_models_health_and_metrics(harness) -> None:
    h = await harness()
    h.add_worker("d0")
    models = await (await h.client.get("/v1/models")).json()
    assert [m["id"] for m in models["data"]] == ["m", "agg"]
    health = await (await h.client.get("/health")).json()
    assert health["status"] == "ok" and health["models"]["m"]["decode"] == 1
    resp = await h.client.get("/metrics")
    text = await resp.text()
    assert 'dynamo_lite_frontend_workers{model="m",role="decode"} 1.0' in text
    assert "dynamo_lite_frontend_requests_in_flight" in text


async def test_a_slow_body_is_408_and_holds_no_slot(harness) -> None:
    h = await harness(max_concurrent_requests=1, max_queued_requests=0, body_timeout_s=1.0)
    h.add_worker("d0", script=Script(pieces(3)))
    server = h.client.server
    reader, writer = await asyncio.open_connection(server.host, server.port)
    writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 100\r\n\r\n{")  # then nothing more
    await writer.drain()
    await asyncio.sleep(0.2)  # time for the server to take the stalled request up: it must hold no slot
    # the only slot is free for a client that sends its body
    resp = await h.client.post(CHAT, json={"model": "m", "messages": HELLO})
    assert resp.status == 200, await resp.text()
    head = await asyncio.wait_for(reader.read(4096), 5)
    assert head.startswith(b"HTTP/1.1 408"), head
    assert b"not received within 1 s" in head
    writer.close()


async def test_anthropic_clients_send_their_key_as_x_api_key_and_get_errors_in_their_shape(harness) -> None:
    h = await harness(api_keys=frozenset({"secret-1"}))
    h.add_worker("d0", script=Script(pieces(3)))
    body = {"model": "m", "max_tokens": 4, "messages": HELLO}
    resp = await h.client.post("/v1/messages", json=body, headers={"x-api-key": "secret-1"})
    assert resp.status == 200, await resp.text()
    assert (await resp.json())["type"] == "message"
    resp = await h.client.post("/v1/messages", json=body, headers={"x-api-key": "wrong"})
    assert resp.status == 401
    assert await resp.json() == {"type": "error", "error": {"type": "authentication_error",
                                                             "message": "Incorrect API key provided."}}
    resp = await h.client.post(CHAT, json={"model": "m", "messages": HELLO}, headers={"x-api-key": "secret-1"})
    assert resp.status == 401  # only Anthropic's API takes that header, as only its clients send it
    resp = await h.client.post("/v1/messages", json={**body, "max_tokens": "four"}, headers={"x-api-key": "secret-1"})
    assert resp.status == 400 and (await resp.json())["error"]["type"] == "invalid_request_error"


async def test_sagemaker_s_invocations_and_ping(harness) -> None:
    """SageMaker's endpoints, as vLLM serves them: /invocations takes a chat request (a body with `messages`) or a
    completion (with `prompt`), and refuses any other with a 400; /ping answers as /health, by GET or POST.
    With API keys, /invocations needs one (vLLM leaves it open) and /ping stays open."""
    h = await harness()
    h.add_worker("d0", script=Script(pieces(3)))
    chat = await h.client.post("/invocations", json={"model": "m", "messages": HELLO, "max_tokens": 3})
    assert chat.status == 200 and (await chat.json())["object"] == "chat.completion"
    h.add_worker("d0", script=Script(pieces(3)))
    completion = await h.client.post("/invocations", json={"model": "m", "prompt": "x", "max_tokens": 3})
    assert completion.status == 200 and (await completion.json())["object"] == "text_completion"
    neither = await h.client.post("/invocations", json={"model": "m", "input": "x"})
    assert neither.status == 400
    assert_error(await neither.json(), "invalid_request_error", param="messages",
                 contains="Cannot find suitable handler")  # fmt: skip
    assert (await h.client.post("/invocations", data=b"{")).status == 400
    for method in (h.client.get, h.client.post):
        assert (await method("/ping")).status == 200
    keyed = await harness(api_keys=frozenset({"secret"}))
    assert (await keyed.client.post("/invocations", json={"model": "m", "prompt": "x"})).status == 401
    assert (await keyed.client.get("/ping")).status == 200


async def test_batch_chat_answers_each_conversation(harness) -> None:
    """vLLM's /v1/chat/completions/batch: one choice per conversation, in order, with the usage of all (no
    details); `stream` and `tools` are ignored, as vLLM's batch request has neither; its limits are 400s."""
    h = await harness()
    h.add_worker("d0", script=Script(pieces(3, "stop")))
    body = {"model": "m", "messages": [HELLO, [{"role": "user", "content": "bye now, see you later"}]], "max_tokens": 3,
            "stream": True, "tools": [{"type": "function", "function": {"name": "f"}}]}  # fmt: skip
    resp = await h.client.post("/v1/chat/completions/batch", json=body)
    assert resp.status == 200, await resp.text()
    answer = await resp.json()
    assert answer["object"] == "chat.completion" and [c["index"] for c in answer["choices"]] == [0, 1]
    assert all(c["message"]["content"] == " w0 w1 w2" and c["finish_reason"] == "stop" for c in answer["choices"])
    assert answer["usage"]["completion_tokens"] == 6 and "prompt_tokens_details" not in answer["usage"]
    prompts = [len(c["prompt"]) for c in h.engines.calls[-2:]]
    assert answer["usage"]["prompt_tokens"] == sum(prompts) and prompts[0] != prompts[1]
    for fields, param in (({"n": 2}, "n"), ({"use_beam_search": True}, "use_beam_search"),
                          ({"tool_choice": "auto"}, "tool_choice"), ({"messages": [[]]}, "messages"),
                          ({"messages": HELLO}, "messages")):  # fmt: skip
        refused = await h.client.post("/v1/chat/completions/batch", json={**body, **fields})
        assert refused.status == 400
        assert_error(await refused.json(), "invalid_request_error", param=param)
