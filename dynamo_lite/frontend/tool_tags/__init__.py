"""What holds a tool-calling answer in the model's own format: the structural tags vLLM 0.32 builds.

vLLM 0.32 parses tool_choice required and a named tool with the model's own tool-call parser, as it parses auto,
for the formats whose parser says it cannot read the JSON list older vLLM held such answers to
(`supports_required_and_named = False`: hermes, qwen3, llama3, the deepseeks, kimi, glm, minimax, ...). Where
the parser names a structural tag model, the engine holds the answer to an xgrammar structural tag that writes
the calls the model's way (`vllm/parser/abstract_parser.py`, `_apply_structural_tag`):
- required: only calls, at least one; a named tool: that one call; auto: text, or calls where the text starts
  one, but only when a tool is `strict`, parallel_tool_calls is false, the model's `tool_strict_level` is
  function or parameter, or (at auto) the format asks for the envelope always (glm45 / glm47: vLLM's
  `default_tool_strict_level` function);
- a call's arguments are held to the tool's parameters only when the tool is `strict` or the level is
  parameter, else to any JSON;
- parallel_tool_calls false stops after the first call;
- under auto with a response format, the answer is either the calls or the response format.

The tags are the JSON vLLM sends the engine (a unit test builds them with vLLM and compares);
`models[].tool_strict_level` is vLLM's `--tool-strict-level`. gpt-oss (Harmony) has its own: harmony_tags.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from dynamo_lite.frontend.errors import ApiError
from dynamo_lite.frontend.messages import NamedToolChoice, Tool
from dynamo_lite.frontend.schemas import ChatCompletionRequest
from dynamo_lite.frontend.tool_tags import deepseek, json_calls, xml
from dynamo_lite.frontend.tool_tags.shapes import Choice, Fn, Shape, either, held_format, single_call

BUILDERS: dict[str, Callable[[Sequence[Fn], Choice], Shape]] = {**json_calls.BUILDERS, **deepseek.BUILDERS,
                                                                 **xml.BUILDERS}

# vLLM's --tool-call-parser -> (its structural tag model, whether it holds the calls' envelope under auto too)
TAGGED: dict[str, tuple[str, bool]] = {
    "hermes": ("hermes", False), "qwen3_json": ("hermes", False), "longcat": ("longcat", False),
    "llama3_json": ("llama", False), "llama4_json": ("llama", False),
    "deepseek_v3": ("deepseek_r1", False), "deepseek_v31": ("deepseek_v3_1", False),
    "deepseek_v32": ("deepseek_v3_2", False), "deepseek_v4": ("deepseek_v4", False),
    "deepseek_v41": ("deepseek_v4_1", False), "kimi_k2": ("kimi", False),
    "qwen3_coder": ("qwen_3_coder", False), "qwen3_xml": ("qwen_3_coder", False), "step3p5": ("qwen_3_coder", False),
    "mimo": ("mimo", False), "glm45": ("glm_4_7", True), "glm47": ("glm_4_7", True), "ling3": ("glm_4_7", False),
    "minimax_m2": ("minimax", False), "kimi_k3": ("kimi_k3", False),
}  # fmt: skip
# The parsers that read required / named answers in their own format, as auto: the tagged ones, mistral (held
# to its own JSON list: `mistral_held`), and those vLLM leaves unheld (no structural tag model).
NATIVE = frozenset(TAGGED) | {"mistral", "gemma4", "minimax_m3", "dots", "poolside_v1"}


def named_tool(body: ChatCompletionRequest) -> Tool | None:
    """The tool a named tool_choice names (a 400 when it is not among the tools); None: no tool is named."""
    choice = body.effective_tool_choice()
    if not isinstance(choice, NamedToolChoice):
        return None
    tool = next((t for t in body.tools or () if t.function.name == choice.function.name), None)
    if tool is None:
        raise ApiError(400, "The tool specified in `tool_choice` does not match any of the specified `tools`.",
                       param="tool_choice", code="invalid_value")
    return tool


def strictness(body: ChatCompletionRequest, level: str, held: dict[str, Any] | None) -> str:
    """The strict level a request is held at (vLLM's `_apply_structural_tag`): the model's, at least function
    when one call is asked for (but under auto with a response format)."""
    if body.parallel_tool_calls is False and not (body.effective_tool_choice() == "auto" and held is not None):
        return "function" if level == "auto" else level
    return level


def holds(body: ChatCompletionRequest, level: str) -> bool:
    """Whether the calls are held at all: always where tool_choice asks for a call; under auto, from the function
    level on, or for a strict tool."""
    return body.effective_tool_choice() != "auto" or level != "auto" or any(t.function.strict is True
                                                                             for t in body.tools or ())  # fmt: skip


def structured_outputs(body: ChatCompletionRequest, tool_parser: str, level: str = "auto") -> dict[str, Any] | None:
    """The engine's `structured_outputs` for a chat request to a model whose tool-call parser is one of `NATIVE`
    (None: nothing held), as vLLM 0.32's parser adjusts the request; `level`: the model's tool_strict_level."""
    held = body.structured()
    choice = body.effective_tool_choice()
    named = named_tool(body)
    if tool_parser not in TAGGED or not body.tools or choice == "none":
        return held
    model, envelope = TAGGED[tool_parser]
    level = strictness(body, "function" if level == "auto" and envelope else level, held)
    auto = choice == "auto"
    if not holds(body, level):
        return held  # no tool is held: the response format alone, as vLLM
    response = held_format(held) if auto and held is not None else None
    simple: Choice = "forced" if named is not None else "required" if response is not None or not auto else "auto"
    tools = [named] if named is not None else body.tools
    strict = [t.function.strict is True or level == "parameter" for t in tools]
    shape = BUILDERS[model]([Fn(t.function.name, held_arguments(t, s), s, t.function.parameters)
                             for t, s in zip(tools, strict, strict=True)], simple)
    if body.parallel_tool_calls is False:
        shape = single_call(shape)
    if response is not None:
        shape = either(shape, response)
    return {"structural_tag": json.dumps({"type": "structural_tag", "format": shape})}


def held_arguments(tool: Tool, strict: bool) -> Any:
    """A tool's arguments as held: its parameters when it is held strictly (`strict`), else any JSON."""
    if not strict:
        return True
    return tool.function.parameters if tool.function.parameters is not None else True


def mistral_held(body: ChatCompletionRequest) -> dict[str, Any] | None:
    """The engine's `structured_outputs` for a chat request to a model of the mistral tool-call parser, as vLLM 0.32's
    parser adjusts it for a Hugging Face tokenizer (`vllm/parser/mistral.py`, `_build_guided_schema_pre_v11`):
    tool_choice required or named holds the answer to a bare JSON list of `{"name", "arguments"}` objects (named:
    one, of that tool), unless the request holds it itself (structured_outputs, or a structural tag response
    format; a JSON response format gives way); else what the request asks."""
    named = named_tool(body)
    own = body.structured_outputs is not None or (body.response_format is not None
                                                  and body.response_format.type == "structural_tag")  # fmt: skip
    if not body.tools or own or (named is None and body.effective_tool_choice() != "required"):
        return body.structured()
    items = [{"type": "object", "properties": {"name": {"type": "string", "enum": [t.function.name]},
                                               "arguments": t.function.parameters or {"type": "object"}},
              "required": ["name", "arguments"]} for t in ([named] if named is not None else body.tools)]  # fmt: skip
    one = {"maxItems": 1} if named is not None else {}
    return {"json": {"type": "array", "minItems": 1, **one, "items": {"type": "object", "anyOf": items}}}
