"""The pooling endpoints' refusals, before any engine is asked (their answers, and a worker lost, are checked
against real vLLM engines in tests/e2e/test_vllm_pooling.py)."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.asyncio
POOLING = {"runner": "pooling"}  # model m; model agg generates text


async def test_a_text_endpoint_refuses_a_pooling_model_by_name(harness: Any) -> None:
    h = await harness(model=POOLING)
    for path, body in (("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
                       ("/v1/completions", {"prompt": "hi"})):  # fmt: skip
        resp = await h.client.post(path, json={"model": "m", **body})
        error = (await resp.json())["error"]
        assert (resp.status, error["param"]) == (400, "model") and "pooling model" in error["message"], path
    assert not h.engines.calls


@pytest.mark.parametrize(("body", "status", "says"), [
    ({"model": "agg", "input": "x"}, 400, "generates text"),
    ({"model": "nope", "input": "x"}, 404, "does not exist"),
    ({"model": 7, "input": "x"}, 404, "does not exist"),
    ({"input": "x"}, 503, "No worker of model `m`"),  # the one pooling model, none of whose workers is up
])  # fmt: skip
async def test_a_pooling_endpoint_names_what_it_cannot_serve(harness: Any, body: dict[str, Any], status: int,
                                                              says: str) -> None:  # fmt: skip
    h = await harness(model=POOLING)
    for path in ("/v1/embeddings", "/pooling", "/v1/rerank"):
        resp = await h.client.post(path, json=body)
        assert resp.status == status and says in (await resp.json())["error"]["message"], path
    assert await h.metric("dynamo_lite_frontend_requests_total", endpoint="pooling", status=str(status)) == 3


async def test_a_body_that_is_not_json_or_a_bad_request_id_is_a_400(harness: Any) -> None:
    h = await harness(model=POOLING)
    resp = await h.client.post("/v1/embeddings", data=b"{not json")
    assert resp.status == 400 and (await resp.json())["error"]["code"] == "invalid_json"
    resp = await h.client.post("/v1/embeddings", json={"input": "x"}, headers={"X-Request-Id": "a b"})
    assert resp.status == 400 and (await resp.json())["error"]["param"] == "request_id"


async def test_a_request_naming_no_model_needs_exactly_one_pooling_model(harness: Any) -> None:
    h = await harness()  # no pooling model at all
    resp = await h.client.post("/v1/embeddings", json={"input": "x"})
    assert resp.status == 400 and "0 pooling models" in (await resp.json())["error"]["message"]


async def test_the_pooling_endpoints_need_a_key_when_keys_are_set(harness: Any) -> None:
    h = await harness(api_keys=frozenset({"k"}), model=POOLING)
    for path in ("/v1/embeddings", "/pooling", "/score", "/rerank", "/v2/embed"):
        assert (await h.client.post(path, json={"input": "x"})).status == 401, path
    resp = await h.client.post("/pooling", json={"model": "agg"}, headers={"Authorization": "Bearer k"})
    assert resp.status == 400  # past the key: refused for what it asks


async def test_sagemaker_s_invocations_takes_a_pooling_model_s_body(harness: Any) -> None:
    """A body naming a pooling model goes to the pooling handler (here: no worker of it is up, a 503); one naming
    a text model without `messages` or `prompt` is still the 400 vLLM gives."""
    h = await harness(model=POOLING)
    resp = await h.client.post("/invocations", json={"model": "m", "input": "x"})
    assert resp.status == 503 and "No worker of model `m`" in (await resp.json())["error"]["message"]
    assert (await h.client.post("/invocations", json={"model": "agg", "input": "x"})).status == 400

