"""MiniMax M3's tool calls, as vLLM's minimax_m3 parser reads them.

Every tag is prefixed by the `]<]minimax[>[` marker; parameters are elements named after the argument,
which may nest (an element holding elements is an object, or a list where its schema says array):

    ]<]minimax[>[<tool_call>
    ]<]minimax[>[<invoke name="create_order">
    ]<]minimax[>[<user_id>42]<]minimax[>[</user_id>
    ]<]minimax[>[<items>]<]minimax[>[<item>]<]minimax[>[<sku>b-1]<]minimax[>[</sku>]<]minimax[>[</item>]<]minimax[>[</items>
    ]<]minimax[>[</invoke>
    ]<]minimax[>[</tool_call>

Leaf values are typed by the tool's schema, as vLLM types them; text beside child elements is kept under
`$text`.
"""

from __future__ import annotations

import json
from typing import Any

from dynamo_lite.frontend.tools.base import ParsedCall, ToolParser, items, skip_space, wrapped
from dynamo_lite.frontend.tools.coerce import coerce_text, schema_types

NAMESPACE = "]<]minimax[>["
_INVOKES = ((f'{NAMESPACE}<invoke name="', '">'), (f"{NAMESPACE}<invoke name='", "'>"), (f"{NAMESPACE}<invoke name=", ">"))
_INVOKE_END = f"{NAMESPACE}</invoke>"
_MAX_DEPTH = 128

Element = str | list[tuple[str, Any]]


class MiniMaxM3Parser(ToolParser):
    START, END = f"{NAMESPACE}<tool_call>", f"{NAMESPACE}</tool_call>"
    markers = (START,)
    TAGS = (END, _INVOKE_END)
    engine = True

    @classmethod
    def render(cls, name: str, args: Any) -> str:
        params = "".join(f"{NAMESPACE}<{k}>{v if isinstance(v, str) else json.dumps(v)}{NAMESPACE}</{k}>"
                         for k, v in items(args))  # fmt: skip
        return f'{cls.START}\n{NAMESPACE}<invoke name="{name}">\n{params}\n{_INVOKE_END}\n{cls.END}'

    def take(self, buffer: str, final: bool) -> tuple[list[ParsedCall], int] | None:
        piece = wrapped(buffer, self.START, self.END, final)
        if piece is None:
            return None
        calls, body, i = [], piece[0], 0
        while True:
            i = skip_space(body, i)
            head = next(((start, stop) for start, stop in _INVOKES if body.startswith(start, i)), None)
            if head is None:
                break
            name_end = body.find(head[1], i + len(head[0]))
            end = body.find(_INVOKE_END, name_end) if name_end >= 0 else -1
            if name_end < 0 or (end < 0 and not final):
                break
            end = len(body) if end < 0 else end  # the output ended inside the call: its complete parameters
            name = body[i + len(head[0]):name_end].strip()
            arguments = _object(_params(body[name_end + len(head[1]):end]), {"properties": self.tools.get(name, {})})
            calls.append(ParsedCall(name, json.dumps(arguments, ensure_ascii=False)))
            i = end + len(_INVOKE_END)
        return calls, piece[1]


def _element(text: str, pos: int, depth: int) -> tuple[str, Element, int] | None:
    """The element starting at `pos` (after its namespace marker): its name, its text or child elements, and where
    it ends; None if it is malformed or not closed."""
    start = pos + len(NAMESPACE) + 1
    name_end = text.find(">", start)
    name = text[start:name_end] if name_end > start else ""
    if depth > _MAX_DEPTH or not name.strip() or name.startswith("/"):
        return None
    close, pos = f"{NAMESPACE}</{name}>", name_end + 1
    texts: list[str] = []
    children: list[tuple[str, Element]] = []
    while True:
        marker = text.find(NAMESPACE, pos)
        if marker < 0:
            return None
        texts.append(text[pos:marker])
        if text.startswith(close, marker):
            pos = marker + len(close)
            break
        child = _element(text, marker, depth + 1) if text.startswith(NAMESPACE + "<", marker) else None
        if child is None:
            return None
        children.append(child[:2])
        pos = child[2]
    body = "".join(texts)
    if not children:
        return name, body, pos
    if body.strip():
        field = "$text"
        while any(n == field for n, _ in children):
            field = "$" + field
        children.append((field, body))
    return name, children, pos


def _params(raw: str) -> list[tuple[str, Element]]:
    """The parameters of one invoke, up to the first that is malformed or not closed."""
    params: list[tuple[str, Element]] = []
    pos = skip_space(raw, 0)
    while raw.startswith(NAMESPACE + "<", pos) and (element := _element(raw, pos, 1)) is not None:
        params.append(element[:2])
        pos = skip_space(raw, element[2])
    return params


def _container(schema: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The first array or object alternative a schema allows."""
    declared = schema.get("type")
    for kind in ("array", "object"):
        if declared == kind or (isinstance(declared, list) and kind in declared):
            return kind, schema
    if declared is None:
        if "items" in schema:
            return "array", schema
        if "properties" in schema or "additionalProperties" in schema:
            return "object", schema
    for key in ("anyOf", "oneOf"):
        for choice in schema.get(key) or ():
            if isinstance(choice, dict) and (found := _container(choice)):
                return found
    return None


def _value(value: Element, schema: Any) -> Any:
    schema = schema if isinstance(schema, dict) else None
    container = _container(schema) if schema is not None else None
    if isinstance(value, str):
        if schema is None:
            return value
        types = schema_types(schema)
        if container is not None and "string" not in types and not value.strip():
            return [] if container[0] == "array" else {}
        return coerce_text(value, types)
    if container is not None and container[0] == "array":
        return [_value(child, container[1].get("items")) for _, child in value]
    return _object(value, container[1] if container is not None else None)


def _object(elements: list[tuple[str, Element]], schema: dict[str, Any] | None) -> dict[str, Any]:
    """Named elements as an object; a name repeated collects its values into a list."""
    properties = (schema or {}).get("properties") or {}
    additional = (schema or {}).get("additionalProperties")
    out: dict[str, Any] = {}
    repeated: set[str] = set()
    for name, element in elements:
        value = _value(element, properties.get(name, additional))
        if name not in out:
            out[name] = value
        elif name in repeated:
            out[name].append(value)
        else:
            out[name] = [out[name], value]
            repeated.add(name)
    return out
