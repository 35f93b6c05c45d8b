"""SSE framing and chunk shapes."""

from __future__ import annotations

import json

from dynamo_lite.frontend.sse import DONE, ChatShape, CompletionShape, sse, usage_body


def test_sse_frame() -> None:
    assert sse({"a": 1, "b": "é"}) == b'data: {"a":1,"b":"\xc3\xa9"}\n\n'
    assert DONE == b"data: [DONE]\n\n"


def test_chat_chunks() -> None:
    shape = ChatShape("chatcmpl-1", "m", 123, include_usage=True)
    first = shape.chunks("Hi", None)
    assert [c["choices"][0]["delta"] for c in first] == [{"role": "assistant", "content": ""}, {"content": "Hi"}]
    assert all(c["usage"] is None and c["object"] == "chat.completion.chunk" for c in first)
    last = shape.chunks("", "stop")
    assert len(last) == 1 and last[0]["choices"][0] == {"index": 0, "delta": {}, "logprobs": None,
                                                        "finish_reason": "stop"}
    assert shape.chunks("", None) == []
    use = shape.usage_chunk(usage_body(5, 2, 3))
    assert use["choices"] == [] and use["usage"] == {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7,
                                                      "prompt_tokens_details": {"cached_tokens": 3}}


def test_completion_chunks_and_full() -> None:
    shape = CompletionShape("cmpl-1", "m", 123)
    (chunk,) = shape.chunks(" x", None)
    assert "usage" not in chunk and chunk["choices"][0]["text"] == " x"
    full = shape.full("abc", "length", usage_body(1, 3, 0))
    assert full["object"] == "text_completion" and full["choices"][0]["finish_reason"] == "length"
    json.dumps(full)
