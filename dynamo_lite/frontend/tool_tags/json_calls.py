"""The structural tags of the formats whose calls are JSON objects: hermes (and longcat, the same with its own
tags), vLLM's own builders; llama, xgrammar's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from dynamo_lite.frontend.tool_tags.shapes import Choice, Fn, Shape, any_text, json_schema, separated, tag, triggered

THINK = ("<think>", "</think>")


def hermes_style(start: str, end: str) -> Callable[[Sequence[Fn], Choice], Shape]:
    """`start`{"name": "NAME", "arguments": {...}}`end`, with or without newlines inside the tags."""

    def build(tools: Sequence[Fn], choice: Choice) -> Shape:
        tags = [tag(begin + t.name + '", "arguments": ', json_schema(t.arguments), close)
                for t in tools for begin, close in ((start + '\n{"name": "', "}\n" + end),
                                                    (start + '{"name": "', "}" + end))]  # fmt: skip
        if choice == "auto":
            return triggered([start], tags) if tags else any_text()
        return separated(tags, stop_after_first=choice == "forced")

    return build


def llama(tools: Sequence[Fn], choice: Choice) -> Shape:
    """{"name": "NAME", "parameters": {...}}, after any text (a named tool: only the call)."""
    tags = [tag('{"name": "' + t.name + '", "parameters": ', json_schema(t.arguments), "}") for t in tools]
    if choice == "forced":
        return tags[0]
    if choice == "auto" and not tags:
        return any_text(THINK)
    return triggered(['{"name": '], tags, THINK, at_least_one=choice == "required")


BUILDERS: dict[str, Callable[[Sequence[Fn], Choice], Shape]] = {
    "hermes": hermes_style("<tool_call>", "</tool_call>"),
    "longcat": hermes_style("<longcat_tool_call>", "</longcat_tool_call>"),
    "llama": llama,
}
