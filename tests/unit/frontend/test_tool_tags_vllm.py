"""What the engine holds a tool-calling answer to (its `structured_outputs`), against vLLM 0.32's own: for every
tool-call parser of the frontend, the request adjusted by vLLM's composed parser of that name, on requests with
each tool_choice, strict and loose tools, parallel_tool_calls false, and response formats."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest as VllmChat

from dynamo_lite.frontend import plan, tool_tags
from dynamo_lite.frontend.schemas import ChatCompletionRequest
from dynamo_lite.frontend.tools import TOOL_PARSER_NAMES
from tests.unit.frontend.held_formats import GRAMMARS, LEGACY
from tests.unit.frontend.parser_outputs import MARKERS

CITY = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city"]}  # fmt: skip


def _tool(name: str, strict: bool | None = None, parameters: Any = CITY) -> dict[str, Any]:
    function: dict[str, Any] = {"name": name}
    if parameters is not None:
        function["parameters"] = parameters
    return {"type": "function", "function": function if strict is None else {**function, "strict": strict}}


SCHEMA = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "properties": {"a": {}}}}}
TWO = [_tool("a"), _tool("b", True)]
BODIES: list[dict[str, Any]] = [
    {"tools": [_tool("a")], "tool_choice": "required"},
    {"tools": TWO, "tool_choice": "required"},
    {"tools": [_tool("a", False), _tool("b", True, None)], "tool_choice": "required"},
    {"tools": TWO, "tool_choice": "required", "parallel_tool_calls": False},
    {"tools": TWO, "tool_choice": {"type": "function", "function": {"name": "b"}}},
    {"tools": TWO, "tool_choice": {"type": "function", "function": {"name": "a"}}, "parallel_tool_calls": False},
    {"tools": [_tool("a")], "tool_choice": "auto"},
    {"tools": [_tool("a")]},
    {"tools": TWO, "tool_choice": "auto"},
    {"tools": [_tool("a")], "tool_choice": "auto", "parallel_tool_calls": False},
    {"tools": TWO, "tool_choice": "auto", "parallel_tool_calls": False},
    {"tools": [_tool("a", True)], "tool_choice": "auto", "response_format": {"type": "json_object"}},
    {"tools": [_tool("a", True)], "tool_choice": "auto", "response_format": SCHEMA},
    {"tools": [_tool("a", True)], "tool_choice": "auto", "structured_outputs": {"regex": "[a-z]+"}},
    {"tools": [_tool("a", True)], "tool_choice": "auto", "structured_outputs": {"choice": ["yes", "no"]}},
    *({"tools": [_tool("a", True)], "tool_choice": "auto", **held} for held in (*GRAMMARS, LEGACY)),
    {"tools": [_tool("a")], "tool_choice": "auto", "parallel_tool_calls": False, **GRAMMARS[1]},
    {"tools": [_tool("a")], "tool_choice": "auto", "response_format": SCHEMA},
    {"tools": [_tool("a")], "tool_choice": "auto", "response_format": SCHEMA, "parallel_tool_calls": False},
    {"tools": [_tool("a")], "tool_choice": "none", "response_format": SCHEMA},
    {"tools": [_tool("a", False)], "tool_choice": "required", "response_format": SCHEMA},
    {"response_format": SCHEMA},
]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from transformers import AutoTokenizer

    from dynamo_lite.engines.models.tiny import train_tokenizer

    out: Path = tmp_path_factory.mktemp("tiny-tags")
    train_tokenizer(out)
    tok = AutoTokenizer.from_pretrained(str(out))
    tok.add_special_tokens({"additional_special_tokens": MARKERS})  # the vocabulary vLLM's parsers look up
    return tok


def _held(fields: dict[str, Any] | None) -> dict[str, Any]:
    """structured_outputs' set fields, JSON text decoded."""
    out = {}
    for key, value in (fields or {}).items():
        if value is None or value is False or key in ("disable_any_whitespace", "disable_additional_properties",
                                                      "whitespace_pattern", "_backend", "_backend_was_auto"):
            continue
        out[key] = json.loads(value) if key in ("structural_tag", "json") and isinstance(value, str) else value
    return out


def vllm_held(tokenizer: Any, name: str, body: dict[str, Any], level: str) -> dict[str, Any]:
    from vllm.parser.parser_manager import ParserManager

    theirs = VllmChat(**body)
    composed = ParserManager.get_parser(tool_parser_name=name, enable_auto_tools=True, tool_strict_level=level)
    if theirs.tool_choice != "none":  # vLLM's online renderer adjusts the request only then (no reasoning parser)
        theirs = composed(tokenizer, theirs.tools, chat_template_kwargs={}).adjust_request(theirs)
    held = theirs.structured_outputs if theirs.structured_outputs is not None else theirs.extract_structured_outputs()
    return _held(held.__dict__ if held is not None else None)


@pytest.mark.parametrize("name", sorted(set(TOOL_PARSER_NAMES) - {"openai"}))
@pytest.mark.parametrize("level", ["auto", "function", "parameter"])
def test_the_engine_holds_the_answer_as_vllm_does(tokenizer: Any, name: str, level: str) -> None:
    """At each of vLLM's --tool-strict-level (models[].tool_strict_level)."""
    for i, extra in enumerate(BODIES):
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **extra}
        ours = plan.tool_held(ChatCompletionRequest.model_validate(body), name, level)
        assert _held(ours) == vllm_held(tokenizer, name, body, level), (i, extra)


def test_the_tables_are_vllm_s() -> None:
    """The parsers that read required / named in their own format, and the structural tag model of each."""
    import vllm.tool_parsers as vllm_tools

    for name in set(TOOL_PARSER_NAMES) - {"openai"}:
        cls = vllm_tools.ToolParserManager.get_tool_parser(name)
        assert (name in tool_tags.NATIVE) is (not cls.supports_required_and_named), name
        model = tool_tags.TAGGED.get(name, (None, False))[0]
        assert model == cls.structural_tag_model, name
