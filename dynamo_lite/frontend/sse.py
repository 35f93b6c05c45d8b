"""OpenAI response envelopes: whole JSON answers, stream chunks and their SSE framing.

One `Shape` per response knows its object names; the choices inside come from choice.py.
A stream chunk's frame (`data: {"id": ..., "object": ..., "created": ..., "model": ...,
"choices": [` ... `]}`) is encoded once per response; each chunk encodes only its choice.
SSE framing is `data: <json>\\n\\n` per event and a final `data: [DONE]\\n\\n`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec

DONE = b"data: [DONE]\n\n"
_encode = msgspec.json.encode


def sse(event: dict[str, Any]) -> bytes:
    """One server-sent event carrying a JSON object."""
    return b"data: " + _encode(event) + b"\n\n"


def usage_body(prompt_tokens: int, completion_tokens: int, cached_tokens: int | None = None,
               reasoning_tokens: int | None = None) -> dict[str, Any]:  # fmt: skip
    """`reasoning_tokens`: None, unless the model has a reasoning parser (as vLLM reports them then)."""
    body: dict[str, Any] = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                            "total_tokens": prompt_tokens + completion_tokens}  # fmt: skip
    if cached_tokens is not None:
        body["prompt_tokens_details"] = {"cached_tokens": cached_tokens}
    if reasoning_tokens is not None:
        body["completion_tokens_details"] = {"reasoning_tokens": reasoning_tokens}
    return body


@dataclass
class Shape:
    """The envelope of one response: chat (`chat.completion`) or completions (`text_completion`)."""

    id: str
    model: str
    created: int
    chat: bool
    include_usage: bool = False  # stream_options.include_usage: `usage: null` in chunks, a usage chunk last
    _head: bytes = field(init=False, repr=False)

    def __post_init__(self) -> None:
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        head = _encode({"id": self.id, "object": obj, "created": self.created, "model": self.model})
        self._head = b"data: " + head[:-1] + b',"choices":['

    def frame(self, choice: dict[str, Any], usage: dict[str, Any] | None = None,
              prompt_token_ids: list[int] | None = None, prompt_text: str | None = None) -> bytes:  # fmt: skip
        """One chunk event holding `choice` (with continuous usage stats, `usage`; the chat stream's first
        chunk of a request with return_token_ids: `prompt_token_ids`, with return_prompt_text: `prompt_text`)."""
        if usage is not None:
            tail = b'],"usage":' + _encode(usage)
        else:
            tail = b'],"usage":null' if self.include_usage else b"]"
        if prompt_token_ids is not None:
            tail += b',"prompt_token_ids":' + _encode(prompt_token_ids)
        if prompt_text is not None:
            tail += b',"prompt_text":' + _encode(prompt_text)
        return self._head + _encode(choice) + tail + b"}\n\n"

    def usage_chunk(self, usage: dict[str, Any]) -> bytes:
        return self._head + b'],"usage":' + _encode(usage) + b"}\n\n"

    def role_chunk(self, index: int, usage: dict[str, Any] | None = None, prompt_token_ids: list[int] | None = None,
                   role: str = "assistant", prompt_text: str | None = None) -> bytes:  # fmt: skip
        """Chat streams open each choice with the answer's role, as OpenAI does."""
        return self.frame({"index": index, "delta": {"role": role, "content": ""}, "logprobs": None,
                           "finish_reason": None}, usage, prompt_token_ids, prompt_text)  # fmt: skip

    def full(self, choices: list[dict[str, Any]], usage: dict[str, Any],
             extra: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
        body = {"id": self.id, "object": "chat.completion" if self.chat else "text_completion",
                "created": self.created, "model": self.model, "choices": choices, "usage": usage}  # fmt: skip
        if extra:
            body.update(extra)
        return body
