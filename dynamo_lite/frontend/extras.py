"""vLLM's endpoints besides generation: GET /v1/models/{id}, POST /tokenize and /detokenize, GET /version.

/tokenize takes a `prompt` (completions-style, special tokens added by default) or `messages`
(rendered by the chat template with the generation prompt, tools included), as vLLM's does,
and answers `{count, max_model_len, tokens, token_strs}`; /detokenize turns `tokens` back into
`prompt`. Both use the frontend's tokenizer, the one it sends engines token ids from.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Annotated, Any

from aiohttp import web
from jinja2 import TemplateError
from pydantic import Field

from dynamo_lite.config import ModelSpec
from dynamo_lite.frontend.errors import ApiError, json_response, no_such_model
from dynamo_lite.frontend.messages import ChatMessage, Tool
from dynamo_lite.frontend.schemas import MAX_MESSAGES, TokenId, _Body, parse_body
from dynamo_lite.frontend.state import STATE
from dynamo_lite.frontend.tokenizer import ChatInput, ModelTokenizer


class TokenizeRequest(_Body):
    """POST /tokenize: exactly one of `prompt` and `messages`."""

    model: str | None = None
    prompt: str | None = None
    messages: Annotated[list[ChatMessage], Field(min_length=1, max_length=MAX_MESSAGES)] | None = None
    add_special_tokens: bool | None = None  # default: true for a prompt, false for messages (the template adds them)
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    return_token_strs: bool | None = False
    tools: list[Tool] | None = None
    chat_template_kwargs: dict[str, Any] | None = None


class DetokenizeRequest(_Body):
    """POST /detokenize."""

    model: str | None = None
    tokens: list[TokenId]


def add_routes(app: web.Application) -> None:
    app.router.add_get("/v1/models/{model_id}", model_card)
    app.router.add_post("/tokenize", tokenize)
    app.router.add_post("/detokenize", detokenize)
    app.router.add_get("/version", version_info)


def card(name: str, max_model_len: int) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": 0, "owned_by": "dynamo_lite", "root": name, "parent": None,
            "max_model_len": max_model_len}  # fmt: skip


async def model_card(request: web.Request) -> web.Response:
    spec = request.app[STATE].models.get(request.match_info["model_id"])
    if spec is None:
        raise no_such_model(request.match_info["model_id"])
    return json_response(card(spec.name, spec.max_model_len))


def _strict(request: web.Request) -> bool:
    return request.app[STATE].config.frontend.strict_request_fields


def _tokenizer(request: web.Request, model: str | None) -> tuple[ModelTokenizer, ModelSpec]:
    state = request.app[STATE]
    name = model if model is not None else next(iter(state.models), None)
    if name is None or name not in state.tokenizers:
        raise no_such_model(name)
    return state.tokenizers[name], state.models[name]


async def tokenize(request: web.Request) -> web.Response:
    body = parse_body(await request.read(), TokenizeRequest, _strict(request))
    tok, spec = _tokenizer(request, body.model)
    if (body.prompt is None) == (body.messages is None):
        raise ApiError(400, "Give exactly one of 'prompt' and 'messages'.", param="prompt", code="invalid_value")
    if body.prompt is not None:
        ids = tok.encode_prompt(body.prompt, body.add_special_tokens is not False)
    else:
        chat = ChatInput(tools=body.tools, tool_format=spec.tool_call_parser or "hermes",
                         add_generation_prompt=body.add_generation_prompt,
                         continue_final_message=body.continue_final_message,
                         kwargs={**spec.default_chat_template_kwargs, **(body.chat_template_kwargs or {})})
        try:
            text = tok.render_chat(body.messages or [], chat)
        except TemplateError as e:
            raise ApiError(400, f"The chat template rejected the messages: {e}", param="messages") from None
        ids = tok.encode_prompt(text, bool(body.add_special_tokens))
    strs = tok.token_strs(ids) if body.return_token_strs else None
    return json_response({"count": len(ids), "max_model_len": spec.max_model_len, "tokens": ids, "token_strs": strs})


async def detokenize(request: web.Request) -> web.Response:
    body = parse_body(await request.read(), DetokenizeRequest, _strict(request))
    tok, _ = _tokenizer(request, body.model)
    return json_response({"prompt": tok.decode(body.tokens)})


async def version_info(request: web.Request) -> web.Response:
    try:
        ours = version("dynamo_lite")
    except PackageNotFoundError:
        ours = "0"
    return json_response({"version": ours})
