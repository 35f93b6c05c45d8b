"""Anthropic's Messages API translation (anthropic.py): a request into the chat request that serves it (as
vLLM's `to_chat_completion_request`), and chat choices back into a message and Anthropic's stream events."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dynamo_lite.frontend.anthropic import (
    CountTokensRequest,
    MessagesRequest,
    Reply,
    anthropic_param,
    chat_body,
    stop_reason,
)
from dynamo_lite.frontend.errors import ApiError
from dynamo_lite.frontend.request import Outcome
from tests.unit.frontend.conftest import named_events

TOOL = {"name": "get_weather", "description": "Weather.", "input_schema": {"type": "object"}}
USAGE = {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13, "prompt_tokens_details": {"cached_tokens": 4}}


def chat_of(**body: Any) -> dict[str, Any]:
    return chat_body(MessagesRequest.model_validate({"model": "m", "max_tokens": 8, **body}))


def test_system_sampling_and_stop_sequences() -> None:
    chat = chat_of(system=[{"type": "text", "text": "x-anthropic-billing-header: cc=1;"},
                           {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
                   messages=[{"role": "user", "content": "Hi"}], stop_sequences=["END"], temperature=0.5, top_k=3,
                   metadata={"user_id": "u"}, stream=True)
    assert chat == {"model": "m", "temperature": 0.5, "top_k": 3, "max_completion_tokens": 8, "stop": ["END"],
                    "stream": True,
                    "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]}


def test_tool_use_and_results_become_chat_tool_turns() -> None:
    messages = [
        {"role": "user", "content": "Weather in Oslo and Rome?"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "Two calls.", "signature": "s"},
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Oslo"}},
            {"type": "tool_use", "id": "t2", "name": "get_weather", "input": {"city": "Rome"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "3 C"},
            {"type": "tool_result", "tool_use_id": "t2", "content": [{"type": "text", "text": "20 C"}]},
            {"type": "text", "text": "Which is warmer?"}]}]
    chat = chat_of(messages=messages, tools=[TOOL], tool_choice={"type": "any", "disable_parallel_tool_use": True})
    calls = [{"id": t, "type": "function", "function": {"name": "get_weather", "arguments": json.dumps({"city": c})}}
             for t, c in (("t1", "Oslo"), ("t2", "Rome"))]
    assert chat["messages"] == [
        {"role": "user", "content": "Weather in Oslo and Rome?"},
        {"role": "assistant", "reasoning": "Two calls.", "tool_calls": calls, "content": "Checking."},
        {"role": "tool", "tool_call_id": "t1", "content": "3 C"},
        {"role": "tool", "tool_call_id": "t2", "content": "20 C"},
        {"role": "user", "content": "Which is warmer?"}]
    assert chat["tools"] == [{"type": "function", "function": {"name": "get_weather", "description": "Weather.",
                                                               "parameters": {"type": "object"}}}]
    assert chat["tool_choice"] == "required" and chat["parallel_tool_calls"] is False
    named = chat_of(messages=messages[:1], tools=[TOOL], tool_choice={"type": "tool", "name": "get_weather"})
    assert named["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert chat_of(messages=messages[:1], tools=[TOOL])["tool_choice"] == "auto"


def test_thinking_and_output_config() -> None:
    hi = [{"role": "user", "content": "Hi"}]
    assert chat_of(messages=hi, thinking={"type": "enabled", "budget_tokens": 2048})["thinking_token_budget"] == 2048
    assert chat_of(messages=hi, thinking={"type": "disabled"})["reasoning_effort"] == "none"
    schema = {"type": "object"}
    chat = chat_of(messages=hi, output_config={"format": {"type": "json_schema", "schema": schema}, "effort": "low"})
    assert chat["response_format"] == {"type": "json_schema", "json_schema": {"name": "json_schema", "schema": schema}}
    assert chat["reasoning_effort"] == "low"
    count = chat_body(CountTokensRequest.model_validate({"model": "m", "messages": hi}))
    assert count == {"model": "m", "messages": [{"role": "user", "content": "Hi"}]}


@pytest.mark.parametrize(("content", "where"), [
    ([{"type": "image", "source": {"type": "url", "url": "u"}}], "messages[0].content[0]"),
    ([{"type": "document", "source": {}}], "messages[0].content[0]"),
    ([{"type": "tool_result", "tool_use_id": "t", "content": [{"type": "image", "source": {}}]}],
     "messages[0].content[0]"),
])  # fmt: skip
def test_what_the_text_models_cannot_take_is_a_400_naming_its_place(content: list[Any], where: str) -> None:
    with pytest.raises(ApiError) as e:
        chat_of(messages=[{"role": "user", "content": content}])
    assert e.value.status == 400 and e.value.param == where and where in e.value.message


def test_chat_fields_in_errors_are_named_as_the_request_names_them() -> None:
    assert anthropic_param("max_completion_tokens") == "max_tokens"
    assert anthropic_param("messages[4].content") == "messages" and anthropic_param("stop") == "stop_sequences"


def outcome(finish: str, stop: int | str | None = None) -> Outcome:
    return Outcome(3, 4, finish, ("w0",), 0, stop)


def test_stop_reasons_as_vllm_maps_them() -> None:
    assert stop_reason(outcome("length"), True, True) == ("max_tokens", None)
    assert stop_reason(outcome("stop", "END"), False, False) == ("stop_sequence", "END")
    assert stop_reason(outcome("stop", 2), False, False) == ("end_turn", None)
    assert stop_reason(outcome("tool_calls"), True, True) == ("tool_use", None)
    assert stop_reason(outcome("stop", "END"), True, False) == ("stop_sequence", "END")  # a call cut short: not run


def test_a_whole_message() -> None:
    call = {"id": "t1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
    choice = {"message": {"role": "assistant", "content": "Hi", "reasoning": "Hm.", "tool_calls": [call]}}
    body = Reply("msg_1", "m").whole(choice, outcome("tool_calls"), USAGE)
    assert [b["type"] for b in body["content"]] == ["thinking", "text", "tool_use"]
    assert body["content"][2] == {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}}
    assert body["stop_reason"] == "tool_use" and "stop_sequence" not in body
    assert body["usage"] == {"input_tokens": 6, "output_tokens": 3, "cache_creation_input_tokens": 0,
                             "cache_read_input_tokens": 4}
    empty = Reply("msg_2", "m").whole({"message": {"role": "assistant", "content": None}}, outcome("stop"), USAGE)
    assert empty["content"] == [{"type": "text", "text": ""}] and empty["stop_reason"] == "end_turn"


def test_a_stream_of_thinking_text_and_a_tool_use() -> None:
    out = Reply("msg_1", "m").events()
    raw = out.opening({"prompt_tokens": 10, "completion_tokens": 0})
    raw += out.chunk({"delta": {"reasoning": "Hm"}})
    raw += out.chunk({"delta": {"content": "Hel"}}) + out.chunk({"delta": {"content": "lo"}})
    call = {"index": 0, "id": "t1", "function": {"name": "f", "arguments": '{"a"'}}
    raw += out.chunk({"delta": {"tool_calls": [call]}})
    raw += out.chunk({"delta": {"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]}})
    raw += out.closing(outcome("tool_calls"), USAGE)
    events = named_events(raw)
    assert [(e["type"], e.get("index"), (e.get("delta") or e.get("content_block") or {}).get("type"))
            for e in events] == [
        ("message_start", None, None),
        ("content_block_start", 0, "thinking"), ("content_block_delta", 0, "thinking_delta"),
        ("content_block_delta", 0, "signature_delta"), ("content_block_stop", 0, None),
        ("content_block_start", 1, "text"), ("content_block_delta", 1, "text_delta"),
        ("content_block_delta", 1, "text_delta"), ("content_block_stop", 1, None),
        ("content_block_start", 2, "tool_use"), ("content_block_delta", 2, "input_json_delta"),
        ("content_block_delta", 2, "input_json_delta"), ("content_block_stop", 2, None),
        ("message_delta", None, None), ("message_stop", None, None)]  # fmt: skip
    assert events[0]["message"]["usage"] == {"input_tokens": 10, "output_tokens": 0}
    assert events[-2]["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert events[-2]["usage"]["output_tokens"] == 3
