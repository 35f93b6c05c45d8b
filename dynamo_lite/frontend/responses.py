"""The Responses API (POST /v1/responses) on the chat path, stateless as vLLM serves it by default.

vLLM keeps no responses unless VLLM_ENABLE_RESPONSES_API_STORE is set: `store` is dropped
silently, `previous_response_id` is a 404 and `background` a 400. The same here, so a
request becomes one chat request (`chat_body`): instructions as the system message, input
items as messages (function calls merged into the assistant turn before them, their outputs
as tool turns), flat function tools as chat tools, `text.format` as response_format. It is
then routed, prefilled and served as any chat request, and its output is reshaped
(responses_out.py). Built-in tools (web search, files, code, MCP) need a tool server and
are refused, naming `tools`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from dynamo_lite.frontend.errors import ApiError
from dynamo_lite.frontend.schemas import MAX_MESSAGES, rename_param

# A chat field named in an error, as the Responses request calls it.
_RESPONSES_NAME = {"max_completion_tokens": "max_output_tokens",
                   "response_format": "text.format", "reasoning_effort": "reasoning.effort", "logprobs": "include",
                   "truncate_prompt_tokens": "truncation"}
# Accepted and not acted on, as vLLM does (echoed in the response where it has a field there); and chat fields
# that are not the Responses API's, which vLLM ignores there too (one choice; logprobs through `include`).
_NOT_FOR_CHAT = ("store", "metadata", "user", "service_tier", "max_tool_calls", "prompt_cache_key",
                 "enable_response_messages", "watermarking", "mm_processor_kwargs", "media_io_kwargs", "mm_payload",
                 "return_mm_kwargs", "n", "echo", "stream_options", "logprobs", "prompt_logprobs")


class ResponsesRequest(BaseModel):
    """POST /v1/responses: the fields this module reads. Every other key (temperature, top_p, seed, stop,
    structured_outputs ...) goes to the chat request as it is, and is validated there."""

    model_config = ConfigDict(extra="allow", strict=True)
    model: str
    input: str | Annotated[list[dict[str, Any]], Field(min_length=1, max_length=MAX_MESSAGES)]
    instructions: str | None = None
    max_output_tokens: int | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    text: dict[str, Any] | None = None
    include: list[str] | None = None
    top_logprobs: int | None = None
    reasoning: dict[str, Any] | None = None
    truncation: Literal["auto", "disabled"] | None = None
    stream: bool | None = False
    store: bool | None = True  # nothing is stored (vLLM's default): dropped, as vLLM does
    background: Literal[False] | None = False
    previous_response_id: None = None
    prompt: None = None
    previous_input_messages: None = None
    metadata: dict[str, Any] | None = None
    user: str | None = None
    service_tier: str | None = None
    max_tool_calls: int | None = None

    def logprobs_asked(self) -> bool:
        return self.include is not None and "message.output_text.logprobs" in self.include


def refusal(body: dict[str, Any]) -> ApiError | None:
    """What vLLM without a response store refuses, as it says it (before the body's types are checked)."""
    if body.get("previous_response_id") is not None:
        return ApiError(404, f"Response with id '{body['previous_response_id']}' not found.", param="response_id")
    if body.get("background"):
        return _bad("This frontend keeps no responses (as vLLM without VLLM_ENABLE_RESPONSES_API_STORE), so it "
                    "does not serve background mode.", "background")
    if body.get("prompt") is not None:
        return _bad("prompt template is not supported", "prompt")
    if body.get("previous_input_messages") is not None:
        return _bad("previous_input_messages are for gpt-oss (harmony) models, not served here.",
                    "previous_input_messages")
    return None


def responses_param(param: str | None) -> str | None:
    """The Responses field for a chat field named in a validation error."""
    return rename_param(param, _RESPONSES_NAME, "input")


def _bad(message: str, param: str) -> ApiError:
    return ApiError(400, message, param=param, code="invalid_value")


def chat_body(req: ResponsesRequest) -> dict[str, Any]:
    """The chat request that serves a Responses request (validated there, errors renamed by `responses_param`)."""
    chat: dict[str, Any] = {k: v for k, v in (req.model_extra or {}).items() if k not in _NOT_FOR_CHAT}
    chat["model"] = req.model
    if req.stream:
        chat["stream"] = True
    messages, continue_final = _messages(req.instructions, req.input)
    chat["messages"] = messages
    if continue_final:
        chat["continue_final_message"], chat["add_generation_prompt"] = True, False
    if req.max_output_tokens is not None:
        chat["max_completion_tokens"] = req.max_output_tokens
    if req.truncation == "auto":
        chat["truncate_prompt_tokens"] = -1
    if req.tools:
        chat["tools"] = [_chat_tool(t, i) for i, t in enumerate(req.tools)]
        chat["tool_choice"] = _chat_tool_choice(req.tool_choice or "auto")
    if req.parallel_tool_calls is not None:
        chat["parallel_tool_calls"] = req.parallel_tool_calls
    if req.logprobs_asked():
        chat["logprobs"] = True
        chat["top_logprobs"] = req.top_logprobs or 0
    if req.text is not None and req.text.get("format") is not None:
        chat["response_format"] = _response_format(req.text["format"])
    if req.reasoning is not None and req.reasoning.get("effort") is not None:
        chat["reasoning_effort"] = req.reasoning["effort"]
    return chat


def _messages(instructions: str | None, items: str | list[dict[str, Any]]) -> tuple[list[dict[str, Any]], bool]:
    """Chat messages for `instructions` and `input` (vLLM's construct_input_messages), and whether the last
    one is an assistant message to continue (status in_progress or incomplete)."""
    messages: list[dict[str, Any]] = []
    if instructions:
        messages.append({"role": "system", "content": instructions})
    if isinstance(items, str):
        return [*messages, {"role": "user", "content": items}], False
    for i, item in enumerate(items):
        _add_item(messages, item, i)
    last = items[-1]
    continue_final = last.get("type", "message") in ("message", "reasoning") and \
        last.get("status") in ("in_progress", "incomplete") and messages[-1]["role"] == "assistant"
    return messages, continue_final


def _add_item(messages: list[dict[str, Any]], item: dict[str, Any], i: int) -> None:
    kind = item.get("type", "message")
    prev = messages[-1] if messages and messages[-1]["role"] == "assistant" else None
    if kind == "function_call":
        call = {"id": item.get("call_id"), "type": "function",
                "function": {"name": item.get("name"), "arguments": item.get("arguments", "")}}
        if prev is not None:  # one assistant turn: its text, reasoning and calls
            prev.setdefault("tool_calls", []).append(call)
        else:
            messages.append({"role": "assistant", "tool_calls": [call]})
    elif kind == "function_call_output":
        messages.append({"role": "tool", "content": _text(item.get("output"), f"input[{i}].output"),
                         "tool_call_id": item.get("call_id")})
    elif kind == "reasoning":
        if item.get("encrypted_content"):
            raise _bad("Encrypted content is not supported.", f"input[{i}]")
        text = _text(item.get("content") or item.get("summary") or [], f"input[{i}].content")
        if prev is not None and prev.get("reasoning") is None:
            prev["reasoning"] = text
        else:
            messages.append({"role": "assistant", "reasoning": text})
    elif kind == "message":
        role = item.get("role")
        content = item.get("content")
        if role == "assistant":
            text = _text(content, f"input[{i}].content")
            if prev is not None and prev.get("content") is None:
                prev["content"] = text
            else:
                messages.append({"role": "assistant", "content": text})
        else:
            message = {"role": role, "content": content if isinstance(content, str) else _parts(content, i)}
            if "name" in item:
                message["name"] = item["name"]
            messages.append(message)
    else:
        raise _bad(f"Unsupported input item type: {kind}"
                   + (" (items by reference need stored responses)" if kind == "item_reference" else ""), f"input[{i}]")


def _parts(content: Any, i: int) -> list[dict[str, Any]]:
    if not isinstance(content, list):
        raise _bad(f"input[{i}].content must be a string or a list of content parts.", f"input[{i}].content")
    parts = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text", "text"):
            parts.append({"type": "text", "text": part.get("text")})
        else:
            raise _bad(f"Content part type {kind!r} cannot be served: the models here take text only.",
                       f"input[{i}].content[{j}]")
    return parts


def _text(content: Any, param: str) -> str:
    """An assistant message's or a tool output's text: a string, or the text of its parts."""
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        return "".join(t for p in content if isinstance(p, dict) and isinstance(t := p.get("text"), str))
    raise _bad(f"{param} must be a string or a list of content parts.", param)


def _chat_tool(tool: Any, i: int) -> dict[str, Any]:
    kind = tool.get("type") if isinstance(tool, dict) else None
    if kind != "function":
        raise _bad(f"Tool type {kind!r} needs a tool server; only function tools are served here.", f"tools[{i}]")
    function = {k: tool[k] for k in ("name", "description", "parameters", "strict") if tool.get(k) is not None}
    return {"type": "function", "function": function}


def _chat_tool_choice(choice: Any) -> Any:
    if isinstance(choice, str):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise _bad("tool_choice must be 'none', 'auto', 'required' or {'type': 'function', 'name': ...}.",
               "tool_choice")


def _response_format(fmt: Any) -> dict[str, Any]:
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind in ("text", "json_object"):
        return {"type": kind}
    if kind == "json_schema":
        schema = {k: fmt[k] for k in ("name", "description", "schema", "strict") if k in fmt}
        return {"type": "json_schema", "json_schema": schema}
    raise _bad("text.format.type must be 'text', 'json_object' or 'json_schema'.", "text.format")
