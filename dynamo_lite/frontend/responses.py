"""The Responses API (POST /v1/responses) on the chat path, stateless as vLLM serves it by default.

vLLM keeps no responses unless VLLM_ENABLE_RESPONSES_API_STORE is set: `store` is dropped
silently, `previous_response_id` is a 404 and `background` a 400. The same here, so a
request becomes one chat request (`chat_body`): instructions as the system message, input
items as messages (function calls merged into the assistant turn before them, their outputs
as tool turns), flat function tools as chat tools, `text.format` as response_format. It is
then routed, prefilled and served as any chat request, and its output is reshaped: a whole
answer by `output_items` and `envelope`, a stream by `ResponseEvents`, from the same chat
choices that chat streams are built from (choice.py). Built-in tools (web search, files,
code, MCP) need a tool server and are refused, naming `tools`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import msgspec
from pydantic import BaseModel, ConfigDict, Field

from dynamo_lite.frontend.errors import ApiError
from dynamo_lite.frontend.request import Outcome
from dynamo_lite.frontend.schemas import MAX_MESSAGES, rename_param

_encode = msgspec.json.encode
# A chat field named in an error, as the Responses request calls it.
_RESPONSES_NAME = {"max_completion_tokens": "max_output_tokens",
                   "response_format": "text.format", "reasoning_effort": "reasoning.effort", "logprobs": "include",
                   "truncate_prompt_tokens": "truncation"}
# Accepted and not acted on, as vLLM does (echoed in the response where it has a field there); and chat fields
# that are not the Responses API's, which vLLM ignores there too (one choice; logprobs through `include`).
_NOT_FOR_CHAT = ("store", "metadata", "user", "service_tier", "max_tool_calls", "prompt_cache_key", "session_id",
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


# --- the response -----------------------------------------------------------------------------------------


@dataclass
class Envelope:
    """What every form of one response repeats: its id and the request's settings, as vLLM echoes them."""

    id: str
    model: str
    created_at: int
    request: ResponsesRequest
    max_output_tokens: int

    def whole(self, choice: dict[str, Any], outcome: Outcome, usage: dict[str, Any]) -> dict[str, Any]:
        """The answer, from the whole chat choice (choice.py `message`) and the chat usage."""
        return self.body(status_of(outcome.finish_reason), output_items(choice), usage_of(usage))

    def events(self) -> ResponseEvents:
        return ResponseEvents(self)

    def body(self, status: str, output: list[dict[str, Any]], usage: dict[str, Any] | None) -> dict[str, Any]:
        r = self.request
        extra = r.model_extra or {}
        return {
            "id": self.id, "created_at": self.created_at,
            "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
            "instructions": r.instructions, "metadata": r.metadata, "model": self.model, "object": "response",
            "output": output, "parallel_tool_calls": r.parallel_tool_calls is not False,
            "temperature": _or(extra.get("temperature"), 1.0), "tool_choice": (r.tool_choice or "auto") if r.tools
            else "none", "tools": r.tools or [], "top_p": _or(extra.get("top_p"), 1.0), "background": False,
            "max_output_tokens": self.max_output_tokens, "max_tool_calls": r.max_tool_calls,
            "previous_response_id": None, "prompt": None, "reasoning": r.reasoning,
            "service_tier": r.service_tier or "auto", "status": status, "text": r.text,
            "top_logprobs": r.top_logprobs or 0 if r.logprobs_asked() else None,
            "truncation": r.truncation or "disabled", "usage": usage, "user": r.user,
            "presence_penalty": _or(extra.get("presence_penalty"), 0.0),
            "frequency_penalty": _or(extra.get("frequency_penalty"), 0.0),
            "kv_transfer_params": None, "ec_transfer_params": None, "input_messages": None, "output_messages": None,
        }  # fmt: skip


def _or(value: Any, default: float) -> Any:
    return default if value is None else value


def usage_of(chat_usage: dict[str, Any]) -> dict[str, Any]:
    """A chat usage body as the Responses API counts it (reasoning tokens are not counted apart)."""
    cached = chat_usage.get("prompt_tokens_details", {}).get("cached_tokens", 0)
    return {"input_tokens": chat_usage["prompt_tokens"],
            "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0, "input_tokens_per_turn": [],
                                     "cached_tokens_per_turn": []},
            "output_tokens": chat_usage["completion_tokens"],
            "output_tokens_details": {"reasoning_tokens": 0, "tool_output_tokens": 0, "output_tokens_per_turn": [],
                                      "tool_output_tokens_per_turn": []},
            "total_tokens": chat_usage["total_tokens"]}  # fmt: skip


def status_of(finish_reason: str | None) -> str:
    return "incomplete" if finish_reason == "length" else "completed"


def _new(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def _message_item(item_id: str, text: str, logprobs: list[Any] | None) -> dict[str, Any]:
    content = [{"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs}]
    return {"id": item_id, "type": "message", "role": "assistant", "status": "completed", "content": content,
            "phase": None}  # fmt: skip


def _reasoning_item(item_id: str, text: str) -> dict[str, Any]:
    return {"id": item_id, "type": "reasoning", "summary": [], "status": "completed",
            "content": [{"type": "reasoning_text", "text": text}]}  # fmt: skip


def _call_item(item_id: str, call_id: str, name: str, arguments: str, status: str = "completed") -> dict[str, Any]:
    return {"id": item_id, "type": "function_call", "call_id": call_id, "name": name, "arguments": arguments,
            "status": status}  # fmt: skip


def output_items(choice: dict[str, Any]) -> list[dict[str, Any]]:
    """A whole chat choice (choice.py `message`) as Responses output items: reasoning, message, calls."""
    message = choice["message"]
    items = []
    if message.get("reasoning"):
        items.append(_reasoning_item(_new("rs"), message["reasoning"]))
    calls = message.get("tool_calls") or []
    if message.get("content") or not calls:
        logprobs = (choice.get("logprobs") or {}).get("content")
        items.append(_message_item(_new("msg"), message.get("content") or "", logprobs))
    for call in calls:
        items.append(_call_item(_new("fc"), call["id"], call["function"]["name"], call["function"]["arguments"]))
    return items


@dataclass
class _Open:
    """The output item being streamed."""

    kind: str  # message | reasoning | function_call
    item_id: str
    index: int
    parts: list[str] = field(default_factory=list)
    logprobs: list[Any] = field(default_factory=list)
    call_id: str = ""
    name: str = ""


class ResponseEvents:
    """One streamed response: chat stream choices in, Responses events (SSE with `event:` lines) out."""

    def __init__(self, envelope: Envelope) -> None:
        self.envelope = envelope
        self.seq = 0
        self.items: list[dict[str, Any]] = []
        self.open: _Open | None = None
        self.logprobs = envelope.request.logprobs_asked()

    def opening(self, usage: dict[str, Any]) -> bytes:
        body = self.envelope.body("in_progress", [], None)
        return self._event("response.created", response=body) + self._event("response.in_progress", response=body)

    def chunk(self, choice: dict[str, Any]) -> bytes:
        """The events for one chat stream choice (a delta, or the last one with the finish reason)."""
        delta = choice.get("delta") or {}
        out = b""
        if delta.get("reasoning"):
            out += self._text_delta("reasoning", delta["reasoning"], None)
        if delta.get("content"):
            out += self._text_delta("message", delta["content"], (choice.get("logprobs") or {}).get("content"))
        for call in delta.get("tool_calls") or ():
            function = call.get("function") or {}
            if "id" in call:
                out += self._close()
                self.open = _Open("function_call", _new("fc"), len(self.items), call_id=call["id"],
                                  name=function.get("name") or "")
                item = _call_item(self.open.item_id, self.open.call_id, self.open.name, "", "in_progress")
                out += self._event("response.output_item.added", output_index=self.open.index, item=item)
            if function.get("arguments") and self.open is not None:
                self.open.parts.append(function["arguments"])
                out += self._event("response.function_call_arguments.delta", item_id=self.open.item_id,
                                   output_index=self.open.index, delta=function["arguments"])
        return out

    def closing(self, outcome: Outcome, usage: dict[str, Any]) -> bytes:
        out = self._close()
        body = self.envelope.body(status_of(outcome.finish_reason), self.items, usage_of(usage))
        return out + self._event("response.completed", response=body)

    def failed(self, error: dict[str, Any]) -> bytes:
        e = error.get("error", error)
        return self._event("error", code=e.get("code") or e.get("type"), message=e.get("message"), param=e.get("param"))

    # --- internals -------------------------------------------------------------------------------------
    def _event(self, kind: str, **fields: Any) -> bytes:
        data = {"type": kind, **fields, "sequence_number": self.seq}
        self.seq += 1
        return b"event: " + kind.encode() + b"\ndata: " + _encode(data) + b"\n\n"

    def _text_delta(self, kind: str, text: str, logprobs: list[Any] | None) -> bytes:
        out = b""
        if self.open is None or self.open.kind != kind:
            out += self._close()
            self.open = _Open(kind, _new("msg" if kind == "message" else "rs"), len(self.items))
            o = self.open
            if kind == "message":
                item: dict[str, Any] = {"id": o.item_id, "type": "message", "role": "assistant", "content": [],
                                        "status": "in_progress"}
                part: dict[str, Any] = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            else:
                item, part = {"id": o.item_id, "type": "reasoning", "summary": [], "status": "in_progress"}, \
                    {"type": "reasoning_text", "text": ""}
            out += self._event("response.output_item.added", output_index=o.index, item=item)
            out += self._event("response.content_part.added", item_id=o.item_id, output_index=o.index,
                               content_index=0, part=part)
        o = self.open
        o.parts.append(text)
        if kind == "message":
            o.logprobs.extend(logprobs or ())
            return out + self._event("response.output_text.delta", item_id=o.item_id, output_index=o.index,
                                     content_index=0, delta=text, logprobs=logprobs or [])
        return out + self._event("response.reasoning_text.delta", item_id=o.item_id, output_index=o.index,
                                 content_index=0, delta=text)

    def _close(self) -> bytes:
        o, self.open = self.open, None
        if o is None:
            return b""
        text = "".join(o.parts)
        where = {"item_id": o.item_id, "output_index": o.index}
        if o.kind == "function_call":
            item = _call_item(o.item_id, o.call_id, o.name, text)
            out = self._event("response.function_call_arguments.done", **where, name=o.name, arguments=text)
        elif o.kind == "message":
            item = _message_item(o.item_id, text, o.logprobs if self.logprobs else None)
            out = self._event("response.output_text.done", **where, content_index=0, text=text, logprobs=o.logprobs)
            out += self._event("response.content_part.done", **where, content_index=0, part=item["content"][0])
        else:
            item = _reasoning_item(o.item_id, text)
            out = self._event("response.reasoning_text.done", **where, content_index=0, text=text)
            out += self._event("response.content_part.done", **where, content_index=0, part=item["content"][0])
        self.items.append(item)
        return out + self._event("response.output_item.done", output_index=o.index, item=item)
