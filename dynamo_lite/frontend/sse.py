"""OpenAI response shapes: full JSON answers, stream chunks and their SSE framing.

One `Shape` per endpoint (chat, completions) knows its object names and where
the text goes (`message` / `delta.content` or `text`). SSE framing is
`data: <json>\\n\\n` per event and a final `data: [DONE]\\n\\n`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec

DONE = b"data: [DONE]\n\n"


def sse(event: dict[str, Any]) -> bytes:
    """One server-sent event carrying a JSON object."""
    return b"data: " + msgspec.json.encode(event) + b"\n\n"


def usage_body(prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }


@dataclass
class ChatShape:
    id: str
    model: str
    created: int
    include_usage: bool = False
    _role_sent: bool = field(default=False, repr=False)

    def full(self, text: str, finish_reason: str | None, usage: dict[str, Any]) -> dict[str, Any]:
        message = {"role": "assistant", "content": text, "refusal": None}
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}
        return {"id": self.id, "object": "chat.completion", "created": self.created, "model": self.model,
                "choices": [choice], "usage": usage}  # fmt: skip

    def chunks(self, text: str, finish_reason: str | None) -> list[dict[str, Any]]:
        """The first call also emits the assistant-role chunk, as OpenAI does."""
        out = []
        if not self._role_sent:
            self._role_sent = True
            out.append(self._chunk({"role": "assistant", "content": ""}, None))
        if text or finish_reason is not None:
            out.append(self._chunk({"content": text} if text else {}, finish_reason))
        return out

    def usage_chunk(self, usage: dict[str, Any]) -> dict[str, Any]:
        return {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                "choices": [], "usage": usage}  # fmt: skip

    def _chunk(self, delta: dict[str, Any], finish_reason: str | None) -> dict[str, Any]:
        chunk = {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                 "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]}
        if self.include_usage:
            chunk["usage"] = None
        return chunk


@dataclass
class CompletionShape:
    id: str
    model: str
    created: int
    include_usage: bool = False

    def full(self, text: str, finish_reason: str | None, usage: dict[str, Any]) -> dict[str, Any]:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
        return {"id": self.id, "object": "text_completion", "created": self.created, "model": self.model,
                "choices": [choice], "usage": usage}  # fmt: skip

    def chunks(self, text: str, finish_reason: str | None) -> list[dict[str, Any]]:
        if not text and finish_reason is None:
            return []
        chunk = {"id": self.id, "object": "text_completion", "created": self.created, "model": self.model,
                 "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}]}
        if self.include_usage:
            chunk["usage"] = None
        return [chunk]

    def usage_chunk(self, usage: dict[str, Any]) -> dict[str, Any]:
        return {"id": self.id, "object": "text_completion", "created": self.created, "model": self.model,
                "choices": [], "usage": usage}  # fmt: skip


Shape = ChatShape | CompletionShape
