"""Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens) on the chat path, as vLLM serves it.

vLLM converts a Messages request into a chat request and the chat answer back
(vllm/entrypoints/anthropic/serving.py); so does this module, so that a request is routed,
prefilled, migrated and parsed (tool calls, reasoning) like any chat request:
- `system` becomes the first system message (Claude Code's per-request billing header dropped,
  as vLLM does, since it would defeat prefix caching); text blocks are text, `thinking` blocks
  reasoning, `tool_use` blocks tool calls, and a user's `tool_result` blocks tool turns before
  the rest of that user message;
- tools are function tools (`input_schema` as parameters), tool_choice auto / any / tool / none
  is auto / required / named / none, `disable_parallel_tool_use` is parallel_tool_calls false;
- thinking enabled sets the thinking token budget, disabled reasoning_effort none;
  output_config.format a JSON schema, output_config.effort the reasoning effort.
Images and documents cannot be served by the text models here, nor server tools without a
tool server: each is a 400 naming its place. Errors are Anthropic's shape
({"type": "error", "error": {"type", "message"}}).
"""

from __future__ import annotations

import json
import uuid
from typing import Any, Literal

import msgspec
from pydantic import BaseModel, ConfigDict, Field

from dynamo_lite.frontend.errors import ApiError
from dynamo_lite.frontend.request import Outcome
from dynamo_lite.frontend.schemas import rename_param

_encode = msgspec.json.encode
_BILLING = "x-anthropic-billing-header"  # Claude Code's attribution line: a per-request hash
_PASS = ("temperature", "top_p", "top_k", "vllm_xargs", "cache_salt", "chat_template_kwargs", "kv_transfer_params",
         "ec_transfer_params")


class _Loose(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


class Message(_Loose):
    role: Literal["user", "assistant", "system"]
    content: str | list[dict[str, Any]]


class Tool(_Loose):
    name: str
    description: str | None = None
    input_schema: dict[str, Any]
    strict: bool | None = None


class ToolChoice(_Loose):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class CountTokensRequest(_Loose):
    """POST /v1/messages/count_tokens; sampling fields (temperature, top_p, top_k ...) go to the chat request."""

    model: str
    messages: list[Message] = Field(min_length=1)
    system: str | list[dict[str, Any]] | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    thinking: dict[str, Any] | None = None
    output_config: dict[str, Any] | None = None


class MessagesRequest(CountTokensRequest):
    """POST /v1/messages."""

    max_tokens: int
    stop_sequences: list[str] | None = None
    stream: bool | None = False
    metadata: dict[str, Any] | None = None


_ANTHROPIC_NAME = {"max_completion_tokens": "max_tokens", "stop": "stop_sequences",
                   "response_format": "output_config.format", "thinking_token_budget": "thinking.budget_tokens",
                   "reasoning_effort": "output_config.effort", "parallel_tool_calls": "tool_choice"}


def anthropic_param(param: str | None) -> str | None:
    """The Messages field for a chat field named in a validation error."""
    return rename_param(param, _ANTHROPIC_NAME, "messages")


def _bad(message: str, param: str) -> ApiError:
    return ApiError(400, f"{param}: {message}", param=param, code="invalid_value")


def chat_body(req: CountTokensRequest) -> dict[str, Any]:
    """The chat request that serves a Messages request (vLLM's `to_chat_completion_request`)."""
    chat: dict[str, Any] = {k: v for k, v in (req.model_extra or {}).items() if k in _PASS}
    chat["model"] = req.model
    messages: list[dict[str, Any]] = []
    system = _system_text(req.system, "system")
    if system:
        messages.append({"role": "system", "content": system})
    for i, message in enumerate(req.messages):
        _add_message(messages, message, i)
    if not messages:
        raise _bad("there is nothing to answer (only empty blocks)", "messages")
    chat["messages"] = messages
    if isinstance(req, MessagesRequest):
        chat["max_completion_tokens"] = req.max_tokens
        if req.stop_sequences:
            chat["stop"] = req.stop_sequences
        if req.stream:
            chat["stream"] = True
    if req.tool_choice is not None:
        choice = req.tool_choice
        chat["parallel_tool_calls"] = not choice.disable_parallel_tool_use
        chat["tool_choice"] = {"auto": "auto", "any": "required", "none": "none"}.get(choice.type) or \
            {"type": "function", "function": {"name": choice.name}}
    if req.tools:
        chat["tools"] = [{"type": "function", "function": {k: v for k, v in (("name", t.name), (
            "description", t.description), ("parameters", t.input_schema), ("strict", t.strict)) if v is not None}}
            for t in req.tools]  # fmt: skip
        chat.setdefault("tool_choice", "auto")
    thinking = req.thinking or {}
    if thinking.get("type") == "enabled":
        chat["thinking_token_budget"] = thinking.get("budget_tokens")
    elif thinking.get("type") == "disabled":
        chat["reasoning_effort"] = "none"
    output = req.output_config or {}
    fmt = output.get("format")
    if isinstance(fmt, dict) and fmt.get("schema") is not None:
        chat["response_format"] = {"type": "json_schema", "json_schema": {"name": "json_schema",
                                                                          "schema": fmt["schema"]}}
    if output.get("effort") is not None:
        chat["reasoning_effort"] = output["effort"]
    return chat


def _system_text(system: str | list[dict[str, Any]] | None, param: str) -> str:
    if system is None or isinstance(system, str):
        return "" if system is None or system.startswith(_BILLING) else system
    parts = []
    for j, block in enumerate(system):
        if block.get("type") != "text":
            raise _bad(f"a {block.get('type')!r} block cannot be part of a system prompt", f"{param}[{j}]")
        text = block.get("text")
        if isinstance(text, str) and text and not text.startswith(_BILLING):
            parts.append(text)
    return "".join(parts)


def _add_message(messages: list[dict[str, Any]], message: Message, i: int) -> None:
    if message.role == "system":
        text = _system_text(message.content, f"messages[{i}].content")
        if text:
            messages.append({"role": "system", "content": text})
        return
    if isinstance(message.content, str):
        messages.append({"role": message.role, "content": message.content})
        return
    out: dict[str, Any] = {"role": message.role}
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    reasoning: list[str] = []
    for j, block in enumerate(message.content):
        where = f"messages[{i}].content[{j}]"
        kind = block.get("type")
        if kind == "text":
            if block.get("text"):
                parts.append({"type": "text", "text": block["text"]})
        elif kind == "thinking":
            if block.get("thinking") is not None:
                reasoning.append(block["thinking"])
        elif kind in ("redacted_thinking", "tool_reference"):
            continue  # opaque, as vLLM skips them
        elif kind == "tool_use":
            arguments = json.dumps(block.get("input") or {})
            calls.append({"id": block.get("id") or f"call_{uuid.uuid4().hex}", "type": "function",
                          "function": {"name": block.get("name") or "", "arguments": arguments}})
        elif kind == "tool_result" and message.role == "user":
            messages.append({"role": "tool", "tool_call_id": block.get("tool_use_id") or "",
                             "content": _result_text(block.get("content"), where)})
        elif kind == "tool_result":
            parts.append({"type": "text", "text": f"Tool result: {block.get('content') or ''}"})
        else:
            raise _bad(f"a {kind!r} block cannot be served: the models here take text, and there is no tool server",
                       where)
    if reasoning:
        out["reasoning"] = "".join(reasoning)
    if calls:
        out["tool_calls"] = calls
    if parts:
        out["content"] = parts[0]["text"] if len(parts) == 1 else parts
    if parts or message.role != "user" and (calls or reasoning):
        messages.append(out)


def _result_text(content: Any, where: str) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        raise _bad("a tool result's content must be a string or a list of blocks", where)
    texts = []
    for block in content:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif kind != "tool_reference":
            raise _bad(f"a {kind!r} block in a tool result cannot be served: the models here take text", where)
    return "\n".join(texts)


# --- the answer -------------------------------------------------------------------------------------------


def usage_of(chat_usage: dict[str, Any]) -> dict[str, int]:
    """Anthropic counts cache reads apart: input_tokens are the prompt tokens not read from the cache."""
    cached = chat_usage.get("prompt_tokens_details", {}).get("cached_tokens", 0)
    return {"input_tokens": max(0, chat_usage["prompt_tokens"] - cached),
            "output_tokens": chat_usage["completion_tokens"], "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": cached}


def stop_reason(outcome: Outcome, tool_used: bool, tool_complete: bool) -> tuple[str | None, str | None]:
    """(stop_reason, stop_sequence) for a chat outcome, as vLLM's `_to_anthropic_stop_reason`."""
    if outcome.finish_reason == "length":
        return "max_tokens", None
    if outcome.finish_reason not in ("stop", "tool_calls"):
        return None, None
    if tool_complete:
        return "tool_use", None
    if isinstance(outcome.stop_reason, str):
        return "stop_sequence", outcome.stop_reason
    if outcome.finish_reason == "tool_calls" or tool_used:
        return "tool_use", None
    return "end_turn", None


def _input(arguments: str) -> dict[str, Any]:
    try:
        value = json.loads(arguments)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


class Reply:
    """One Messages answer: its id and model; a whole message from a chat choice, or a stream's events."""

    def __init__(self, reply_id: str, model: str) -> None:
        self.id = reply_id
        self.model = model

    def whole(self, choice: dict[str, Any], outcome: Outcome, usage: dict[str, Any]) -> dict[str, Any]:
        message = choice["message"]
        calls = message.get("tool_calls") or []
        content: list[dict[str, Any]] = []
        if message.get("reasoning"):
            content.append({"type": "thinking", "thinking": message["reasoning"], "signature": uuid.uuid4().hex})
        if message.get("content"):
            content.append({"type": "text", "text": message["content"]})
        for call in calls:
            content.append({"type": "tool_use", "id": call["id"], "name": call["function"]["name"],
                            "input": _input(call["function"]["arguments"])})
        reason, sequence = stop_reason(outcome, bool(calls), bool(calls))
        body: dict[str, Any] = {"id": self.id, "type": "message", "role": "assistant",
                                "content": content or [{"type": "text", "text": ""}], "model": self.model,
                                "stop_reason": reason, "usage": usage_of(usage)}  # fmt: skip
        if sequence is not None:
            body["stop_sequence"] = sequence
        return body

    def events(self) -> MessageEvents:
        return MessageEvents(self)


class MessageEvents:
    """A Messages stream: chat stream choices in, Anthropic's events out (message_start, content blocks,
    message_delta with the stop reason and usage, message_stop)."""

    def __init__(self, reply: Reply) -> None:
        self.reply = reply
        self.index = -1  # the open block's
        self.kind: str | None = None  # text | thinking | tool_use
        self.call_id: str | None = None
        self.tool_used = False
        self.last_args: list[str] = []

    def opening(self, usage: dict[str, Any]) -> bytes:
        message = {"id": self.reply.id, "type": "message", "role": "assistant", "content": [],
                   "model": self.reply.model, "stop_reason": None, "stop_sequence": None,
                   "usage": {"input_tokens": usage["prompt_tokens"], "output_tokens": 0}}  # fmt: skip
        return _event("message_start", message=message)

    def chunk(self, choice: dict[str, Any]) -> bytes:
        delta = choice.get("delta") or {}
        out = b""
        if delta.get("reasoning"):
            out += self._block("thinking", {"type": "thinking", "thinking": ""})
            out += self._delta({"type": "thinking_delta", "thinking": delta["reasoning"]})
        if delta.get("content"):
            out += self._block("text", {"type": "text", "text": ""})
            out += self._delta({"type": "text_delta", "text": delta["content"]})
        for call in delta.get("tool_calls") or ():
            function = call.get("function") or {}
            if "id" in call:
                self.tool_used, self.last_args = True, []
                out += self._block("tool_use", {"type": "tool_use", "id": call["id"], "name": function.get("name"),
                                                "input": {}}, new=True)  # fmt: skip
                self.call_id = call["id"]
            if function.get("arguments") and self.kind == "tool_use":
                self.last_args.append(function["arguments"])
                out += self._delta({"type": "input_json_delta", "partial_json": function["arguments"]})
        return out

    def closing(self, outcome: Outcome, usage: dict[str, Any]) -> bytes:
        out = self._stop()
        reason, sequence = stop_reason(outcome, self.tool_used, self.tool_used and _is_json("".join(self.last_args)))
        out += _event("message_delta", delta={"stop_reason": reason, "stop_sequence": sequence}, usage=usage_of(usage))
        return out + _event("message_stop")

    def failed(self, error: dict[str, Any]) -> bytes:
        e = error.get("error", error)
        return _event("error", error={"type": "api_error", "message": e.get("message", "")})

    def _block(self, kind: str, start: dict[str, Any], new: bool = False) -> bytes:
        if self.kind == kind and not new:
            return b""
        out = self._stop()
        self.index += 1
        self.kind = kind
        return out + _event("content_block_start", index=self.index, content_block=start)

    def _delta(self, delta: dict[str, Any]) -> bytes:
        return _event("content_block_delta", index=self.index, delta=delta)

    def _stop(self) -> bytes:
        if self.kind is None:
            return b""
        out = b""
        if self.kind == "thinking":
            out = self._delta({"type": "signature_delta", "signature": uuid.uuid4().hex})
        self.kind = None
        return out + _event("content_block_stop", index=self.index)


def _event(kind: str, **fields: Any) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + _encode({"type": kind, **fields}) + b"\n\n"
