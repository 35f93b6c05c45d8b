"""The structural tags of the formats that write a call's arguments as XML-like tags: qwen_3_coder and mimo
(xgrammar's builtins, reasoning disabled), glm_4_7, minimax and kimi_k3 (vLLM's own builders).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from dynamo_lite.frontend.tool_tags.shapes import (Choice, Fn, Shape, any_text, const, either, json_schema, optional,
                                                   plus, regex, separated, sequence, star, tag, triggered)  # fmt: skip

Builder = Callable[[Sequence[Fn], Choice], Shape]
THINK = ["<think>", "</think>"]


def _one_of(elements: list[Shape]) -> Shape:
    return elements[0] if len(elements) == 1 else either(*elements)


def xgrammar_xml(begin: str, close: str, end: str, trigger: str, excludes: Sequence[str], idle: Sequence[str],
                 style: str = "qwen_xml") -> Builder:  # fmt: skip
    """`begin`NAME`close`ARGUMENTS`end` (arguments in xgrammar's XML `style`), after any text excluding `excludes`
    (`idle` when there is no call); a named tool: only the call. xgrammar's qwen_3_coder, mimo and glm_4_7."""

    def build(tools: Sequence[Fn], choice: Choice) -> Shape:
        tags = [tag(begin + t.name + close, json_schema(t.arguments, style), end) for t in tools]
        if choice == "forced":
            return tags[0]
        if not tags:
            return any_text(idle)
        return triggered([trigger], tags, excludes, at_least_one=choice == "required")

    return build


# <tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n...\n</function>\n</tool_call>
qwen_3_coder = xgrammar_xml("<tool_call>\n<function=", ">\n", "\n</function>\n</tool_call>",
                            "<tool_call>\n<function=", THINK, THINK)  # fmt: skip
# <tool_call><function=NAME><parameter=KEY>VALUE</parameter>...</function></tool_call>
_MIMO_TEXT = [*THINK, "</tool_call>", "<function="]
mimo = xgrammar_xml("<tool_call><function=", ">", "</function></tool_call>", "<tool_call>", _MIMO_TEXT,
                    ["<tool_call>", *_MIMO_TEXT])  # fmt: skip

# GLM-4.7: <tool_call>NAME<arg_key>KEY</arg_key><arg_value>VALUE</arg_value>...</tool_call>, a string value raw,
# others JSON.
GLM_TOKENS = [*THINK, "<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"]
_GLM_TEXT = [e for e in GLM_TOKENS if e != "<tool_call>"]
_glm_builtin = xgrammar_xml("<tool_call>", "", "</tool_call>", "<tool_call>", _GLM_TEXT, GLM_TOKENS, "glm_xml")


def _glm_value(prop: dict[str, Any]) -> Shape:
    """A loose tool's argument value: one of its enum, raw text for a string, else JSON of its type."""
    if "enum" in prop:
        return _one_of([const(v if isinstance(v, str) else json.dumps(v)) for v in prop["enum"]])
    kind = prop.get("type")
    if isinstance(kind, list):
        values = [_glm_value({"type": t}) for t in kind if t != "string"]
        return _one_of(values + [any_text(GLM_TOKENS)] if "string" in kind else values)
    return any_text(GLM_TOKENS) if kind in (None, "string") else json_schema({"type": kind})


def _glm_loose(parameters: Any) -> Shape:
    """A loose tool's arguments: any of its keys, any number of times, each with its value's basic type; any
    arguments unless its parameters are a plain object schema with properties."""
    properties = parameters.get("properties")
    if (not isinstance(properties, dict) or not properties or parameters.get("additionalProperties") is True
            or any(k in parameters for k in ("$ref", "allOf", "anyOf", "oneOf", "patternProperties"))):
        return json_schema(True, "glm_xml")
    return star(_one_of([sequence(const(f"<arg_key>{key}</arg_key><arg_value>"), _glm_value(prop),
                                   const("</arg_value>")) for key, prop in properties.items()]))  # fmt: skip


def glm_4_7(tools: Sequence[Fn], choice: Choice) -> Shape:
    """<tool_call>NAME<arg_key>KEY</arg_key><arg_value>VALUE</arg_value>...</tool_call>, after any text (required /
    named: only calls). Only strict tools: xgrammar's builtin; else a strict tool's arguments are held to its
    schema, a loose one's to its keys and their value types."""
    if tools and all(t.strict for t in tools):
        return _glm_builtin(tools, choice)
    tags = [tag("<tool_call>" + t.name, json_schema(t.arguments, "glm_xml") if t.strict
                else _glm_loose(t.parameters or {}), "</tool_call>") for t in tools]  # fmt: skip
    if choice == "auto":
        return triggered(["<tool_call>"], tags, _GLM_TEXT)
    return separated(tags, stop_after_first=choice == "forced")


def minimax(tools: Sequence[Fn], choice: Choice) -> Shape:
    """<minimax:tool_call>\\n<invoke name="NAME">\\n<parameter name="KEY">VALUE</parameter>...</invoke>\\n...
    </minimax:tool_call>, after any text (required / named: only the calls, after a newline)."""
    calls = [tag(f'<invoke name="{t.name}">\n', json_schema(t.arguments, "minimax_xml"), "</invoke>\n")
             for t in tools]  # fmt: skip
    if choice == "auto":
        block = tag("<minimax:tool_call>\n", separated(calls), "</minimax:tool_call>")
        return triggered(["<minimax:tool_call>"], [block], THINK) if calls else any_text(THINK)
    return sequence(const("\n<minimax:tool_call>\n"), separated(calls, stop_after_first=choice == "forced"),
                    const("</minimax:tool_call>"))  # fmt: skip


# Kimi-K3's XTML channels: <|open|>NAME ATTRS<|sep|> ... <|close|>NAME<|sep|>.
K3_OPEN, K3_CLOSE, K3_SEP, K3_END_OF_MSG = "<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"
_K3_TYPES = {"string": "string", "integer": "number", "number": "number", "boolean": "boolean", "null": "null",
             "object": "object", "array": "array"}  # fmt: skip
_K3_ARG_CLOSE = f"{K3_CLOSE}argument{K3_SEP}"
_K3_ANY_ARGUMENT = tag(K3_OPEN + "argument ", sequence(regex(r"[^<]*" + K3_SEP.replace("|", r"\|")),
                                                      any_text([K3_CLOSE])), _K3_ARG_CLOSE)  # fmt: skip


def _k3_attr(value: str) -> str:
    return str(value).replace("&", "&amp;").replace('"', "&quot;")


def _k3_string(prop: dict[str, Any]) -> Shape:
    """A raw string value: one of its enum (or const), of its length bounds (no "<|" inside), else any text."""
    values = prop.get("enum")
    if values is None and isinstance(prop.get("const"), str):
        values = [prop["const"]]
    if (isinstance(values, list) and 0 < len(values) <= 256 and all(isinstance(v, str) for v in values)
            and not any("<|" in v for v in values)):
        return _one_of([const(v) for v in values])
    most, least = prop.get("maxLength"), prop.get("minLength", 0)
    if not isinstance(most, int) or most < 0 or most > 4096:
        return any_text([K3_CLOSE])
    if not isinstance(least, int) or least < 0 or least > most:
        least = 0
    return regex(f"(?:[^<]|<[^|]){{{least},{most}}}")


def _k3_argument(key: str, schema: Any, defs: dict[str, Any]) -> Shape:
    """<|open|>argument key="KEY" type="TYPE"<|sep|>VALUE<|close|>argument<|sep|>: a string raw, others JSON held
    to the property's schema (with the root's definitions); any argument when the type is not one JSON type."""
    prop = schema if isinstance(schema, dict) else {}
    kind = prop.get("type")
    xtml = _K3_TYPES.get(kind) if isinstance(kind, str) else None
    if xtml is None:
        return _K3_ANY_ARGUMENT
    value = _k3_string(prop) if xtml == "string" else json_schema(prop | {k: v for k, v in defs.items()
                                                                          if k not in prop})  # fmt: skip
    return tag(f'{K3_OPEN}argument key="{_k3_attr(key)}" type="{xtml}"{K3_SEP}', value, _K3_ARG_CLOSE)


def _k3_arguments(parameters: Any) -> Shape:
    """Any number of its arguments, in any order (at least one when some are required); any arguments when the
    schema declares no properties."""
    props = parameters.get("properties") if isinstance(parameters, dict) else None
    if not isinstance(props, dict) or not props:
        return star(_K3_ANY_ARGUMENT)
    defs = {k: parameters[k] for k in ("$defs", "definitions") if isinstance(parameters.get(k), dict)}
    inner = _one_of([_k3_argument(key, prop, defs) for key, prop in props.items()])
    required = parameters.get("required")
    return plus(inner) if isinstance(required, list) and required else star(inner)


def kimi_k3(tools: Sequence[Fn], choice: Choice) -> Shape:
    """[<|open|>response<|sep|>]TEXT<|close|>response<|sep|>, then (auto: optionally) <|open|>tools<|sep|>
    <|open|>call tool="NAME" index="N"<|sep|>ARGUMENTS<|close|>call<|sep|>...<|close|>tools<|sep|>, then
    optionally <|close|>message<|sep|>."""
    response = [optional(const(f"{K3_OPEN}response{K3_SEP}")),
                tag("", any_text([K3_OPEN, K3_CLOSE, K3_END_OF_MSG]), f"{K3_CLOSE}response{K3_SEP}")]  # fmt: skip
    calls = [tag(f'{K3_OPEN}call tool="{_k3_attr(t.name)}" index="',
                 sequence(regex("[0-9]+"), const('"' + K3_SEP), _k3_arguments(t.arguments)), f"{K3_CLOSE}call{K3_SEP}")
             for t in (tools[:1] if choice == "forced" else tools)]  # fmt: skip
    channel = tag(f"{K3_OPEN}tools{K3_SEP}", separated(calls), f"{K3_CLOSE}tools{K3_SEP}")
    held = [optional(channel) if choice == "auto" else channel] if calls else []
    return sequence(*response, *held, optional(const(f"{K3_CLOSE}message{K3_SEP}")))


BUILDERS: dict[str, Builder] = {
    "qwen_3_coder": qwen_3_coder,
    "mimo": mimo,
    "glm_4_7": glm_4_7,
    "minimax": minimax,
    "kimi_k3": kimi_k3,
}
