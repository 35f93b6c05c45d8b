"""What holds a gpt-oss answer to a schema or a tool call: the structural tag vLLM 0.32 builds for Harmony.

A JSON schema cannot hold a Harmony answer, whose messages have headers around their text; vLLM
holds it with an xgrammar structural tag instead (`vllm/parser/harmony.py`), sent to the engine as
`structured_outputs.structural_tag`:
- a response format: optional reasoning (`analysis`), then a `final` message whose text is held;
- tool_choice required or named (or auto, when a tool is `strict`, or with parallel_tool_calls
  false): optional reasoning and commentary, then a message to `functions.NAME` whose text is
  the call's arguments (held to the tool's parameters when it is strict), in any of the header
  spellings gpt-oss writes; under auto a plain final answer is allowed too.

The tags are built as the same JSON vLLM writes (a unit test compares them); vLLM's
`--tool-strict-level` is left at its default, auto.
"""

from __future__ import annotations

import json
from typing import Any

from dynamo_lite.frontend.messages import NamedToolChoice
from dynamo_lite.frontend.schemas import ChatCompletionRequest
from dynamo_lite.frontend.tool_tags import held_arguments, holds, strictness
from dynamo_lite.frontend.tool_tags.shapes import any_text, held_format, json_schema

_END = ["<|end|>", ""]  # a message's end, or a stop token (xgrammar writes those as "")
_CONSTRAINS = (" json", " <|constrain|>json")
_CHANNELS = ("<|channel|>commentary", "<|channel|>analysis", "<|channel|>final")
_CALLS = (" to=functions.{name}{channel}{constrain}<|message|>", "{channel} to=functions.{name}{constrain}<|message|>")


def structured_outputs(body: ChatCompletionRequest, tool_parser: bool, level: str = "auto") -> dict[str, Any] | None:
    """The engine's `structured_outputs` for a gpt-oss chat request (None: not held), as vLLM's HarmonyParser
    adjusts the request; `tool_parser`: the model has Harmony's tool-call parser (`openai`); `level`: the
    model's tool_strict_level."""
    held = body.structured()
    tag = _final_held(held) if held is not None else None
    choice = body.effective_tool_choice()
    if not (tool_parser and body.tools and (choice in ("auto", "required") or isinstance(choice, NamedToolChoice))):
        return _wire(tag)
    auto = choice == "auto"
    level = strictness(body, level, tag)
    if not holds(body, level):
        return _wire(tag)  # no tool is held: the response format alone, as vLLM
    named = choice.function.name if isinstance(choice, NamedToolChoice) else None
    tools = [t for t in body.tools if named is None or t.function.name == named]
    calls = [_tag(begin.format(name=t.function.name, channel=channel, constrain=constrain),
                  json_schema(held_arguments(t, t.function.strict is True or level == "parameter")))
             for t in tools for begin in _CALLS for constrain in _CONSTRAINS for channel in _CHANNELS]
    if auto and tag is None:  # a plain answer is allowed too
        calls += [_tag(f"<|channel|>final{c}<|message|>", any_text()) for c in (*_CONSTRAINS, "")]
    tools_tag = _assemble(True, {"type": "or", "elements": calls})
    if auto and tag is not None:
        tools_tag = {"type": "structural_tag", "format": {"type": "or", "elements": [tools_tag["format"],
                                                                                    tag["format"]]}}  # fmt: skip
    return _wire(tools_tag)


def _final_held(held: dict[str, Any]) -> dict[str, Any] | None:
    """The tag holding the final message's text to a response format (vLLM's `_adjust_output_format`)."""
    content = held_format(held)
    if content is None:
        return None
    if content.get("type") == "json_schema":
        final = {"type": "or", "elements": [_tag(f"<|channel|>final{c}<|message|>", content) for c in _CONSTRAINS]}
    else:
        final = _tag("<|channel|>final<|message|>", content)
    return _assemble(False, final)


def _assemble(commentary: bool, content: dict[str, Any]) -> dict[str, Any]:
    before = [_preamble("analysis"), *([_preamble("commentary")] if commentary else [])]
    return {"type": "structural_tag", "format": {"type": "sequence", "elements": [*before, content]}}


def _preamble(channel: str) -> dict[str, Any]:
    """An optional message on `channel` before the held one."""
    return {"type": "optional", "content": {"type": "sequence", "elements": [
        _tag(f"<|channel|>{channel}<|message|>", any_text(), "<|end|>"),
        {"type": "const_string", "value": "<|start|>assistant"}]}}  # fmt: skip


def _tag(begin: str, content: dict[str, Any], end: Any = None) -> dict[str, Any]:
    return {"type": "tag", "begin": begin, "content": content, "end": _END if end is None else end}


def _wire(tag: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if tag is None else {"structural_tag": json.dumps(tag)}
