"""The frontend's OpenAPI 3.1 document (GET /openapi.json), built from the request models.

Request bodies are the pydantic models of `schemas.py` as pydantic renders them: JSON
Schema 2020-12, which OpenAPI 3.1 takes as it is, so the document carries the models'
own bounds, unions and `additionalProperties: false`. `model` is narrowed to the names
this frontend serves (any other is a 404), so that a client or fuzzer that follows the
document reaches the engines. Response bodies are described by the small models below;
they are open (clients ignore keys they do not know), their listed keys are required.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal

import msgspec
from aiohttp import web
from pydantic import BaseModel, ConfigDict
from pydantic.json_schema import models_json_schema

from dynamo_lite.frontend.anthropic import CountTokensRequest, MessagesRequest
from dynamo_lite.frontend.extras import DetokenizeRequest, TokenizeRequest
from dynamo_lite.frontend.responses import ResponsesRequest
from dynamo_lite.frontend.schemas import ChatCompletionRequest, CompletionRequest

OPENAPI_VERSION = "3.1.0"
_REF = "#/components/schemas/{model}"


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class ErrorDetail(_Open):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorResponse(_Open):
    """Every error of the API (errors.py)."""

    error: ErrorDetail


class PromptTokensDetails(_Open):
    cached_tokens: int


class Usage(_Open):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails | None = None  # in final usage; not in continuous usage stats


class ToolCallFunction(_Open):
    name: str
    arguments: str


class ToolCall(_Open):
    id: str
    type: Literal["function"]
    function: ToolCallFunction


class ChatLogprobs(_Open):
    content: list[dict[str, Any]]  # {token, logprob, bytes, top_logprobs}


class CompletionLogprobs(_Open):
    tokens: list[str]
    token_logprobs: list[float | None]
    top_logprobs: list[dict[str, float] | None]
    text_offset: list[int]


class AssistantMessage(_Open):
    role: str  # assistant; without add_generation_prompt, the last message's
    content: str | None  # None when the answer is tool calls only
    refusal: None
    tool_calls: list[ToolCall] | None = None
    reasoning: str | None = None  # with a reasoning parser (also as reasoning_content)


class ChatChoice(_Open):
    index: int
    message: AssistantMessage
    logprobs: ChatLogprobs | None
    finish_reason: str | None


class ChatCompletion(_Open):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage


class CompletionChoice(_Open):
    index: int
    text: str
    logprobs: CompletionLogprobs | None
    finish_reason: str | None


class Completion(_Open):
    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage


class ToolCallDelta(_Open):
    index: int


class ChatDelta(_Open):
    role: str | None = None  # in the first chunk (as the message's)
    content: str | None = None
    tool_calls: list[ToolCallDelta] | None = None
    reasoning: str | None = None


class ChatChunkChoice(_Open):
    index: int
    delta: ChatDelta
    logprobs: ChatLogprobs | None
    finish_reason: str | None


class ChatCompletionChunk(_Open):
    id: str
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    choices: list[ChatChunkChoice]  # empty in the final usage chunk
    usage: Usage | None = None  # with stream_options.include_usage: null, and set in the final chunk


class CompletionChunk(_Open):
    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None


class ResponseUsage(_Open):
    input_tokens: int
    output_tokens: int
    total_tokens: int


class ResponseObject(_Open):
    """A Responses API answer (responses_out.py); `output` holds message, reasoning and function_call items."""

    id: str
    object: Literal["response"]
    created_at: int
    model: str
    status: Literal["completed", "incomplete", "in_progress"]
    output: list[dict[str, Any]]
    usage: ResponseUsage | None


class ResponseEvent(_Open):
    """One event of a Responses API stream (its `type` is also the SSE `event:` line)."""

    type: str
    sequence_number: int


class AnthropicErrorDetail(_Open):
    type: str
    message: str


class AnthropicErrorResponse(_Open):
    """Every error of /v1/messages and /v1/messages/count_tokens, in Anthropic's shape."""

    type: Literal["error"]
    error: AnthropicErrorDetail


class AnthropicMessage(_Open):
    """An Anthropic Messages answer (anthropic.py); `content` holds text, thinking and tool_use blocks."""

    id: str
    type: Literal["message"]
    role: Literal["assistant"]
    content: list[dict[str, Any]]
    model: str
    stop_reason: Literal["end_turn", "max_tokens", "stop_sequence", "tool_use"] | None
    usage: dict[str, int]


class AnthropicEvent(_Open):
    """One event of an Anthropic Messages stream (its `type` is also the SSE `event:` line)."""

    type: str


class TokenCount(_Open):
    input_tokens: int


class ModelCard(_Open):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str
    max_model_len: int


class Tokens(_Open):
    count: int
    max_model_len: int
    tokens: list[int]
    token_strs: list[str] | None


class Detokenized(_Open):
    prompt: str


class Version(_Open):
    version: str


class ModelList(_Open):
    object: Literal["list"]
    data: list[ModelCard]


class Health(_Open):
    status: Literal["ok", "starting"]
    models: dict[str, dict[str, int]]  # model -> role -> workers


_REQUESTS: tuple[type[BaseModel], ...] = (ChatCompletionRequest, CompletionRequest, ResponsesRequest, MessagesRequest,
                                          CountTokensRequest, TokenizeRequest, DetokenizeRequest)  # fmt: skip
_GENERATION = (ChatCompletionRequest, CompletionRequest, ResponsesRequest, MessagesRequest, CountTokensRequest)
_RESPONSES: tuple[type[BaseModel], ...] = (ErrorResponse, ChatCompletion, ChatCompletionChunk, Completion,
                                           CompletionChunk, ResponseObject, ResponseEvent, AnthropicErrorResponse,
                                           AnthropicMessage, AnthropicEvent, TokenCount, ModelList, ModelCard,
                                           Health, Tokens, Detokenized, Version)  # fmt: skip
_ERRORS = {
    400: "The request is invalid (body, parameter, or prompt too long for the model).",
    401: "No API key, or an unknown one (only when the frontend requires keys).",
    404: "The model is not served here.",
    413: "The request body is larger than frontend.max_body_bytes.",
    429: "Admission control: too many requests; retry after Retry-After seconds.",
    502: "The worker failed and the request could not be moved (max_migrations reached).",
    503: "No worker serves the model, or the frontend is starting or stopping.",
    504: "The worker sent nothing for frontend.upstream_timeout_s.",
}


def build_document(models: Sequence[str], *, bearer_auth: bool = False, strict: bool = False) -> dict[str, Any]:
    """The OpenAPI document; `models` are the served model names, `bearer_auth` whether /v1/* needs a key,
    `strict` whether unknown request fields are refused (else accepted, as vLLM does: policy.py)."""
    _, top = models_json_schema([(m, "validation") for m in _REQUESTS] + [(m, "serialization") for m in _RESPONSES],
                                ref_template=_REF)  # fmt: skip
    schemas = top["$defs"]
    if models:
        for request in _GENERATION:
            model = schemas[request.__name__]["properties"]["model"]
            model["enum"] = list(models) + ([None] if "anyOf" in model else [])  # None: the first served
    if not strict:
        for request in _REQUESTS:
            schemas[request.__name__].pop("additionalProperties", None)
    doc: dict[str, Any] = {
        "openapi": OPENAPI_VERSION,
        "info": {"title": "dynamo_lite", "version": "1", "description": "OpenAI-compatible API of the frontend."},
        "paths": {
            "/v1/chat/completions": _generation("createChatCompletion", "A chat completion.", ChatCompletionRequest,
                                                ChatCompletion, ChatCompletionChunk),
            "/v1/completions": _generation("createCompletion", "A text completion.", CompletionRequest, Completion,
                                           CompletionChunk),
            "/v1/responses": _generation("createResponse", "A response (OpenAI's Responses API, stateless as vLLM "
                                         "serves it by default).", ResponsesRequest, ResponseObject, ResponseEvent),
            "/v1/messages": _generation("createMessage", "A message (Anthropic's Messages API, as vLLM serves it).",
                                        MessagesRequest, AnthropicMessage, AnthropicEvent, AnthropicErrorResponse),
            "/v1/messages/count_tokens": _post("countTokens", "The prompt's tokens of a Messages request.",
                                               CountTokensRequest, TokenCount, AnthropicErrorResponse),
            "/v1/models": {"get": {"operationId": "listModels", "summary": "The served models.",
                                   "responses": {"200": _json("The served models.", ModelList)}}},
            "/v1/models/{model_id}": {"get": {
                "operationId": "retrieveModel", "summary": "One served model.",
                "parameters": [{"name": "model_id", "in": "path", "required": True, "schema": {"type": "string"}}],
                "responses": {"200": _json("The model.", ModelCard), "404": _json(_ERRORS[404], ErrorResponse)}}},
            "/tokenize": _post("tokenize", "Token ids of a prompt or of chat messages.", TokenizeRequest, Tokens),
            "/detokenize": _post("detokenize", "Text of token ids.", DetokenizeRequest, Detokenized),
            "/version": {"get": {"operationId": "version", "summary": "The server's version.",
                                 "responses": {"200": _json("The version.", Version)}}},
            "/health": {"get": {"operationId": "health", "summary": "Readiness and workers per model and role.",
                                "responses": {"200": _json("Ready.", Health),
                                              "503": _json("Starting or stopping.", Health)}}},
        },
        "components": {"schemas": schemas},
    }  # fmt: skip
    if bearer_auth:
        doc["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
        for path, item in doc["paths"].items():
            for operation in item.values() if path.startswith("/v1/") else ():
                operation["security"] = [{"bearer": []}]
                operation["responses"].setdefault("401", _json(_ERRORS[401], ErrorResponse))
    return doc


def document_handler(document: dict[str, Any]) -> Callable[[web.Request], Awaitable[web.Response]]:
    """A GET handler serving `document`, encoded once."""
    body = msgspec.json.encode(document)

    async def openapi_json(request: web.Request) -> web.Response:
        return web.Response(body=body, content_type="application/json")

    return openapi_json


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": _REF.format(model=model.__name__)}


def _json(description: str, model: type[BaseModel]) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": _ref(model)}}}


def _generation(operation_id: str, summary: str, request: type[BaseModel], response: type[BaseModel],
                chunk: type[BaseModel], error: type[BaseModel] = ErrorResponse) -> dict[str, Any]:  # fmt: skip
    ok = _json("The answer, or with `stream: true` its server-sent events.", response)
    ok["content"]["text/event-stream"] = {"schema": _sse_event(chunk, error)}
    errors = {str(status): _json(text, error) for status, text in _ERRORS.items()}
    errors["429"]["headers"] = {"Retry-After": {"description": "Seconds to wait.", "schema": {"type": "integer"}}}
    return {"post": {
        "operationId": operation_id,
        "summary": summary,
        "requestBody": {"required": True, "content": {"application/json": {"schema": _ref(request)}}},
        "responses": {"200": ok, **errors},
    }}  # fmt: skip


def _post(operation_id: str, summary: str, request: type[BaseModel], response: type[BaseModel],
          error: type[BaseModel] = ErrorResponse) -> dict[str, Any]:  # fmt: skip
    return {"post": {"operationId": operation_id, "summary": summary,
                     "requestBody": {"required": True, "content": {"application/json": {"schema": _ref(request)}}},
                     "responses": {"200": _json(summary, response), "400": _json(_ERRORS[400], error),
                                   "404": _json(_ERRORS[404], error), "413": _json(_ERRORS[413], error)}}}  # fmt: skip


def _sse_event(chunk: type[BaseModel], error: type[BaseModel] = ErrorResponse) -> dict[str, Any]:
    """One event of a stream (OpenAPI before 3.2: `schema` of text/event-stream describes an event): `data:`
    holds a chunk, or an error that broke off the stream, or is the final `[DONE]`."""
    payload = {"anyOf": [_ref(chunk), _ref(error)]}
    data = {"type": "string", "if": {"const": "[DONE]"},
            "else": {"contentMediaType": "application/json", "contentSchema": payload}}  # fmt: skip
    return {"type": "object", "required": ["data"], "properties": {"data": data}}
