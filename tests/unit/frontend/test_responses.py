"""The Responses API's translation: a request into the chat request that serves it (responses.py), and chat
choices back into Responses output items and stream events (responses_out.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dynamo_lite.frontend.errors import ApiError
from dynamo_lite.frontend.request import Outcome
from dynamo_lite.frontend.responses import ResponsesRequest, chat_body, refusal, responses_param
from dynamo_lite.frontend.responses_out import Envelope, ResponseEvents, output_items
from tests.unit.frontend.conftest import named_events

TOOL = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}, "strict": True}


def chat_of(**body: Any) -> dict[str, Any]:
    return chat_body(ResponsesRequest.model_validate({"model": "m", **body}))


def test_instructions_and_text_input() -> None:
    chat = chat_of(instructions="Be brief.", input="Hi", max_output_tokens=5, temperature=0, seed=3, store=True,
                   metadata={"a": "b"}, n=2, logprobs=True)  # (n and logprobs are chat's, not the Responses API's)
    assert chat == {"model": "m", "temperature": 0, "seed": 3, "max_completion_tokens": 5,
                    "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]}


def test_items_become_the_chat_turns_they_stand_for() -> None:
    """As vLLM's construct_input_messages: one assistant turn's reasoning, text and calls merge into one message;
    call outputs are tool turns."""
    items = [{"role": "developer", "content": [{"type": "input_text", "text": "Rules."}]},
             {"type": "message", "role": "user", "content": "Weather?"},
             {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "Hm."}]},
             {"type": "message", "role": "assistant", "status": "completed",
              "content": [{"type": "output_text", "text": "Checking.", "annotations": []}]},
             {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city": "Oslo"}'},
             {"type": "function_call", "call_id": "c2", "name": "get_weather", "arguments": '{"city": "Rome"}'},
             {"type": "function_call_output", "call_id": "c1", "output": "3 C"},
             {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "20 C"}]}]
    messages = chat_of(input=items)["messages"]
    calls = [{"id": c, "type": "function", "function": {"name": "get_weather", "arguments": json.dumps({"city": city})}}
             for c, city in (("c1", "Oslo"), ("c2", "Rome"))]
    assert messages == [
        {"role": "developer", "content": [{"type": "text", "text": "Rules."}]},
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "reasoning": "Hm.", "content": "Checking.", "tool_calls": calls},
        {"role": "tool", "content": "3 C", "tool_call_id": "c1"},
        {"role": "tool", "content": "20 C", "tool_call_id": "c2"}]


def test_an_unfinished_assistant_message_is_continued() -> None:
    chat = chat_of(input=[{"role": "user", "content": "Count"},
                          {"type": "message", "role": "assistant", "status": "incomplete", "content": "1, 2,"}])
    assert chat["continue_final_message"] is True and chat["add_generation_prompt"] is False
    assert "continue_final_message" not in chat_of(input=[{"role": "user", "content": "Count"}])


def test_tools_format_logprobs_reasoning_and_truncation() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    chat = chat_of(input="x", tools=[TOOL], tool_choice={"type": "function", "name": "get_weather"},
                   parallel_tool_calls=False, include=["message.output_text.logprobs"], top_logprobs=2,
                   text={"format": {"type": "json_schema", "name": "n", "schema": schema, "strict": True}},
                   reasoning={"effort": "low"}, truncation="auto")
    assert chat["tools"] == [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"},
                                                               "strict": True}}]
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert chat["parallel_tool_calls"] is False and (chat["logprobs"], chat["top_logprobs"]) == (True, 2)
    assert chat["response_format"] == {"type": "json_schema", "json_schema": {"name": "n", "schema": schema,
                                                                              "strict": True}}
    assert chat["reasoning_effort"] == "low" and chat["truncate_prompt_tokens"] == -1
    assert chat_of(input="x", tools=[TOOL])["tool_choice"] == "auto"


@pytest.mark.parametrize(("body", "param"), [
    ({"tools": [{"type": "web_search_preview"}]}, "tools[0]"),
    ({"tools": [TOOL], "tool_choice": {"type": "mcp"}}, "tool_choice"),
    ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0]"),
    ({"input": [{"type": "message", "role": "user", "content": [{"type": "input_image", "image_url": "u"}]}]},
     "input[0].content[0]"),
    ({"input": [{"type": "reasoning", "encrypted_content": "x"}]}, "input[0]"),
    ({"text": {"format": {"type": "grammar"}}}, "text.format"),
])  # fmt: skip
def test_what_cannot_be_served_is_a_400_naming_the_field(body: dict[str, Any], param: str) -> None:
    with pytest.raises(ApiError) as e:
        chat_of(**{"input": "x", **body})
    assert (e.value.status, e.value.param) == (400, param)


def test_nothing_is_stored_as_vllm_by_default() -> None:
    gone = refusal({"previous_response_id": "resp_1"})
    assert gone is not None and (gone.status, gone.param) == (404, "response_id") and "resp_1" in gone.message
    assert refusal({"background": True}).param == "background"  # type: ignore[union-attr]
    assert refusal({"store": True, "background": False}) is None


def test_chat_fields_in_errors_are_named_as_the_request_names_them() -> None:
    assert responses_param("messages[3].content") == "input"
    assert responses_param("max_completion_tokens") == "max_output_tokens"
    assert responses_param("response_format.json_schema") == "text.format.json_schema"
    assert responses_param("temperature") == "temperature" and responses_param(None) is None


def envelope(**body: Any) -> Envelope:
    return Envelope("resp_1", "m", 7, ResponsesRequest.model_validate({"model": "m", "input": "x", **body}), 16)


def test_a_whole_choice_as_output_items() -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    choice = {"message": {"role": "assistant", "content": "Hi", "reasoning": "Think.", "tool_calls": [call]},
              "logprobs": None, "finish_reason": "tool_calls"}
    items = output_items(choice)
    assert [i["type"] for i in items] == ["reasoning", "message", "function_call"]
    assert items[0]["content"] == [{"type": "reasoning_text", "text": "Think."}]
    assert items[1]["content"][0]["text"] == "Hi" and items[1]["content"][0]["logprobs"] is None
    assert (items[2]["call_id"], items[2]["name"], items[2]["arguments"]) == ("call_1", "f", "{}")
    empty = output_items({"message": {"role": "assistant", "content": None}, "logprobs": None})
    assert [i["type"] for i in empty] == ["message"] and empty[0]["content"][0]["text"] == ""


usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}


def outcome(finish_reason: str) -> Outcome:
    return Outcome(2, 0, finish_reason, ("w0",), 0)


def test_a_stream_of_reasoning_text_and_a_call() -> None:
    out = ResponseEvents(envelope(tools=[TOOL]))
    raw = out.opening({})
    raw += out.chunk({"index": 0, "delta": {"reasoning": "Hm"}, "logprobs": None})
    raw += out.chunk({"index": 0, "delta": {"content": "Hel"}, "logprobs": None})
    raw += out.chunk({"index": 0, "delta": {"content": "lo"}, "logprobs": None})
    raw += out.chunk({"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                                            "function": {"name": "f", "arguments": '{"a"'}}]}})
    raw += out.chunk({"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]}})
    raw += out.chunk({"index": 0, "delta": {}, "finish_reason": "tool_calls"})
    raw += out.closing(outcome("tool_calls"), usage)
    events = named_events(raw)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert [e["type"] for e in events] == [
        "response.created", "response.in_progress",
        "response.output_item.added", "response.content_part.added", "response.reasoning_text.delta",
        "response.reasoning_text.done", "response.content_part.done", "response.output_item.done",
        "response.output_item.added", "response.content_part.added", "response.output_text.delta",
        "response.output_text.delta", "response.output_text.done", "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.delta", "response.function_call_arguments.done",
        "response.output_item.done", "response.completed"]
    assert [e["output_index"] for e in events if e["type"] == "response.output_item.done"] == [0, 1, 2]
    done = events[-1]["response"]
    assert done["status"] == "completed" and done["usage"]["input_tokens"] == 3 and done["tool_choice"] == "auto"
    assert [i["type"] for i in done["output"]] == ["reasoning", "message", "function_call"]
    assert done["output"][1]["content"][0]["text"] == "Hello" and done["output"][2]["arguments"] == '{"a": 1}'
    assert events[0]["response"]["status"] == "in_progress" and events[0]["response"]["output"] == []


def test_a_stream_cut_by_max_output_tokens_is_incomplete_and_an_error_is_an_event() -> None:
    out = ResponseEvents(envelope(include=["message.output_text.logprobs"]))
    lp = [{"token": "a", "logprob": -0.1, "bytes": [97], "top_logprobs": []}]
    raw = out.opening({}) + out.chunk({"index": 0, "delta": {"content": "a"}, "logprobs": {"content": lp}})
    events = named_events(raw + out.closing(outcome("length"), usage))
    assert events[-1]["response"]["status"] == "incomplete"
    assert events[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert events[-1]["response"]["output"][0]["content"][0]["logprobs"] == lp
    failure = {"error": {"message": "boom", "type": "x", "param": None, "code": "worker_failed"}}
    (error,) = named_events(out.failed(failure))
    assert (error["type"], error["code"], error["message"]) == ("error", "worker_failed", "boom")
