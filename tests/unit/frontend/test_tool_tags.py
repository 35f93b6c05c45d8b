"""tool_choice required, named, and auto with a strict tool, for the formats vLLM 0.32 holds to the model's own
format: what the mock engine writes under the frontend's structural tag is read back by the frontend's own
parser into the call asked for; and the answer's content and finish reason, whole and streamed, are vLLM's."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from dynamo_lite.config.schema import ModelSpec
from dynamo_lite.engines.mock.output import instance, script_for, script_pieces
from dynamo_lite.frontend import plan, tool_tags
from dynamo_lite.frontend.choice import ChatChoice
from dynamo_lite.frontend.request import Outcome, Piece
from dynamo_lite.frontend.schemas import ChatCompletionRequest

CITY = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
        "required": ["city", "days"], "additionalProperties": False}  # fmt: skip
TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}},
         {"type": "function", "function": {"name": "weather", "parameters": CITY, "strict": True}}]  # fmt: skip
CHOICES = ["required", {"type": "function", "function": {"name": "weather"}}, "auto"]
JSON_FORMATS = ["hermes", "qwen3_json", "longcat", "llama3_json", "llama4_json", "deepseek_v3", "deepseek_v31"]


def answer(parser: str, fields: dict[str, Any], text: str | None = None, stream: bool = False,
           finish: str = "stop") -> tuple[list[dict[str, Any]], dict[str, Any]]:  # fmt: skip
    """(the stream's choices, or the whole answer's message choice as one) for an output: `text`, else what the
    mock engine writes under the structured_outputs the frontend sends."""
    body = ChatCompletionRequest.model_validate({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                                                 "tools": TOOLS, **fields})  # fmt: skip (`fields` may set tools)
    spec = ModelSpec(name="m", path="x", tool_call_parser=parser)
    if text is None:
        text = script_for(None, plan.tool_held(body, parser), 7)
        assert text is not None
    choice = ChatChoice(0, plan.chat_options(body, spec), str)
    pieces = script_pieces(text) or [""]
    deltas = [json.loads(json.dumps(d)) for p in pieces if (d := choice.delta(Piece(p, None, None))) is not None]
    outcome = Outcome(len(pieces), 0, finish, (), 0)
    if stream:
        return [*deltas, choice.last(outcome)], {}
    return deltas, choice.message(outcome)


@pytest.mark.parametrize("parser", sorted(set(tool_tags.TAGGED) - {"kimi_k3"}))
@pytest.mark.parametrize("tool_choice", CHOICES[:2], ids=["required", "named"])
def test_what_the_mock_writes_under_a_tag_is_the_grammar_s_and_reads_back(parser: str, tool_choice: Any) -> None:
    """Each format's tag: the text the mock writes under it is accepted by xgrammar's own grammar of the tag (as a
    real engine would hold it), and the frontend's parser of the format reads it back as the call written."""
    from xgrammar import Grammar
    from xgrammar.testing import _is_grammar_accept_string

    fields = {"tool_choice": tool_choice, "tools": TOOLS[1:]}
    body = ChatCompletionRequest.model_validate({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                                                 **fields})  # fmt: skip
    held = plan.tool_held(body, parser)
    text = script_for(None, held, 7)
    assert text is not None and _is_grammar_accept_string(Grammar.from_structural_tag(held["structural_tag"]), text)
    _, whole = answer(parser, fields, text)
    (call,) = whole["message"]["tool_calls"]
    assert call["function"]["name"] == "weather"
    assert json.loads(call["function"]["arguments"]) == instance(CITY, CITY, 7)


@pytest.mark.parametrize("parser", JSON_FORMATS)
@pytest.mark.parametrize("tool_choice", CHOICES, ids=["required", "named", "auto"])
def test_the_call_the_engine_is_held_to_is_read_back(parser: str, tool_choice: Any) -> None:
    _, whole = answer(parser, {"tool_choice": tool_choice})
    (call,) = whole["message"]["tool_calls"]
    name = call["function"]["name"]
    assert name == "weather" or not isinstance(tool_choice, dict) and name == "lookup"
    arguments = json.loads(call["function"]["arguments"])
    jsonschema.validate(arguments, CITY if name == "weather" else {"type": "object"})
    assert whole["message"]["content"] == ("" if tool_choice != "auto" else None)
    assert whole["finish_reason"] == ("stop" if isinstance(tool_choice, dict) else "tool_calls")


def test_auto_holds_calls_only_when_a_tool_is_strict_or_one_call_is_asked_for() -> None:
    loose = {"tools": TOOLS[:1], "tool_choice": "auto"}
    body = ChatCompletionRequest.model_validate({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                                                 **loose})  # fmt: skip
    assert plan.tool_held(body, "hermes") is None
    one = ChatCompletionRequest.model_validate({**body.model_dump(exclude_none=True), "parallel_tool_calls": False})
    tag = json.loads(plan.tool_held(one, "hermes")["structural_tag"])
    assert tag["format"]["type"] == "triggered_tags" and tag["format"]["stop_after_first"] is True


def test_required_in_the_model_s_format_streams_the_call_and_finishes_with_tool_calls() -> None:
    text = '<tool_call>\n{"name": "weather", "arguments": {"city": "Oslo", "days": 2}}\n</tool_call>'
    chunks, _ = answer("hermes", {"tool_choice": "required"}, text, stream=True)
    calls = [c for chunk in chunks for c in chunk["delta"].get("tool_calls", ())]
    assert calls[0]["function"]["name"] == "weather"
    assert json.loads("".join(c["function"].get("arguments") or "" for c in calls)) == {"city": "Oslo", "days": 2}
    assert chunks[-1]["finish_reason"] == "tool_calls"
    named, _ = answer("hermes", {"tool_choice": CHOICES[1]}, text, stream=True)
    assert named[-1]["finish_reason"] == "stop"  # a named tool's call ends as the engine ended, as vLLM's


def test_required_without_a_call_is_empty_content_and_still_tool_calls_when_whole() -> None:
    """An engine that held nothing (vLLM's parsers read required so whatever the engine did): no call, vLLM's
    `content: ""`, and a whole answer's finish reason `tool_calls`."""
    _, whole = answer("hermes", {"tool_choice": "required"}, " ")
    assert whole["message"]["content"] == "" and "tool_calls" not in whole["message"]
    assert whole["finish_reason"] == "tool_calls"
    _, text = answer("hermes", {"tool_choice": "required"}, "No tool fits.")
    assert text["message"]["content"] == "No tool fits."
    cut_short = '<tool_call>\n{"name": "weather", "arguments": {"city": "Os'
    for tool_choice in ("required", "auto"):  # a call the output ended inside: streamed as it came, not a call
        streamed, cut = answer("hermes", {"tool_choice": tool_choice}, cut_short, finish="length")
        assert any("tool_calls" in d["delta"] for d in streamed)
        assert cut["message"]["content"] == cut_short and "tool_calls" not in cut["message"]
        assert cut["finish_reason"] == "length"


def test_a_section_that_proves_no_call_is_no_call_in_a_whole_answer() -> None:
    """hermes: the call opened in the stream once its name was read, then its arguments proved not JSON. The
    stream cannot take it back; a whole answer is vLLM's: no call, all of the output its content."""
    text = '<tool_call>\n{"name": "weather", "arguments": {"city": Oslo}}\n</tool_call> Then more.'
    streamed, whole = answer("hermes", {"tool_choice": "auto"}, text)
    assert any("tool_calls" in d["delta"] for d in streamed)
    assert whole["message"]["content"] == text and "tool_calls" not in whole["message"]
    assert whole["finish_reason"] == "stop"


@pytest.mark.parametrize("tool_choice", CHOICES[:2], ids=["required", "named"])
def test_a_call_held_from_the_first_token_under_deepseek_v3_s_thinking_is_a_call(tool_choice: Any) -> None:
    """deepseek_v3's engine gate never thinks without the request's kwargs, so a request that asks to think is held
    to its call from the first token: the frontend reads that output as not thinking (plan.held_at_once), and the
    call is a call, not reasoning."""
    body = ChatCompletionRequest.model_validate({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                                                 "tools": TOOLS[1:], "tool_choice": tool_choice,
                                                 "chat_template_kwargs": {"thinking": True}})  # fmt: skip
    spec = ModelSpec(name="m", path="x", tool_call_parser="deepseek_v31", reasoning_parser="deepseek_v3")
    held = plan.tool_held(body, "deepseek_v31")
    text = script_for(None, held, 7)
    assert text is not None
    for structured, called in ((held, True), (None, False)):  # (without: all of it is read as reasoning)
        choice = ChatChoice(0, plan.chat_options(body, spec, structured=structured), str)
        choice.delta(Piece(text, None, None))
        message = choice.message(Outcome(1, 0, "stop", (), 0))["message"]
        assert bool(message.get("tool_calls")) is called and bool(message["reasoning"]) is not called
