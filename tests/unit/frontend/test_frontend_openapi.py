"""The OpenAPI document: valid OpenAPI 3.1, every reference resolves, request schemas agree with the
pydantic models that validate bodies, response schemas with what sse.py produces, served as JSON."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from dynamo_lite.frontend.choice import ChatChoice, ChatOptions, CompletionChoice
from dynamo_lite.frontend.errors import ApiError, error_body
from dynamo_lite.frontend.openapi import (
    ChatCompletion,
    ChatCompletionChunk,
    Completion,
    CompletionChunk,
    ErrorResponse,
    build_document,
)
from dynamo_lite.frontend.request import Outcome, Piece
from dynamo_lite.frontend.responses import ResponsesRequest
from dynamo_lite.frontend.schemas import (
    ChatCompletionRequest,
    CompletionRequest,
    parse_body,
)
from dynamo_lite.frontend.sse import Shape, usage_body
from tests.unit.frontend.conftest import Harness

MODELS = ["m", "agg"]
DOC = build_document(MODELS)
GENERATE = {"/v1/chat/completions": ChatCompletionRequest, "/v1/completions": CompletionRequest,
            "/v1/responses": ResponsesRequest}


def refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        if isinstance(node.get("$ref"), str):
            yield node["$ref"]
        for value in node.values():
            yield from refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from refs(value)


def validator(name: str) -> Draft202012Validator:
    """A JSON Schema validator for components/schemas/<name>, with the document's references."""
    registry = Registry().with_resource("urn:doc", Resource(contents=DOC, specification=DRAFT202012))
    return Draft202012Validator({"$ref": f"urn:doc#/components/schemas/{name}"}, registry=registry)


def test_paths_methods_and_statuses() -> None:
    assert DOC["openapi"].startswith("3.1")
    methods = {path: set(item) for path, item in DOC["paths"].items()}
    assert methods == {"/v1/chat/completions": {"post"}, "/v1/completions": {"post"}, "/v1/responses": {"post"},
                       "/v1/messages": {"post"}, "/v1/messages/count_tokens": {"post"}, "/v1/models": {"get"},
                       "/v1/models/{model_id}": {"get"}, "/tokenize": {"post"}, "/detokenize": {"post"},
                       "/version": {"get"}, "/health": {"get"}}  # fmt: skip
    for path in GENERATE:
        op = DOC["paths"][path]["post"]
        assert op["requestBody"]["required"] and set(op["requestBody"]["content"]) == {"application/json"}
        assert {"200", "400", "401", "404", "413", "429", "503"} <= set(op["responses"])
        assert set(op["responses"]["200"]["content"]) == {"application/json", "text/event-stream"}
        assert all(op["responses"][s]["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/ErrorResponse"} for s in op["responses"] if s != "200")
        assert "security" not in op
    json.dumps(DOC)  # plain JSON, nothing pydantic-specific left


def test_every_reference_resolves() -> None:
    found = list(refs(DOC))
    assert len(found) > 20
    for ref in found:
        assert ref.startswith("#/components/schemas/"), ref
        assert ref.removeprefix("#/components/schemas/") in DOC["components"]["schemas"], ref


def test_request_schemas_are_closed_and_name_the_served_models() -> None:
    schemas = DOC["components"]["schemas"]
    for name in ("StreamOptions", "StructuredOutputs"):  # open: the top-level bodies (policy.py)
        assert schemas[name]["additionalProperties"] is False
    for name in ("ChatCompletionRequest", "CompletionRequest"):
        assert schemas[name]["properties"]["model"]["enum"] == [*MODELS, None]  # None: the first served, as vLLM
    assert schemas["ChatCompletionRequest"]["required"] == ["messages"]
    assert "enum" not in build_document([])["components"]["schemas"]["CompletionRequest"]["properties"]["model"]


def test_bearer_auth_marks_every_v1_operation() -> None:
    doc = build_document(MODELS, bearer_auth=True)
    assert doc["components"]["securitySchemes"] == {"bearer": {"type": "http", "scheme": "bearer"}}
    for path, item in doc["paths"].items():
        for op in item.values():
            assert ("security" in op) == path.startswith("/v1/")
            assert ("401" in op["responses"]) == path.startswith("/v1/")


def test_schemathesis_loads_it() -> None:
    schema = schemathesis.openapi.from_dict(DOC)
    schema.validate()  # against the OpenAPI 3.1 meta-schema
    labels = [result.ok().label for result in schema.get_all_operations()]
    assert labels == ["POST /v1/chat/completions", "POST /v1/completions", "POST /v1/responses", "POST /v1/messages",
                      "POST /v1/messages/count_tokens", "GET /v1/models", "GET /v1/models/{model_id}", "POST /tokenize",
                      "POST /detokenize", "GET /version", "GET /health"]


@pytest.mark.parametrize(
    ("path", "body", "valid"),
    [("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "hi"}]}, True),
     ("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "a"}],
                                                            "refusal": None}], "n": 1, "logprobs": False}, True),
     ("/v1/chat/completions", {"model": "m", "messages": []}, False),
     ("/v1/chat/completions", {"model": "m", "messages": [{"role": "user"}], "max_token": 5}, True),  # vLLM's policy
     ("/v1/chat/completions", {"model": "m", "messages": [{"role": "user"}], "n": 3, "logprobs": True,
                               "top_logprobs": 2, "tools": [{"type": "function", "function": {"name": "f"}}]}, True),
     ("/v1/chat/completions", {"model": "m", "messages": [{"role": "user"}], "n": True}, False),
     ("/v1/chat/completions", {"model": "m", "messages": [{"role": "user"}], "logprobs": 0}, False),
     ("/v1/chat/completions", {"model": "m", "messages": [{"role": "user"}], "seed": 2**63}, False),
     ("/v1/completions", {"model": "m", "prompt": [[1, 2]]}, True),
     ("/v1/completions", {"model": "m", "prompt": [[]]}, False),
     ("/v1/completions", {"model": "m", "prompt": [1, 2**31]}, False),
     ("/v1/completions", {"model": "m", "prompt": [-1]}, False),
     ("/v1/completions", {"model": "m", "prompt": "x", "echo": 0}, False),
     ("/v1/completions", {"model": "m", "prompt": "x", "stream_options": {"include_usage": 1}}, False)],
)  # fmt: skip
def test_schema_and_model_agree(path: str, body: dict, valid: bool) -> None:
    name = GENERATE[path].__name__
    assert validator(name).is_valid(body) is valid
    try:
        parse_body(json.dumps(body).encode(), GENERATE[path])
        accepted = True
    except ApiError as e:
        assert e.status == 400
        accepted = False
    assert accepted is valid


SCHEMA = schemathesis.openapi.from_dict(DOC)


@pytest.mark.parametrize("path", GENERATE)
@pytest.mark.parametrize("mode", [schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE])
def test_generated_bodies_are_judged_alike(path: str, mode: schemathesis.GenerationMode) -> None:
    """What the document calls valid, the pydantic model accepts; what it calls invalid is a 400
    (or a model name outside the enum, which the handler answers with 404)."""
    strategy = SCHEMA[path]["POST"].as_strategy(generation_mode=mode)

    @given(strategy)
    @settings(max_examples=30, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    def check(case: schemathesis.Case) -> None:
        raw = case.body if isinstance(case.body, bytes) else json.dumps(case.body).encode()
        if mode == schemathesis.GenerationMode.POSITIVE:
            parse_body(raw, GENERATE[path])
        elif isinstance(case.body, dict) and validator(GENERATE[path].__name__).is_valid(case.body):
            return  # schemathesis could not make this one invalid (it says so in case.meta)
        else:
            try:
                body = parse_body(raw, GENERATE[path])
            except ApiError as e:
                assert e.status == 400
            else:
                # Accepted: a model outside the enum (the handler's 404), or a value pydantic's lax mode
                # coerces as vLLM's own models do (`"background": 0.0` is False there too): then what the
                # model made of it is what the document calls valid.
                coerced = body.model_dump(mode="json", exclude_unset=True)
                assert body.model not in MODELS or validator(GENERATE[path].__name__).is_valid(coerced), case.body

    check()


def _events(frames: list[bytes]) -> list[dict]:
    return [json.loads(f.removeprefix(b"data: ")) for f in frames]


def test_responses_match_their_schemas() -> None:
    usage = usage_body(5, 2, 1)
    outcome = Outcome(2, 1, "stop", (), 0)
    chat = Shape("chatcmpl-1", "m", 1, chat=True, include_usage=True)
    choice = ChatChoice(0, ChatOptions(top_logprobs=None), str)
    frames = [chat.role_chunk(0), chat.frame(choice.delta(Piece("a", [1], None))), chat.frame(choice.last(outcome)),
              chat.usage_chunk(usage), chat.frame({"index": 0, "delta": {}, "logprobs": None, "finish_reason": None},
                                                  usage_body(5, 1))]  # fmt: skip
    ChatCompletion.model_validate(chat.full([ChatChoice(0, ChatOptions(), str).message(outcome)], usage))
    for chunk in _events(frames):
        ChatCompletionChunk.model_validate(chunk)
        assert validator("ChatCompletionChunk").is_valid(chunk)
    completion = Shape("cmpl-1", "m", 1, chat=False)
    choice2 = CompletionChoice(0, None, [], None, False)
    Completion.model_validate(completion.full([choice2.whole(outcome)], usage))
    for chunk in _events([completion.frame(choice2.delta(Piece("a", [1], "stop"))), completion.usage_chunk(usage)]):
        CompletionChunk.model_validate(chunk)
        assert validator("CompletionChunk").is_valid(chunk)
    assert validator("ErrorResponse").is_valid(error_body(400, "bad", "x", "invalid_value"))
    assert validator("ErrorResponse").is_valid(error_body(503, "none"))
    ErrorResponse.model_validate(error_body(413, "big"))


def test_strict_mode_refuses_unknown_keys_in_the_document_too() -> None:
    strict = build_document(MODELS, strict=True)["components"]["schemas"]
    assert strict["ChatCompletionRequest"]["additionalProperties"] is False
    assert "additionalProperties" not in DOC["components"]["schemas"]["ChatCompletionRequest"]
    with pytest.raises(ApiError, match="Unrecognized request argument supplied: max_token"):
        parse_body(b'{"model": "m", "prompt": "x", "max_token": 5}', CompletionRequest, strict=True)


async def test_served_at_openapi_json(harness: Callable[..., Awaitable[Harness]]) -> None:
    h = await harness()
    resp = await h.client.get("/openapi.json")
    assert resp.status == 200 and resp.content_type == "application/json"
    assert await resp.json() == build_document(["m", "agg"])
