"""The Responses API's answers (POST /v1/responses): a chat answer reshaped, as vLLM writes it.

A whole answer by `output_items` and `Envelope.whole`, a stream by `ResponseEvents`, from the same chat
choices that chat streams are built from (choice.py). The request side is responses.py.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

import msgspec

from dynamo_lite.frontend.request import Outcome
from dynamo_lite.frontend.responses import ResponsesRequest

_encode = msgspec.json.encode


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
    """A chat usage body as the Responses API counts it."""
    cached = chat_usage.get("prompt_tokens_details", {}).get("cached_tokens", 0)
    reasoning = chat_usage.get("completion_tokens_details", {}).get("reasoning_tokens", 0)
    return {"input_tokens": chat_usage["prompt_tokens"],
            "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0, "input_tokens_per_turn": [],
                                     "cached_tokens_per_turn": []},
            "output_tokens": chat_usage["completion_tokens"],
            "output_tokens_details": {"reasoning_tokens": reasoning, "tool_output_tokens": 0, "output_tokens_per_turn": [],
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
