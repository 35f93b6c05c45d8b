"""dots.llm's tool calls, as vLLM 0.32's dots parser reads them (its whole answer).

Calls come in blocks, each one or more invokes, their parameters as text:

    <dots_function_call>
    <invoke name="search">
    <parameter name="query">weather in Shanghai</parameter>
    </invoke>
    </dots_function_call>

or a JSON object, `{"name": ..., "arguments": {...}}` (`parameters` too), as the block. A call of a function the
request does not list is no call. A parameter is typed by the tool's schema (its `type`, through a local `$ref`
and the first non-null anyOf / oneOf / allOf alternative): `null` is null for any type, a string type is the text,
integer / number / boolean are read as vLLM reads them, other types as JSON if they are; a parameter the schema
does not describe is text.

A block never closed is no call. The content is the text before the first block, and all of the output when no
block has a call; the text between and after the blocks is dropped. Till a block has a call, what follows the
first one is held back (a later block may have one, which makes it no content).
"""

from __future__ import annotations

import json
import re
from typing import Any

from dynamo_lite.frontend.tools.base import ParsedCall, ToolParser, items, skip_space

START, END = "<dots_function_call>", "</dots_function_call>"
_BLOCK = re.compile(rf"{re.escape(START)}\s*(.*?)\s*{re.escape(END)}", re.S)
_INVOKE = re.compile(r"<invoke\s+name\s*=\s*(?P<name>[^>]+)>(?P<body>.*?)</invoke>", re.S)
_PARAM = re.compile(r"<parameter\s+name\s*=\s*(?P<name>[^>]+)>(?P<value>.*?)</parameter>", re.S)


class DotsParser(ToolParser):
    markers = (START,)
    TAGS = (END,)

    @classmethod
    def render(cls, name: str, args: Any) -> str:
        params = "".join(f'<parameter name="{k}">{v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)}'
                         "</parameter>\n" for k, v in items(args))  # fmt: skip
        return f'{START}\n<invoke name="{name}">\n{params}</invoke>\n{END}'

    def take(self, buffer: str, final: bool) -> tuple[list[ParsedCall], int] | None:
        """The calls of the first closed block that has any, the blocks before it (no calls) dropped with it."""
        i = skip_space(buffer, 0)
        if not buffer.startswith(START, i):
            return None
        for block in _BLOCK.finditer(buffer, i):
            calls = self._block(block.group(1).strip())
            if calls:
                return calls, block.end()
        return None

    def _block(self, body: str) -> list[ParsedCall]:
        if body.startswith("<invoke"):
            found = [(_name(m["name"]), self._arguments(_name(m["name"]), m["body"])) for m in _INVOKE.finditer(body)]
        else:
            try:
                obj = json.loads(body)
            except ValueError:
                return []
            if not isinstance(obj, dict):
                return []
            found = [(obj.get("name"), obj.get("arguments", obj.get("parameters", {})) or {})]
        return [ParsedCall(name, json.dumps(args, ensure_ascii=False)) for name, args in found
                if isinstance(name, str) and name in self.tools and isinstance(args, dict)]  # fmt: skip

    def _arguments(self, name: str, body: str) -> dict[str, Any]:
        properties = self.tools.get(name) or {}
        defs = self.defs.get(name) or {}
        args: dict[str, Any] = {}
        for param in _PARAM.finditer(body):
            key = _name(param["name"])
            kind = (_type(properties[key], defs) or "string") if isinstance(properties, dict) and key in properties \
                else "string"  # fmt: skip
            args[key] = _value(param["value"].strip(), kind)
        return args


def _name(text: str) -> str:
    """A name as written in its attribute: spaces and one pair of matching quotes off."""
    text = text.strip()
    return text[1:-1] if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'" else text


def _type(schema: Any, defs: Any, depth: int = 0) -> Any:
    """The type a parameter's schema gives (None: none found), as vLLM resolves it."""
    if not isinstance(schema, dict) or depth > 10:
        return None
    if "type" in schema:
        return schema["type"]
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        return _type(defs.get(ref.rsplit("/", 1)[-1]) if isinstance(defs, dict) else None, defs, depth + 1)
    for keyword in ("anyOf", "oneOf", "allOf"):
        alternatives = schema.get(keyword)
        for alternative in alternatives if isinstance(alternatives, list) else ():
            if isinstance(alternative, dict) and alternative.get("type") == "null":
                continue
            if (found := _type(alternative, defs, depth + 1)) is not None:
                return found
    return None


def _value(text: str, kind: Any) -> Any:
    if text.lower() == "null":
        return None
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    kind = (kind if isinstance(kind, str) else str(kind)).lower()
    if kind in ("string", "str", "text"):
        return text
    if kind in ("integer", "int"):
        try:
            return int(text)
        except ValueError:
            return text
    if kind in ("number", "float"):
        try:
            number = float(text)
        except ValueError:
            return text
        return int(number) if number.is_integer() else number
    if kind in ("boolean", "bool"):
        return text.lower() in ("true", "1")
    try:
        return json.loads(text)
    except ValueError:
        return text
